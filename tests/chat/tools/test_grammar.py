"""Enforced tool calls in every parser's markup: sampled answers always parse, through our
own parser, into calls of the right tool whose arguments validate.

A random distribution over the vocabulary stands in for the model (a random-weight
model of any width), so every format is checked with its markers as real special
tokens; the tiny model itself is used in test_structured_sampling.
"""

from __future__ import annotations

import json
from typing import Any

import jsonschema
import pytest
from tokenizers import Tokenizer

from realtime.chat.tools import ToolSpec, tool_parser_class
from realtime.chat.tools.grammar import enforceable_parsers, tool_call_grammar, tool_markers_ban
from realtime.chat.tools.qwen3_coder import Qwen3CoderToolParser
from realtime.constrain import ConstraintError, Reasoning
from realtime.constrain.matcher import ConstraintCompiler
from realtime.constrain.tokenizer import TokenizerBinding
from tests.constrain.decode import random_steps, sample_under

PARSERS = ("hermes", "llama3_json", "json", "mistral", "deepseek_v3", "pythonic", "qwen3_coder")
SEEDS = range(3)
WEATHER = ToolSpec(
    "get_weather",
    {
        "type": "object",
        "properties": {
            "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
            "days": {"type": "integer", "minimum": 1, "maximum": 14},
            "alerts": {"type": "boolean"},
            "ratio": {"type": "number", "minimum": 0, "maximum": 1},
        },
        "required": ["unit", "days"],
        "additionalProperties": False,
    },
)
TIME = ToolSpec(
    "get_time",
    {
        "type": "object",
        "properties": {"zone": {"type": "string", "enum": ["utc", "local"]}},
        "required": ["zone"],
        "additionalProperties": False,
    },
)
PING = ToolSpec("ping")  # no parameters: called with {}
TOOLS = [WEATHER, TIME, PING]
#: Mistral tokenizers from v11 have `[ARGS]`, which selects the `NAME[ARGS]{...}` layout.
V11_MARKERS = {"[TOOL_CALLS]": 700, "[ARGS]": 701}
SCHEMAS = {t.name: t.parameters or {"type": "object", "additionalProperties": False} for t in TOOLS}


def _sample_text(
    compiler: ConstraintCompiler, tokenizer: Tokenizer, spec: Any, seed: int, max_tokens: int = 400
) -> str:
    binding = compiler.binding
    sampled = sample_under(
        random_steps(binding.width, seed),
        compiler.start(spec),
        eos_ids=binding.eos_token_ids,
        seed=seed,
        max_tokens=max_tokens,
    )
    assert sampled.finished, tokenizer.decode(sampled.token_ids, skip_special_tokens=False)
    return tokenizer.decode(sampled.token_ids[:-1], skip_special_tokens=False)


def _calls(parser: str, text: str) -> list[tuple[str, dict[str, Any]]]:
    parsed = tool_parser_class(parser).parse(text, TOOLS)
    assert parsed.content in (None, ""), (parser, parsed.content)
    calls = [(c.name, json.loads(c.arguments)) for c in parsed.tool_calls]
    for name, arguments in calls:
        jsonschema.validate(arguments, SCHEMAS[name])
    return calls


def test_every_tool_parser_but_passthrough_can_be_enforced() -> None:
    assert enforceable_parsers() == sorted(PARSERS)


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("parser", PARSERS)
def test_required_gives_one_or_more_valid_calls(
    marker_compiler: ConstraintCompiler, marker_tokenizer: Tokenizer, parser: str, seed: int
) -> None:
    added = marker_compiler.binding.added_tokens
    spec = tool_call_grammar(parser, TOOLS, parallel=True, added_tokens=added)
    calls = _calls(parser, _sample_text(marker_compiler, marker_tokenizer, spec, seed))
    assert calls


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("parser", PARSERS)
def test_a_named_function_without_parallel_calls_gives_exactly_that_call(
    marker_compiler: ConstraintCompiler, marker_tokenizer: Tokenizer, parser: str, seed: int
) -> None:
    added = marker_compiler.binding.added_tokens
    spec = tool_call_grammar(
        parser, TOOLS, function="get_weather", parallel=False, added_tokens=added
    )
    calls = _calls(parser, _sample_text(marker_compiler, marker_tokenizer, spec, seed))
    assert [name for name, _ in calls] == ["get_weather"]


