"""The grammar filter, called exactly as exllamav2 0.3.2's dynamic generator calls a filter.

`run_job` below follows the generator's code path for one job with one filter;
each step cites the lines of the exllamav2 0.3.2 wheel it mirrors. exllamav2
itself needs CUDA, so the model is a seeded random distribution over the
vocabulary and the sampler is torch's.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import jsonschema
import pytest
import torch
from tokenizers import Tokenizer

from realtime.constrain import json_schema_grammar
from realtime.constrain.exllamav2_filter import GrammarFilter
from realtime.constrain.matcher import ConstraintCompiler
from tests.constrain.decode import Steps, random_steps

TICKET = {
    "type": "object",
    "properties": {
        "color": {"type": "string", "enum": ["red", "green", "blue"]},
        "urgent": {"type": "boolean"},
        "priority": {"type": "integer", "minimum": 1, "maximum": 5},
    },
    "required": ["color", "urgent", "priority"],
    "additionalProperties": False,
}


def run_job(
    flt: GrammarFilter,
    steps: Steps,
    *,
    seed: int,
    stop_tokens: frozenset[int],
    pool: ThreadPoolExecutor | None,
    max_new_tokens: int = 200,
    mask_path: bool = True,
) -> tuple[list[int], str]:
    """One job's tokens and its `eos_reason`, the way `ExLlamaV2DynamicJob` drives filters."""
    generator = torch.Generator().manual_seed(seed)
    out: list[int] = []
    for new_tokens in range(max_new_tokens):
        # dynamic.py:1867-1872 (receive_logits): filters start before the first sample.
        if new_tokens == 0:
            flt.background_drop()
            flt.begin("")
        # The job's logits: a (1, 1, vocab) slice of the pinned CPU batch tensor.
        logits = steps(out).view(1, 1, -1).clone()
        if mask_path and flt.can_mask_logits():
            # sampler.py:436-444: every filter masks; the prepared mask must be ready.
            assert flt.get_next(mask=True) is True
            flat = logits[0][0]
            masked = flt.mask_logits(flat)
            assert masked.data_ptr() == flat.data_ptr()  # in place, as base.py documents
            logits = masked.view(1, 1, -1)
            end_tokens = None
        else:
            # sampler.py:450-492: the list path.
            pass_tokens, end_tokens = flt.get_next()
            assert len(pass_tokens), "Filter excluded all tokens"
            if len(pass_tokens) == 1:  # sampler.py:474-481: a single token is forced
                token = pass_tokens[0]
                out.append(token)
                flt.feed(torch.tensor([[token]]))
                if token in end_tokens:
                    return out, "end_filter"  # dynamic.py:2132-2133
                continue
            keep = torch.zeros(logits.shape[-1], dtype=torch.bool)
            keep[pass_tokens] = True
            logits = logits.masked_fill(~keep, float("-inf"))
        probs = torch.softmax(logits[0, 0], dim=-1)
        next_token = torch.multinomial(probs, 1, generator=generator).view(1, 1)
        token = int(next_token.item())
        # dynamic.py:1918-1935 (receive_sample): feed, then queue the filter for a
        # background mask; dynamic.py:1211-1220 starts it after the next forward pass.
        flt.feed(next_token)
        out.append(token)
        if token in stop_tokens:  # dynamic.py:2121-2122
            return out, "stop_token"
        if end_tokens is not None and token in end_tokens:  # sampler.py:572-576
            return out, "end_filter"
        if pool is not None and flt.use_background_worker():
            if flt.can_mask_logits() and mask_path:
                flt.background_prepare_logit_mask(pool)
            else:
                flt.background_next(pool)
    return out, "max_new_tokens"


@pytest.fixture(scope="module")
def pool() -> Iterator[ThreadPoolExecutor]:
    with ThreadPoolExecutor(max_workers=4) as executor:
        yield executor


@pytest.mark.parametrize("background", [True, False])
@pytest.mark.parametrize("seed", range(6))
def test_the_mask_path_gives_valid_answers(
    compiler: ConstraintCompiler,
    tiny_tokenizer: Tokenizer,
    pool: ThreadPoolExecutor,
    seed: int,
    background: bool,
) -> None:
    binding = compiler.binding
    flt = GrammarFilter(compiler.compile(json_schema_grammar(TICKET)))
    ids, reason = run_job(
        flt,
        random_steps(binding.width, seed),
        seed=seed,
        stop_tokens=binding.eos_token_ids,
        pool=pool if background else None,
    )
    assert reason == "stop_token" and flt.done and flt.error is None
    jsonschema.validate(json.loads(tiny_tokenizer.decode(ids[:-1])), TICKET)


