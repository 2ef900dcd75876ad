"""Bare sampling loops under a constraint: what an engine does, without an engine.

`sample_under(steps, matcher, ...)` draws tokens at temperature 1 from `steps`
(the next logits, given the tokens so far) with the matcher's mask applied
first, exactly as the cpu engine will. `ModelSteps` runs a transformers causal
LM with its KV cache; `random_steps` draws logits from a seeded normal
distribution (a random-weight model of any vocabulary width).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from realtime.constrain.logits import apply_allowed
from realtime.constrain.matcher import SequenceConstraint

Steps = Callable[[Sequence[int]], torch.Tensor]


@dataclass
class Sampled:
    token_ids: list[int]
    #: True when the answer ended with EOS; False when max_tokens cut it off.
    finished: bool


def sample_under(
    steps: Steps,
    matcher: SequenceConstraint | None,
    *,
    eos_ids: frozenset[int],
    seed: int,
    max_tokens: int,
) -> Sampled:
    generator = torch.Generator().manual_seed(seed)
    out: list[int] = []
    for _ in range(max_tokens):
        logits = steps(out).to(torch.float32)
        if matcher is not None:
            logits = apply_allowed(logits, matcher.allowed())
        token = int(torch.multinomial(torch.softmax(logits, dim=-1), 1, generator=generator))
        if matcher is not None:
            assert matcher.advance(token), matcher.error
        out.append(token)
        if token in eos_ids:
            return Sampled(out, True)
    return Sampled(out, False)


class ModelSteps:
    """Next-token logits of a causal LM after `prompt_ids` and the tokens so far."""

    def __init__(self, model: Any, prompt_ids: Sequence[int]) -> None:
        from transformers import DynamicCache

        self.model = model
        self.prompt = list(prompt_ids)
        self.cache = DynamicCache(config=model.config)
        self.seen = 0  # tokens already in the cache

    @torch.inference_mode()
    def __call__(self, generated: Sequence[int]) -> torch.Tensor:
        ids = [*self.prompt, *generated][self.seen :]
        out = self.model(
            input_ids=torch.tensor([ids]), cache=self.cache, use_cache=True, logits_to_keep=1
        )
        self.seen += len(ids)
        return out.logits[0, -1]


def load_model(directory: Path) -> Any:
    import transformers

    return transformers.AutoModelForCausalLM.from_pretrained(directory, dtype=torch.float32).eval()


def random_steps(width: int, seed: int) -> Steps:
    generator = torch.Generator().manual_seed(seed)

    def steps(generated: Sequence[int]) -> torch.Tensor:
        return torch.randn(width, generator=generator)

    return steps