def test_parallel_calls_do_happen(
    marker_compiler: ConstraintCompiler, marker_tokenizer: Tokenizer
) -> None:
    """Without `parallel_tool_calls: false` some answers make several calls."""
    added = marker_compiler.binding.added_tokens
    spec = tool_call_grammar("pythonic", TOOLS, parallel=True, added_tokens=added)
    counts = {
        len(_calls("pythonic", _sample_text(marker_compiler, marker_tokenizer, spec, seed)))
        for seed in range(8)
    }
    assert max(counts) > 1


@pytest.mark.parametrize("seed", SEEDS)
def test_mistral_without_an_args_token_uses_the_array_layout(
    compiler: ConstraintCompiler, tiny_tokenizer: Tokenizer, seed: int
) -> None:
    added = compiler.binding.added_tokens
    assert "[ARGS]" not in added
    spec = tool_call_grammar("mistral", TOOLS, parallel=True, added_tokens=added)
    text = _sample_text(compiler, tiny_tokenizer, spec, seed)
    assert text.startswith("[TOOL_CALLS][{")
    assert _calls("mistral", text)


def test_single_token_markers_are_referenced_by_id(marker_binding: TokenizerBinding) -> None:
    added = marker_binding.added_tokens
    spec = tool_call_grammar("hermes", [TIME], added_tokens=added)
    assert f"<[{added['<tool_call>']}]>" in spec.grammar
    plain = tool_call_grammar("hermes", [TIME], added_tokens={})
    assert "<[" not in plain.grammar and "<tool_call>" in plain.grammar


def test_definitions_are_re_rooted_so_refs_resolve(
    marker_compiler: ConstraintCompiler, marker_tokenizer: Tokenizer
) -> None:
    tool = ToolSpec(
        "set_mode",
        {
            "type": "object",
            "$defs": {"mode": {"type": "string", "enum": ["on", "off"]}},
            "properties": {"mode": {"$ref": "#/$defs/mode"}},
            "required": ["mode"],
            "additionalProperties": False,
        },
    )
    added = marker_compiler.binding.added_tokens
    for parser in ("hermes", "pythonic", "mistral"):
        spec = tool_call_grammar(parser, [tool], parallel=False, added_tokens=added)
        text = _sample_text(marker_compiler, marker_tokenizer, spec, seed=0)
        (call,) = tool_parser_class(parser).parse(text, [tool]).tool_calls
        assert json.loads(call.arguments)["mode"] in ("on", "off")


def test_qwen3_coder_string_values_are_raw_text_without_tags(
    compiler: ConstraintCompiler, tiny_tokenizer: Tokenizer
) -> None:
    tool = ToolSpec(
        "write",
        {
            "type": "object",
            "properties": {"path": {"type": "string"}, "size": {"type": "integer"}},
            "required": ["path", "size"],
        },
    )
    added = compiler.binding.added_tokens
    spec = tool_call_grammar("qwen3_coder", [tool], parallel=False, added_tokens=added)
    ok = (
        "<tool_call>\n<function=write>\n<parameter=path>\na < b </p> c\n</parameter>\n"
        "<parameter=size>\n12\n</parameter>\n</function>\n</tool_call>"
    )
    matcher = compiler.start(spec)
    for token in tiny_tokenizer.encode(ok, add_special_tokens=False).ids:
        assert matcher.advance(token), matcher.error
    assert matcher.allowed()[sorted(compiler.binding.eos_token_ids)].all()
    (call,) = Qwen3CoderToolParser.parse(ok, [tool]).tool_calls
    assert json.loads(call.arguments) == {"path": "a < b </p> c", "size": 12}
    bad = "<tool_call>\n<function=write>\n<parameter=path>\nx <parameter=size>"
    matcher = compiler.start(spec)
    ids = tiny_tokenizer.encode(bad, add_special_tokens=False).ids
    assert not all(matcher.advance(token) for token in ids)


