"""`python -m bench.gpu_proof.fake_serve serve ...`: `realtime serve` over the exllamav2 fake.

The dry run's server: the real command line (`realtime.cli.main`), with
`realtime.testing.fake_exllamav2` installed as the `exllamav2` package first, so
`--engine exllamav2` runs every line of the engine on a machine without CUDA.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from pathlib import Path

from tokenizers import Tokenizer

from realtime.testing import fake_exllamav2

#: What the dry run's "model" says, over and over: plain words, so every token has text.
TEXT = "the keeper lit the lamp and watched the ships pass in the night "


def printable_logits(model_dir: str | Path) -> Callable[[list[int], int], list[float]]:
    """A model sure of each next token, cycling through the tokens of `TEXT` in the model's
    own tokenizer: never an end token, so answers run to max_tokens, all of it visible."""
    ids = Tokenizer.from_file(str(Path(model_dir) / "tokenizer.json")).encode(TEXT).ids
    size = max(ids) + 1

    def logits(sequence: list[int], prompt_length: int) -> list[float]:
        out = [0.0] * size
        out[ids[len(sequence) % len(ids)]] = 100.0
        return out

    return logits


def install(model_dir: str | Path) -> fake_exllamav2.FakeState:
    """Install the fake in this process (for good), answering with `printable_logits`."""
    state = fake_exllamav2.install()
    state.logits_fn = printable_logits(model_dir)
    return state


#: The model directory, for the engine process's preload hook.
_MODEL_VARIABLE = "GPU_PROOF_FAKE_MODEL"


def install_in_engine_process() -> None:
    """The engine process's preload hook: the same fake, in the process that runs it."""
    install(os.environ[_MODEL_VARIABLE])


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    model = args[args.index("--model") + 1] if "--model" in args else None
    if model is None:
        print("fake_serve: --model DIR is required", file=sys.stderr)
        return 2
    install(model)
    # The engine runs in a process of its own (--engine-process): the fake goes there too.
    from realtime.engine.process.main import PRELOAD_VARIABLE

    os.environ[_MODEL_VARIABLE] = str(model)
    os.environ[PRELOAD_VARIABLE] = "bench.gpu_proof.fake_serve:install_in_engine_process"
    from realtime.cli import main as cli_main

    return cli_main(args)


if __name__ == "__main__":
    raise SystemExit(main())
