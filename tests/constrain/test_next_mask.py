"""A sequence's next mask, computed off the engine's thread: the same mask as the
matcher's own, a grammar's on a worker and a ban's inline, and a grammar that fails
(a refused token, a limit) reported as the mask's error."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest
import torch
from tokenizers import Tokenizer

from realtime.constrain import BannedTokens, json_schema_grammar
from realtime.constrain.logits import unpack_rows
from realtime.constrain.matcher import ConstraintCompiler
from realtime.constrain.next_mask import MASK_THREADS, MaskWorkers, NextMask, mask_threads
from realtime.constrain.tokenizer import TokenizerBinding

ENUM = {"type": "string", "enum": ["red", "green"]}


@pytest.fixture
def workers() -> Iterator[MaskWorkers]:
    pool = MaskWorkers(1)
    yield pool
    pool.close()


def _ready(mask: NextMask) -> NextMask:
    if mask.future is not None:
        mask.future.result(timeout=30)
    assert mask.ready
    return mask


def _allowed(mask: NextMask, binding: TokenizerBinding) -> torch.Tensor:
    return unpack_rows(mask.bits[np.newaxis], binding.width)[0]


def test_a_grammar_s_mask_is_computed_on_a_worker_and_is_the_matcher_s_own(
    compiler: ConstraintCompiler,
    binding: TokenizerBinding,
    tiny_tokenizer: Tokenizer,
    workers: MaskWorkers,
) -> None:
    mask = NextMask(compiler.start(json_schema_grammar(ENUM)), binding.mask_words, workers)
    reference = compiler.start(json_schema_grammar(ENUM))
    mask.after(None)
    assert mask.future is not None  # a grammar's work never runs on the caller's thread
    assert torch.equal(_allowed(_ready(mask), binding), reference.allowed())
    for token in tiny_tokenizer.encode('"gr', add_special_tokens=False).ids:
        mask.after(token)
        assert reference.advance(token)
        assert _ready(mask).error is None
        assert torch.equal(_allowed(mask, binding), reference.allowed())


def test_a_ban_is_computed_inline(
    compiler: ConstraintCompiler, binding: TokenizerBinding, workers: MaskWorkers
) -> None:
    ban = compiler.start(BannedTokens(frozenset({7}), "tool_choice", "tool_choice none"))
    mask = NextMask(ban, binding.mask_words, workers)
    mask.after(None)
    assert mask.future is None and mask.ready
    assert torch.equal(_allowed(mask, binding), ban.allowed())


def test_a_token_the_grammar_refuses_is_the_mask_s_error(
    compiler: ConstraintCompiler,
    binding: TokenizerBinding,
    tiny_tokenizer: Tokenizer,
    workers: MaskWorkers,
) -> None:
    mask = NextMask(compiler.start(json_schema_grammar(ENUM)), binding.mask_words, workers)
    mask.after(None)
    _ready(mask)
    (brace,) = tiny_tokenizer.encode("{", add_special_tokens=False).ids
    mask.after(brace)  # a string was asked for
    assert _ready(mask).error


def test_mask_workers_take_the_cores_the_forward_pass_leaves() -> None:
    assert mask_threads(10_000) == 1  # always at least one
    assert 1 <= mask_threads(0) <= MASK_THREADS
