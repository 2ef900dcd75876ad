"""`python -m bench.gpu_proof [--dry-run] [--model DIR] [--out DIR] [--budget SECONDS]`.

Run through `scripts/gpu-proof`, which installs the carried wheels first on a
GPU machine. Phases, in order, each timed and each allowed to fail alone (the
report says which did and why): environment, model, exllamav2 import (on a GPU
this compiles its CUDA extension the first time), the bare-generator baseline,
the server (`realtime serve --engine exllamav2` as its own process), and the
cancel measurement (in process). A phase that would start after `--budget`
seconds is skipped and named in the report, so the command ends inside a device
call's 10 minutes with whatever it measured. Exit status: 0 when every phase ran
and the cache_salt check held, else 1.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import datetime as dt
import importlib
import platform
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.gpu_proof import report

ROOT = Path(__file__).resolve().parent.parent.parent
MODEL_NAME = "proof"
STORY = [{"role": "user", "content": "Write a long story about a lighthouse."}]


@dataclass(frozen=True)
class Sizes:
    decode_tokens: int
    aggregate_tokens: int
    levels: tuple[int, ...]
    system_words: int
    cancel_samples: int
    cancel_answer: int
    cache_size: int
    structured_samples: int


#: On a GPU: long enough to time decoding well, short enough for the budget.
GPU = Sizes(512, 128, (1, 8, 32), 1000, 5, 3000, 32768, 6)
#: The fake decodes in Python (about a token per half millisecond): small sizes.
DRY = Sizes(24, 8, (1, 8, 32), 400, 2, 2000, 32768, 2)
#: Built models go here, not under --out: a device call brings --out back, not weights.
MODELS = Path(tempfile.gettempdir()) / "realtime-gpu-proof-models"
#: The model built without --model (FP16 safetensors; head dim 512 / 4 heads = 128).
GPU_MODEL = {"hidden_size": 512, "num_layers": 8, "context_length": 4096}


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="scripts/gpu-proof", description=__doc__)
    parser.add_argument("--dry-run", action="store_true", help="run on the fake, no GPU")
    parser.add_argument("--model", type=Path, help="model directory (default: build one)")
    parser.add_argument(
        "--out", type=Path, default=Path("gpu-proof-out"), help="report folder (%(default)s)"
    )
    parser.add_argument(
        "--budget",
        type=float,
        default=480.0,
        help="seconds after which no new phase starts (default %(default)s)",
    )
    return parser


class Run:
    """The report being built, the clock, and the phases."""

    def __init__(self, args: argparse.Namespace):
        self.args = args
        self.sizes = DRY if args.dry_run else GPU
        self.started = time.monotonic()
        self.deadline = self.started + args.budget
        self.doc: dict[str, Any] = {
            "dry_run": bool(args.dry_run),
            "started": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
            "engine": None,
            "machine": {},
            "model": {},
            "sizes": dataclasses.asdict(self.sizes),
            "phases": {},
            "errors": {},
            "skipped": [],
        }

    def log(self, message: str) -> None:
        print(f"[gpu-proof {time.monotonic() - self.started:6.1f}s] {message}", file=sys.stderr)

    def phase(self, name: str, fn: Callable[[], None]) -> bool:
        if time.monotonic() > self.deadline:
            self.log(f"{name}: skipped, out of time")
            self.doc["skipped"].append(name)
            return False
        self.log(f"{name} ...")
        start = time.monotonic()
        try:
            fn()
        except Exception:
            self.doc["errors"][name] = traceback.format_exc()
            self.log(f"{name}: FAILED\n{traceback.format_exc()}")
            return False
        finally:
            self.doc["phases"][f"{name}_s"] = round(time.monotonic() - start, 2)
        return True


def _environment(run: Run) -> None:
    import torch

    machine = run.doc["machine"]
    machine["python"] = platform.python_version()
    machine["torch"] = torch.__version__
    machine["cuda"] = torch.version.cuda
    if run.args.dry_run:
        machine["gpu"] = "none (dry run)"
    else:
        if not torch.cuda.is_available():
            raise RuntimeError("torch sees no CUDA device: run with --dry-run on a CPU machine")
        machine["gpu"] = torch.cuda.get_device_name(0)
        machine["capability"] = ".".join(map(str, torch.cuda.get_device_capability(0)))


def _model(run: Run) -> None:
    from realtime.testing.tiny_model import ModelSize, cached_tiny_model

    if run.args.model is not None:
        path = run.args.model.resolve()
        description = f"{path.name} (given)"
    elif run.args.dry_run:
        path = cached_tiny_model(MODELS)
        description = "the tiny test model (64 wide, 2 layers; the fake ignores its weights)"
    else:
        path = cached_tiny_model(MODELS, size=ModelSize(**GPU_MODEL))
        description = (
            "random-weight Llama, 512 wide, 8 layers, 4 heads of 128, 4096 context, "
            "FP16 safetensors (realtime.testing.tiny_model)"
        )
    run.doc["model"] = {"path": str(path), "description": description}


def _import(run: Run) -> None:
    """Import exllamav2; on a GPU the first import compiles its extension (minutes)."""
    if run.args.dry_run:
        from bench.gpu_proof import fake_serve

        fake_serve.install(run.doc["model"]["path"])
    exllamav2 = importlib.import_module("exllamav2")
    attn = importlib.import_module("exllamav2.attn")
    version = getattr(exllamav2, "__version__", "?")
    run.doc["engine"] = (
        f"fake exllamav2 {version} (realtime.testing.fake_exllamav2)"
        if run.args.dry_run
        else f"exllamav2 {version}"
    )
    run.doc["machine"]["flash_attn_paged"] = bool(attn.has_flash_attn_with_paged)


def _sdpa_probe(run: Run) -> None:
    """On a GPU without flash-attn: which attention backend pays per new sequence length."""
    if run.args.dry_run or run.doc["machine"].get("flash_attn_paged"):
        return
    from bench.gpu_proof.sdpa_probe import probe

    run.doc["sdpa_probe"] = probe()


def _prompt_ids(run: Run) -> list[int]:
    from realtime.model.model_dir import load_model_dir

    files = load_model_dir(run.doc["model"]["path"])
    return files.tokenizer.encode(files.chat_template.render(STORY))


def _bare(run: Run) -> None:
    from bench.gpu_proof.bare import BareGenerator

    sizes = run.sizes
    bare = BareGenerator(run.doc["model"]["path"], cache_size=sizes.cache_size)
    try:
        run.doc["machine"]["paged"] = bare.paged
        prompt = _prompt_ids(run)
        first = bare.warm_up(prompt, sizes.decode_tokens)
        decode = bare.decode(prompt, sizes.decode_tokens)
        run.doc["decode"] = {
            "bare_generator": dataclasses.asdict(decode),
            "bare_generator_first_pass": dataclasses.asdict(first),
            "server": {},
        }
        rows = []
        for streams in sizes.levels:
            agg = bare.aggregate(prompt, streams, sizes.aggregate_tokens)
            rows.append({"streams": streams, "bare_tokens_per_s": agg.tokens_per_s})
        run.doc["concurrency"] = rows
        if not run.args.dry_run and not bare.paged:
            # The server turns torch's cuDNN attention off without flash-attn (see
            # realtime/engine/exllamav2/engine.py): the bare loop once more the same way.
            import torch

            torch.backends.cuda.enable_cudnn_sdp(False)
            same = bare.decode(prompt, sizes.decode_tokens)
            run.doc["decode"]["bare_generator_cudnn_off"] = dataclasses.asdict(same)
    finally:
        bare.close()


def _server_argv(run: Run) -> list[str]:
    launcher = ["-m", "bench.gpu_proof.fake_serve"] if run.args.dry_run else ["-m", "realtime"]
    return [
        *launcher,
        "serve",
        "--engine",
        "exllamav2",
        "--model",
        run.doc["model"]["path"],
        "--model-name",
        MODEL_NAME,
        "--cache-size",
        str(run.sizes.cache_size),
        "--host",
        "127.0.0.1",
        "--port",
        "0",
        "--log-level",
        "warning",
        "--shutdown-grace",
        "2",
    ]


async def _drive(run: Run, base: str) -> None:
    from bench.gpu_proof import served

    sizes = run.sizes
    client = served.ServedClient(base, MODEL_NAME)
    try:
        first, decode = await served.decode_rates(client, sizes.decode_tokens)
        doc = run.doc.setdefault("decode", {"bare_generator": None, "server": {}})
        doc["server"], doc["server_first_pass"] = decode, first
        plain = await served.turns(client, sizes.system_words)
        warmed = await served.turns(client, sizes.system_words, speculative=True)
        run.doc["ttft"] = {
            "turns": dataclasses.asdict(plain),
            "speculative": dataclasses.asdict(warmed),
        }
        run.doc["cached_tokens"] = {
            "second_turn": plain.cached_tokens_warm,
            "second_turn_after_warm_up": warmed.cached_tokens_warm,
        }
        run.doc["salt_isolation"] = await served.salt_isolation(client, sizes.system_words)
        run.doc["structured"] = await served.structured(client, sizes.structured_samples)
        rows = {row["streams"]: row for row in run.doc.get("concurrency") or []}
        for streams in sizes.levels:
            agg = await served.aggregate(client, streams, sizes.aggregate_tokens)
            row = rows.setdefault(streams, {"streams": streams})
            row["server_tokens_per_s"] = agg["tokens_per_s"]
            row["server_tokens"] = agg["tokens"]
        run.doc["concurrency"] = [rows[n] for n in sorted(rows)]
    finally:
        await client.aclose()


def _server(run: Run) -> None:
    from bench.procs import start_server

    log_dir = run.args.out / "logs"
    server = start_server("realtime", _server_argv(run), log_dir, timeout=180)
    run.doc["server_command"] = "python " + " ".join(_server_argv(run))
    try:
        remaining = max(30.0, run.deadline + 30 - time.monotonic())
        asyncio.run(asyncio.wait_for(_drive(run, f"http://127.0.0.1:{server.port}"), remaining))
    except Exception:
        run.log(f"server log tail:\n{server.log_tail(40)}")
        raise
    finally:
        server.stop()


def _cancel(run: Run) -> None:
    from bench.gpu_proof.cancel import measure
    from realtime.engine.exllamav2.engine import ExLlamaV2Engine

    engine = ExLlamaV2Engine(
        run.doc["model"]["path"], model_name=MODEL_NAME, cache_size=run.sizes.cache_size
    )
    run.doc["cancel"] = measure(
        engine, samples=run.sizes.cancel_samples, answer_tokens=run.sizes.cancel_answer
    )


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    args.out = args.out.resolve()
    run = Run(args)
    steps: list[tuple[str, Callable[[], None]]] = [
        ("environment", lambda: _environment(run)),
        ("model", lambda: _model(run)),
        ("import", lambda: _import(run)),
        ("sdpa_probe", lambda: _sdpa_probe(run)),
        ("bare", lambda: _bare(run)),
        ("server", lambda: _server(run)),
        ("cancel", lambda: _cancel(run)),
    ]
    for name, fn in steps:
        ok = run.phase(name, fn)
        # Written after every phase: a call killed at its time limit still returns a report.
        run.doc["seconds"] = round(time.monotonic() - run.started, 1)
        report.write(args.out, run.doc)
        if not ok and name in ("environment", "model", "import"):
            break  # nothing after these can run
    json_path, md_path = report.write(args.out, run.doc)
    sys.stdout.write(md_path.read_text())
    run.log(f"wrote {json_path} and {md_path}")
    salt = run.doc.get("salt_isolation") or {}
    shaped = run.doc.get("structured") or {}
    samples = shaped.get("samples")
    all_valid = samples is not None and (
        shaped.get("json_schema_valid") == samples == shaped.get("tool_required_valid")
    )
    complete = (
        not run.doc["errors"]
        and not run.doc["skipped"]
        and salt.get("isolated") is True
        and all_valid
    )
    return 0 if complete else 1