@pytest.mark.parametrize("seed", range(3))
def test_the_list_path_gives_valid_answers_and_ends_the_filter(
    compiler: ConstraintCompiler, tiny_tokenizer: Tokenizer, pool: ThreadPoolExecutor, seed: int
) -> None:
    binding = compiler.binding
    flt = GrammarFilter(compiler.compile(json_schema_grammar(TICKET)))
    ids, reason = run_job(
        flt,
        random_steps(binding.width, seed),
        seed=seed,
        stop_tokens=frozenset(),  # exllamav2 would stop on EOS; here only the filter ends it
        pool=pool,
        mask_path=False,
    )
    assert reason == "end_filter" and ids[-1] in binding.eos_token_ids
    jsonschema.validate(json.loads(tiny_tokenizer.decode(ids[:-1])), TICKET)


def test_next_reports_the_allowed_ids_and_the_eos_among_them(
    compiler: ConstraintCompiler, tiny_tokenizer: Tokenizer
) -> None:
    flt = GrammarFilter(compiler.compile(json_schema_grammar({"type": "boolean"})))
    flt.begin("")
    pass_tokens, end_tokens = flt.next()
    assert pass_tokens == sorted(pass_tokens) and not end_tokens
    for token in tiny_tokenizer.encode("true", add_special_tokens=False).ids:
        flt.feed(token)
    pass_tokens, end_tokens = flt.next()
    assert set(pass_tokens) == end_tokens == set(compiler.binding.eos_token_ids)


def test_begin_restarts_the_answer(compiler: ConstraintCompiler, tiny_tokenizer: Tokenizer) -> None:
    flt = GrammarFilter(compiler.compile(json_schema_grammar({"type": "boolean"})))
    flt.begin("")
    fresh = flt.next()
    for token in tiny_tokenizer.encode("tr", add_special_tokens=False).ids:
        flt.feed(token)
    assert flt.next() != fresh and flt.tokens_fed
    flt.begin("")
    assert flt.next() == fresh and flt.tokens_fed == 0


def test_clone_continues_from_the_same_state(
    compiler: ConstraintCompiler, tiny_tokenizer: Tokenizer
) -> None:
    flt = GrammarFilter(compiler.compile(json_schema_grammar({"type": "boolean"})))
    for token in tiny_tokenizer.encode("fa", add_special_tokens=False).ids:
        flt.feed(token)
    copy = flt.clone()
    assert copy.next() == flt.next() and copy is not flt


def test_a_token_the_grammar_refused_ends_the_answer_with_an_error(
    compiler: ConstraintCompiler, tiny_tokenizer: Tokenizer
) -> None:
    """A token fed past the mask (exllamav2's min_new_tokens ban can override it) puts
    the filter in error: the mask then allows only EOS and `error` says why."""
    flt = GrammarFilter(compiler.compile(json_schema_grammar({"type": "boolean"})))
    flt.begin("")
    (bad,) = tiny_tokenizer.encode("x", add_special_tokens=False).ids
    flt.feed(torch.tensor([[bad]]))
    assert flt.error
    assert flt.prepare_logit_mask() is True
    logits = flt.mask_logits(torch.zeros(compiler.binding.width))
    allowed = torch.nonzero(logits != float("-inf")).flatten().tolist()
    assert set(allowed) == set(compiler.binding.eos_token_ids)


def test_mask_logits_fits_a_wider_logits_tensor(compiler: ConstraintCompiler) -> None:
    """exllamav2 pads its vocabulary (`padded_vocab_size`): ids past the mask are excluded."""
    flt = GrammarFilter(compiler.compile(json_schema_grammar({"type": "boolean"})))
    flt.begin("")
    logits = torch.zeros(compiler.binding.width + 64)
    out = flt.mask_logits(logits)
    assert out is logits
    assert torch.isinf(out[compiler.binding.width :]).all()
