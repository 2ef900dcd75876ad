"""Per-sequence matchers and the compiler: masks, advancing, EOS, errors, the cache."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from llguidance import LLMatcher
from tokenizers import Tokenizer

from realtime.constrain import (
    BannedTokens,
    ConstraintError,
    ConstraintLimits,
    GrammarSpec,
    json_schema_grammar,
)
from realtime.constrain.lark import JSON_OPTIONS
from realtime.constrain.logits import unpack_bitmask
from realtime.constrain.matcher import ConstraintCompiler, GrammarMatcher
from realtime.constrain.tokenizer import TokenizerBinding

ENUM = {"type": "string", "enum": ["red", "green"]}


def _ids(tokenizer: Tokenizer, text: str) -> list[int]:
    return tokenizer.encode(text, add_special_tokens=False).ids


def test_the_mask_covers_the_logits_width_and_never_allows_padding(
    compiler: ConstraintCompiler, binding: TokenizerBinding, tiny_tokenizer: Tokenizer
) -> None:
    matcher = compiler.start(json_schema_grammar(ENUM))
    allowed = matcher.allowed()
    assert allowed.dtype == torch.bool and allowed.shape == (binding.width,)
    size = tiny_tokenizer.get_vocab_size(with_added_tokens=True)
    assert binding.width > size and not allowed[size:].any()
    # Only tokens that can start `"red"` or `"green"` (all begin with a quote).
    texts = [tiny_tokenizer.decode([i]) for i in torch.nonzero(allowed).flatten().tolist()]
    assert texts and all(t.startswith('"') for t in texts)


def test_a_complete_answer_allows_only_eos_and_ends_with_it(
    compiler: ConstraintCompiler, binding: TokenizerBinding, tiny_tokenizer: Tokenizer
) -> None:
    matcher = compiler.start(json_schema_grammar(ENUM))
    for token in _ids(tiny_tokenizer, '"green"'):
        assert matcher.advance(token)
    assert isinstance(matcher, GrammarMatcher) and matcher.accepting
    allowed = torch.nonzero(matcher.allowed()).flatten().tolist()
    assert set(allowed) == set(binding.eos_token_ids)
    assert not matcher.done
    (eos,) = binding.eos_token_ids
    assert matcher.advance(eos) and matcher.done and matcher.error is None


def test_a_token_the_mask_did_not_allow_is_refused_with_a_reason(
    compiler: ConstraintCompiler, tiny_tokenizer: Tokenizer
) -> None:
    matcher = compiler.start(json_schema_grammar(ENUM))
    (bad,) = _ids(tiny_tokenizer, "x")
    assert not matcher.allowed()[bad]
    assert not matcher.advance(bad)
    assert matcher.error


def test_rollback_undoes_tokens(compiler: ConstraintCompiler, tiny_tokenizer: Tokenizer) -> None:
    matcher = compiler.start(json_schema_grammar(ENUM))
    ids = _ids(tiny_tokenizer, '"red"')
    first = matcher.allowed().clone()
    for token in ids:
        assert matcher.advance(token)
    assert matcher.rollback(len(ids))
    assert torch.equal(matcher.allowed(), first)


def test_fill_bitmask_writes_the_same_ids_as_allowed(
    compiler: ConstraintCompiler, binding: TokenizerBinding
) -> None:
    matcher = compiler.start(json_schema_grammar(ENUM))
    row = torch.zeros(binding.mask_words, dtype=torch.int32)
    matcher.fill_bitmask(row)
    assert torch.equal(unpack_bitmask(row, binding.width), matcher.allowed())


def test_sequences_get_independent_matchers_from_one_compilation(binding: TokenizerBinding) -> None:
    compiler = ConstraintCompiler(binding, ConstraintLimits(cache_size=2))
    spec = json_schema_grammar({"type": "boolean"})
    a, b = compiler.start(spec), compiler.start(spec)
    assert compiler.compiles == 1
    (t,) = binding.ll.tokenize_str("t")[:1]
    assert a.advance(t)
    assert b.allowed()[t] and not torch.equal(a.allowed(), b.allowed())
    compiler.check(json_schema_grammar({"type": "integer"}))
    compiler.check(json_schema_grammar({"type": "number"}))  # evicts the boolean grammar
    compiler.start(spec)
    assert compiler.compiles == 4


def test_banned_tokens_are_never_allowed_and_nothing_else_changes(
    compiler: ConstraintCompiler, binding: TokenizerBinding
) -> None:
    banned = frozenset({3, 31, 32, binding.width - 1})
    matcher = compiler.start(BannedTokens(banned, "tool_choice", "tool_choice none"))
    allowed = matcher.allowed()
    assert not allowed[sorted(banned)].any()
    assert int(allowed.sum()) == binding.width - len(banned)
    row = torch.zeros(binding.mask_words, dtype=torch.int32)
    matcher.fill_bitmask(row)
    assert torch.equal(unpack_bitmask(row, binding.width), allowed)
    assert matcher.advance(4) and not matcher.advance(3)
    assert not matcher.done and matcher.error is None


def test_a_bitmask_row_of_the_wrong_shape_is_refused_before_any_write(
    compiler: ConstraintCompiler, binding: TokenizerBinding
) -> None:
    matcher = compiler.start(json_schema_grammar(ENUM))
    for row in (
        torch.zeros(binding.mask_words - 1, dtype=torch.int32),
        torch.zeros(binding.mask_words, dtype=torch.int64),
        torch.zeros(2, binding.mask_words, dtype=torch.int32)[:, 0],
    ):
        try:
            matcher.fill_bitmask(row)
        except ValueError as exc:
            assert "bitmask row" in str(exc)
        else:
            raise AssertionError(f"accepted a row of shape {tuple(row.shape)}")


def test_a_compiled_constraint_starts_matchers_without_the_compilers_cache(
    binding: TokenizerBinding,
) -> None:
    """What an engine request carries: its matchers never compile, even once the
    compiler's cache has dropped the grammar (no compile on an engine's thread)."""
    compiler = ConstraintCompiler(binding, ConstraintLimits(cache_size=1))
    spec = json_schema_grammar({"type": "boolean"})
    assert compiler.cached(spec) is None
    compiled = compiler.compile(spec)
    assert compiled.ends_answer and compiled.param == "response_format"
    assert compiler.cached(spec) is not None and compiler.compiles == 1
    compiler.compile(json_schema_grammar({"type": "integer"}))  # evicts the boolean grammar
    assert compiler.cached(spec) is None
    first, second = compiled.start(), compiled.start()
    assert compiler.compiles == 2
    (t,) = binding.ll.tokenize_str("t")[:1]
    assert first.advance(t) and not torch.equal(first.allowed(), second.allowed())


def test_a_ban_needs_no_compilation_and_never_ends_the_answer(
    compiler: ConstraintCompiler,
) -> None:
    ban = BannedTokens(frozenset({5}), "tool_choice", "tool_choice none")
    compiled = compiler.cached(ban)
    assert compiled is not None and not compiled.ends_answer
    assert not compiled.start().allowed()[5]


def test_a_grammar_that_cannot_start_an_answer_is_refused_when_compiled(
    compiler: ConstraintCompiler,
) -> None:
    """A schema that only refers to itself compiles, but its first mask fails: that is
    found on the compiling thread (the request's 400), not in the middle of an answer.
    (`json_schema_grammar` refuses these schemas before compiling: `finite.py`; the
    compiler's own check is the net under every grammar, so it is tested without it.)"""
    for schema in ({"$ref": "#"}, {"$ref": "#/$defs/a", "$defs": {"a": {"$ref": "#/$defs/a"}}}):
        with pytest.raises(ConstraintError, match="no finite JSON"):
            json_schema_grammar(schema)
        with pytest.raises(ConstraintError, match="no answer can start") as refused:
            compiler.compile(_unchecked(schema))
        assert refused.value.param == "response_format"


def _unchecked(schema: dict[str, object]) -> GrammarSpec:
    """The grammar of `schema` without the checks `json_schema_grammar` makes first."""
    grammar = LLMatcher.grammar_from_json_schema(schema, overrides=JSON_OPTIONS)  # type: ignore[arg-type]
    return GrammarSpec(grammar, "response_format", "json_schema")


NESTS_ITSELF = {"type": "object", "properties": {"a": {"$ref": "#"}}, "required": ["a"]}
#: An object of 1,500 optional properties (55 kB): llguidance's own row limit, 2000, refuses it.
WIDE = {
    "type": "object",
    "properties": {f"property_{i:04d}": {"type": "string"} for i in range(1500)},
}


@pytest.mark.parametrize(
    ("schema", "limits", "reason"),
    [
        # Forced without end: the first mask is fine; the first forced token is not.
        (NESTS_ITSELF, ConstraintLimits(), "one token needs more than 50000 parser items"),
        # Branches more ways than allowed, right after the forced `{`.
        (WIDE, ConstraintLimits(max_items_in_row=2000), "branches 6007 ways at one point"),
    ],
    ids=["forced-without-end", "row-limit"],
)
def test_a_grammar_that_fails_on_its_forced_tokens_is_refused_when_compiled(
    compiler: ConstraintCompiler, schema: dict[str, object], limits: ConstraintLimits, reason: str
) -> None:
    """Before these limits were applied at compile time, these grammars compiled and
    failed at the first token of the answer: a 200, then an error (issue 27)."""
    spec = dataclasses.replace(_unchecked(schema), limits=limits)
    with pytest.raises(ConstraintError, match=reason) as refused:
        compiler.compile(spec)
    assert refused.value.param == "response_format"
    assert "--grammar-" in refused.value.message  # the flag that would allow it


def test_the_default_row_limit_serves_a_wide_object(compiler: ConstraintCompiler) -> None:
    """1,500 optional properties are an ordinary (if large) schema: served by default."""
    matcher = compiler.start(json_schema_grammar(WIDE))
    for _ in range(2):
        allowed = torch.nonzero(matcher.allowed()).flatten().tolist()
        assert allowed and matcher.advance(allowed[0])


#: 300 optional properties: small enough for every default, large enough for a tiny limit.
OPTIONAL_300 = {
    "type": "object",
    "properties": {f"property_{i:04d}": {"type": "string"} for i in range(300)},
}


@pytest.mark.parametrize(
    ("field", "value", "flag"),
    [
        ("max_grammar_size", 50, "--grammar-max-size"),
        ("initial_lexer_fuel", 1000, "--grammar-compile-fuel"),
        ("step_lexer_fuel", 100, "--grammar-step-fuel"),
        ("step_max_items", 50, "--grammar-step-items"),
        ("max_items_in_row", 20, "--grammar-row-items"),
        ("max_lexer_states", 20, "--grammar-lexer-states"),
    ],
)
def test_each_grammar_limit_is_applied_at_compile_and_named_by_its_flag(
    compiler: ConstraintCompiler, field: str, value: int, flag: str
) -> None:
    """Every llguidance limit is the flag's value (it reaches the grammar engine), is
    met when the grammar is compiled (the request's 400, before the answer), and the
    refusal names the flag that would allow it, not the grammar engine's internals."""
    spec = json_schema_grammar(OPTIONAL_300)
    compiler.compile(spec)  # served under the defaults
    tight = dataclasses.replace(ConstraintLimits(), **{field: value})
    with pytest.raises(ConstraintError) as refused:
        compiler.compile(dataclasses.replace(spec, limits=tight))
    assert refused.value.param == "response_format"
    assert flag in refused.value.message, refused.value.message