@pytest.mark.parametrize("starts_inside", [False, True])
def test_a_reasoning_block_may_come_first(
    compiler: ConstraintCompiler, tiny_tokenizer: Tokenizer, starts_inside: bool
) -> None:
    reasoning = Reasoning(end="</think>", start=None if starts_inside else "<think>")
    spec = tool_call_grammar(
        "hermes",
        [TIME],
        parallel=False,
        reasoning=reasoning,
        added_tokens=compiler.binding.added_tokens,
    )
    call = '<tool_call>\n{"name": "get_time", "arguments": {"zone": "utc"}}\n</tool_call>'
    thought = "" if starts_inside else "<think>"
    for text, accepted in (
        (f"{thought}Which zone? UTC.</think>\n\n{call}", True),
        (call, not starts_inside),
        ("Which zone?" + call, False),
    ):
        matcher = compiler.start(spec)
        ids = tiny_tokenizer.encode(text, add_special_tokens=False).ids
        assert all(matcher.advance(t) for t in ids) == accepted, text


@pytest.mark.parametrize(
    ("kwargs", "param", "fragment"),
    [
        ({"tools": []}, "tool_choice", "needs `tools`"),
        ({"function": "nope"}, "tool_choice", "'nope', which is not among"),
        ({"parser": "passthrough"}, "tool_choice", "cannot enforce"),
        ({"tools": [ToolSpec("f", {"type": "array"})]}, "tools", "must describe an object"),
        (
            {"tools": [ToolSpec("f", {"properties": {"x": {"$ref": "other.json"}}})]},
            "tools",
            "must point into $defs",
        ),
        ({"parser": "pythonic", "tools": [ToolSpec("bad-name")]}, "tools", "cannot be written"),
        (
            {"parser": "mistral", "tools": [ToolSpec("a b")], "added_tokens": V11_MARKERS},
            "tools",
            "cannot be written",
        ),
        (
            {"parser": "pythonic", "tools": [ToolSpec("f", {"properties": {"class": {}}})]},
            "tools",
            "not a Python identifier",
        ),
        (
            {"parser": "pythonic", "tools": [ToolSpec("f", {"minProperties": 1})]},
            "tools",
            "cannot enforce minProperties",
        ),
        (
            {
                "parser": "qwen3_coder",
                "tools": [ToolSpec("f", {"properties": {"s": {"type": "string", "maxLength": 3}}})],
            },
            "tools",
            "cannot enforce maxLength",
        ),
        (
            {"parser": "qwen3_coder", "tools": [ToolSpec("f", {"required": ["x"]})]},
            "tools",
            "requires 'x'",
        ),
    ],
)
def test_choices_and_schemas_that_cannot_be_enforced_are_refused(
    kwargs: dict[str, Any], param: str, fragment: str
) -> None:
    args: dict[str, Any] = {"parser": "hermes", "tools": [TIME], **kwargs}
    parser, tools = args.pop("parser"), args.pop("tools")
    with pytest.raises(ConstraintError) as info:
        tool_call_grammar(parser, tools, added_tokens=args.pop("added_tokens", {}), **args)
    assert info.value.param == param
    assert fragment in info.value.message


def test_an_unsatisfiable_tool_schema_is_refused_when_compiled(
    compiler: ConstraintCompiler,
) -> None:
    bounds = {"type": "integer", "minimum": 3, "maximum": 1}
    tool = ToolSpec("f", {"properties": {"n": bounds}, "required": ["n"]})
    spec = tool_call_grammar("hermes", [tool], added_tokens=compiler.binding.added_tokens)
    with pytest.raises(ConstraintError) as info:
        compiler.check(spec)
    assert info.value.param == "tools"
    assert info.value.message == (
        "tool_choice required cannot be enforced: failed to compile JSON schema: "
        "Unsatisfiable schema: required property 'arguments' is unsatisfiable"
    )


