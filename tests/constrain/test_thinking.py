"""The thinking budget's grammar, sampled the way the cpu engine samples: the
reasoning block closes after at most the budget's tokens, however reluctant the
model is to close it, and the answer after it is free but cannot reopen it."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest
import torch

from realtime.constrain import Reasoning, json_schema_grammar
from realtime.constrain.matcher import ConstraintCompiler
from realtime.constrain.thinking import thinking_budget_grammar
from realtime.constrain.tokenizer import TokenizerBinding
from realtime.model.model_dir import load_model_dir
from tests.constrain.decode import Steps, random_steps, sample_under

OPEN, CLOSE = "<think>", "</think>"


class Vocabulary:
    def __init__(self, directory: Path) -> None:
        files = load_model_dir(directory)
        self.tokenizer = files.tokenizer
        self.width = int(files.config["vocab_size"])
        self.binding = TokenizerBinding(
            self.tokenizer.backend,
            eos_token_ids=self.tokenizer.eos_token_ids,
            logits_width=self.width,
        )
        self.compiler = ConstraintCompiler(self.binding)
        self.added = self.binding.added_tokens


@pytest.fixture(scope="module")
def vocab(tiny_model_dir: Path) -> Vocabulary:
    return Vocabulary(tiny_model_dir)


def reluctant(vocab: Vocabulary, seed: int) -> Steps:
    """Random logits that never want to close the block (nor to end the answer)."""
    base = random_steps(vocab.width, seed)
    close = vocab.added[CLOSE]

    def steps(generated: Sequence[int]) -> torch.Tensor:
        logits = base(generated)
        logits[close] = -30.0
        logits[sorted(vocab.binding.eos_token_ids)] = -30.0
        return logits

    return steps


def sample(vocab: Vocabulary, spec: object, seed: int, steps: Steps, n: int = 40) -> list[int]:
    matcher = vocab.compiler.start(spec)  # type: ignore[arg-type]
    return sample_under(
        steps, matcher, eos_ids=vocab.binding.eos_token_ids, seed=seed, max_tokens=n
    ).token_ids


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("budget", [1, 5, 12])
def test_the_block_closes_when_the_budget_is_spent(vocab: Vocabulary, seed: int, budget: int):
    spec = thinking_budget_grammar(
        Reasoning(end=CLOSE, start=OPEN, max_tokens=budget), vocab.added, opening=OPEN
    )
    out = sample(vocab, spec, seed, reluctant(vocab, seed))
    assert out[0] == vocab.added[OPEN]  # thinking was asked for: the block is not optional
    assert out.index(vocab.added[CLOSE]) == 1 + budget  # forced, at the budget exactly
    assert vocab.added[OPEN] not in out[1:]  # the answer cannot open a second block
    assert len(out) == 40  # and the answer goes on, free


def test_the_model_may_close_the_block_sooner(vocab: Vocabulary) -> None:
    spec = thinking_budget_grammar(
        Reasoning(end=CLOSE, start=OPEN, max_tokens=30), vocab.added, opening=OPEN
    )
    close = vocab.added[CLOSE]
    base = random_steps(vocab.width, 0)

    def eager(generated: Sequence[int]) -> torch.Tensor:
        logits = base(generated)
        if len(generated) == 3:
            logits[close] = 50.0
        return logits

    out = sample(vocab, spec, 0, eager)
    assert out.index(close) == 3


def test_a_block_the_prompt_opened_closes_within_the_budget(vocab: Vocabulary) -> None:
    spec = thinking_budget_grammar(
        Reasoning(end=CLOSE, start=None, max_tokens=4), vocab.added, opening=OPEN
    )
    out = sample(vocab, spec, 1, reluctant(vocab, 1))
    assert out.index(vocab.added[CLOSE]) == 4
    assert vocab.added[OPEN] not in out


def test_banned_markers_stay_banned_after_the_block(vocab: Vocabulary) -> None:
    banned = vocab.added["<tool_call>"]

    def eager_to_call(generated: Sequence[int]) -> torch.Tensor:
        logits = reluctant(vocab, 2)(generated)
        logits[banned] = 40.0
        return logits

    spec = thinking_budget_grammar(
        Reasoning(end=CLOSE, start=OPEN, max_tokens=3),
        vocab.added,
        opening=OPEN,
        banned=[banned],
    )
    assert banned not in sample(vocab, spec, 2, eager_to_call)


def test_a_json_answer_carries_the_budget_in_its_reasoning_block(vocab: Vocabulary) -> None:
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}
    reasoning = Reasoning(end=CLOSE, start=OPEN, max_tokens=6)
    spec = json_schema_grammar(schema, reasoning=reasoning, added_tokens=vocab.added)
    base = reluctant(vocab, 3)

    def thinks_first(generated: Sequence[int]) -> torch.Tensor:
        logits = base(generated)
        if not generated:
            logits[vocab.added[OPEN]] = 50.0
        return logits

    out = sample(vocab, spec, 3, thinks_first, n=60)
    assert out[0] == vocab.added[OPEN]
    assert out.index(vocab.added[CLOSE]) == 7