def test_tool_choice_none_bans_only_markers_that_are_tokens(
    marker_binding: TokenizerBinding,
) -> None:
    added = marker_binding.added_tokens
    hermes = tool_markers_ban("hermes", added)
    assert hermes is not None and hermes.token_ids == {added["<tool_call>"]}
    deepseek = tool_markers_ban("deepseek_v3", added)
    assert deepseek is not None and len(deepseek.token_ids) == 2
    assert tool_markers_ban("json", added) is None  # calls start with plain text
    assert tool_markers_ban("llama3_json", added) is None  # no <|python_tag|> token here
    assert tool_markers_ban(None, added) is None


def test_quotes_backslashes_and_unicode_in_markup_literals_survive(
    compiler: ConstraintCompiler, tiny_tokenizer: Tokenizer
) -> None:
    key, value = 'we"ird\\kéy', 'a"b\\c'
    tool = ToolSpec(
        "f",
        {
            "properties": {key: {"type": "string", "enum": [value, "d"]}, "n": {"type": "integer"}},
            "required": [key, "n"],
        },
    )
    added = compiler.binding.added_tokens
    spec = tool_call_grammar("qwen3_coder", [tool], parallel=False, added_tokens=added)
    text = (
        f"<tool_call>\n<function=f>\n<parameter={key}>\n{value}\n</parameter>\n"
        "<parameter=n>\n7\n</parameter>\n</function>\n</tool_call>"
    )
    matcher = compiler.start(spec)
    for token in tiny_tokenizer.encode(text, add_special_tokens=False).ids:
        assert matcher.advance(token), matcher.error
    (call,) = Qwen3CoderToolParser.parse(text, [tool]).tool_calls
    assert json.loads(call.arguments) == {key: value, "n": 7}


def test_qwen3_coder_refuses_an_any_of_whose_first_type_is_a_list() -> None:
    schema = {"anyOf": [{"type": ["integer", "null"]}, {"type": "string"}]}
    tool = ToolSpec("f", {"properties": {"x": schema}})
    with pytest.raises(ConstraintError, match="needs a single type"):
        tool_call_grammar("qwen3_coder", [tool], added_tokens={})


def test_auto_with_a_response_format_allows_calls_or_the_answer_and_nothing_else(
    compiler: ConstraintCompiler, tiny_tokenizer: Tokenizer
) -> None:
    answer = {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]}
    spec = tool_call_grammar(
        "hermes", [TIME], answer=answer, added_tokens=compiler.binding.added_tokens
    )
    assert spec.description == "tool_choice auto with response_format"
    call = '<tool_call>\n{"name": "get_time", "arguments": {"zone": "utc"}}\n</tool_call>'
    for text, accepted in ((call, True), ('{"ok": true}', True), ("Sure: " + call, False)):
        matcher = compiler.start(spec)
        ids = tiny_tokenizer.encode(text, add_special_tokens=False).ids
        consumed = all(matcher.advance(t) for t in ids)
        assert (consumed and matcher.allowed()[sorted(compiler.binding.eos_token_ids)].all()) == (
            accepted
        ), text
    with pytest.raises(ConstraintError) as info:
        tool_call_grammar("hermes", [TIME], answer=[1], added_tokens={})  # type: ignore[arg-type]
    assert info.value.param == "response_format"


def test_a_reasoning_block_with_text_markers_ends_at_the_first_end_marker(
    compiler: ConstraintCompiler, tiny_tokenizer: Tokenizer
) -> None:
    """Markers that are not tokens (here Mistral's [THINK] in a vocabulary without it)."""
    reasoning = Reasoning(end="[/THINK]", start="[THINK]")
    added = compiler.binding.added_tokens
    assert "[/THINK]" not in added
    spec = tool_call_grammar(
        "hermes", [TIME], parallel=False, reasoning=reasoning, added_tokens=added
    )
    call = '<tool_call>\n{"name": "get_time", "arguments": {"zone": "utc"}}\n</tool_call>'
    for text, accepted in (
        (f"[THINK]UTC, I think.[/THINK]\n\n{call}", True),
        (f"[THINK]a[/THINK] more text[/THINK]{call}", False),
    ):
        matcher = compiler.start(spec)
        ids = tiny_tokenizer.encode(text, add_special_tokens=False).ids
        assert all(matcher.advance(t) for t in ids) == accepted, text
