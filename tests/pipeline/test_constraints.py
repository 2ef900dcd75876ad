"""What each request is constrained to (`pipeline/constraints.py`), decided without a model.

The engine is a stand-in that offers the tiny tokenizer's binding (or none, like the
echo engine); the end-to-end proof on real engines is tests/e2e/test_structured.py.
"""

from __future__ import annotations

from typing import Any

import pytest

from realtime.chat.tools import tool_specs
from realtime.chat.tools.output import ChatOutputParser, build_output_parser
from realtime.constrain import BannedTokens, ConstraintLimits, GrammarSpec
from realtime.constrain.tokenizer import TokenizerBinding
from realtime.engine.echo import EchoEngine
from realtime.pipeline.constraints import ConstraintPlan, Constraints, response_format_of
from realtime.protocol.errors import InvalidRequestError, UnsupportedFeatureError
from realtime.protocol.generation_request import FieldPaths, JsonFormat

pytestmark = pytest.mark.anyio

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_time",
            "parameters": {
                "type": "object",
                "properties": {"zone": {"type": "string", "enum": ["utc", "local"]}},
                "required": ["zone"],
            },
        },
    }
]
SCHEMA = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}
JSON_SCHEMA = {"type": "json_schema", "json_schema": {"name": "a", "schema": SCHEMA}}


class GrammarEngine:
    """Just enough of a `ConstrainingEngine` for planning."""

    def __init__(self, binding: TokenizerBinding | None, reason: str | None = None) -> None:
        self.grammar_binding = binding
        self.grammar_unavailable_reason = reason


def output(
    tool_choice: Any = None,
    *,
    tools: list[dict[str, Any]] | None = None,
    reasoning: str | None = None,
    thinking: bool | None = None,
    parallel: bool | None = None,
) -> ChatOutputParser:
    return build_output_parser(
        tool_parser="hermes",
        reasoning_parser=reasoning,
        tools=tools,
        tool_choice=tool_choice,
        parallel_tool_calls=parallel,
        chat_template_kwargs={"enable_thinking": thinking} if thinking is not None else None,
    )


def plan(
    constraints: Constraints,
    *,
    response_format: dict[str, Any] | None = None,
    tool_choice: Any = None,
    tools: list[dict[str, Any]] | None = None,
    **options: Any,
) -> ConstraintPlan | None:
    return constraints.plan_chat(
        response_format=response_format,
        tools=tool_specs(tools),
        tool_parser="hermes",
        output=output(tool_choice, tools=tools, **options),
    )


@pytest.fixture
def constraints(binding: TokenizerBinding) -> Constraints:
    return Constraints(GrammarEngine(binding))  # type: ignore[arg-type]


def built(found: ConstraintPlan | None) -> Any:
    assert found is not None
    return found.build()


def test_free_requests_get_no_plan(constraints: Constraints) -> None:
    assert plan(constraints) is None
    assert plan(constraints, response_format={"type": "text"}) is None
    assert plan(constraints, tools=TOOLS) is None  # auto without a format is free
    assert plan(constraints, tools=TOOLS, tool_choice="auto") is None


def test_json_modes_constrain_the_answer(constraints: Constraints) -> None:
    spec = built(plan(constraints, response_format={"type": "json_object"}))
    assert isinstance(spec, GrammarSpec) and spec.description == "json_object"
    spec = built(plan(constraints, response_format=JSON_SCHEMA))
    assert spec.param == "response_format" and spec.description == "json_schema 'a'"


@pytest.mark.parametrize(
    ("choice", "label"),
    [
        ("required", "required"),
        ({"type": "function", "function": {"name": "get_time"}}, "'get_time'"),
    ],
)
def test_required_and_named_choices_enforce_the_calls(
    constraints: Constraints, choice: Any, label: str
) -> None:
    found = plan(constraints, tools=TOOLS, tool_choice=choice)
    assert found is not None and not found.checks and not found.inline
    spec = found.build()
    assert isinstance(spec, GrammarSpec) and label in spec.description


def test_a_format_beside_required_calls_is_checked_not_used(constraints: Constraints) -> None:
    found = plan(constraints, tools=TOOLS, tool_choice="required", response_format=JSON_SCHEMA)
    assert found is not None and len(found.checks) == 1
    assert "required" in found.build().description
    assert found.checks[0]().param == "response_format"


def test_auto_with_a_format_allows_the_calls_or_the_answer(constraints: Constraints) -> None:
    found = plan(constraints, tools=TOOLS, response_format=JSON_SCHEMA)
    assert (
        found is not None and found.build().description == "tool_choice auto with response_format"
    )


def test_none_bans_the_call_marker_without_a_grammar(
    constraints: Constraints, binding: TokenizerBinding
) -> None:
    found = plan(constraints, tools=TOOLS, tool_choice="none")
    assert found is not None and found.inline
    ban = found.build()
    assert isinstance(ban, BannedTokens)
    assert ban.token_ids == {binding.added_tokens["<tool_call>"]}
    # With a format, its grammar already keeps the marker out.
    with_format = built(plan(constraints, tool_choice="none", response_format=JSON_SCHEMA))
    assert isinstance(with_format, GrammarSpec)


def test_a_reasoning_block_is_allowed_only_while_the_parser_is_on(
    constraints: Constraints,
) -> None:
    thinking = built(plan(constraints, response_format=JSON_SCHEMA, reasoning="qwen3"))
    plain = built(plan(constraints, response_format=JSON_SCHEMA))
    off = built(plan(constraints, response_format=JSON_SCHEMA, reasoning="qwen3", thinking=False))
    assert "reasoning_text" in thinking.grammar
    assert "reasoning_text" not in plain.grammar and off.grammar == plain.grammar


def test_parallel_tool_calls_false_is_passed_on(constraints: Constraints) -> None:
    one = built(plan(constraints, tools=TOOLS, tool_choice="required", parallel=False))
    many = built(plan(constraints, tools=TOOLS, tool_choice="required"))
    assert one.grammar != many.grammar


def test_an_engine_that_cannot_constrain_refuses_json_modes_only() -> None:
    constraints = Constraints(EchoEngine())
    with pytest.raises(UnsupportedFeatureError) as refused:
        plan(constraints, response_format={"type": "json_object"})
    assert refused.value.param == "response_format"
    assert "EchoEngine" in refused.value.message and "cpu or exllamav2" in refused.value.message
    # tool_choice stays checked on the output, as without constraints.
    assert plan(constraints, tools=TOOLS, tool_choice="required") is None


def test_a_model_whose_tokenizer_could_not_be_bound_says_why() -> None:
    engine = GrammarEngine(None, "the grammar engine cannot read the model's tokenizer (x)")
    with pytest.raises(UnsupportedFeatureError, match="cannot read the model's tokenizer"):
        plan(Constraints(engine), response_format=JSON_SCHEMA)  # type: ignore[arg-type]


async def test_compiling_puts_errors_on_the_field_at_fault(constraints: Constraints) -> None:
    bad = {"type": "json_schema", "json_schema": {"name": "b", "schema": {"type": "wat"}}}
    found = plan(constraints, response_format=bad)
    assert found is not None
    with pytest.raises(InvalidRequestError) as refused:
        await constraints.compile(found)
    assert refused.value.param == "response_format" and "wat" in refused.value.message
    tools = [{"type": "function", "function": {"name": "t", "parameters": {"type": "wat"}}}]
    found = plan(constraints, tools=tools, tool_choice="required")
    assert found is not None
    with pytest.raises(InvalidRequestError) as refused:
        await constraints.compile(found)
    assert refused.value.param == "tools"


async def test_the_limits_are_the_servers(binding: TokenizerBinding) -> None:
    constraints = Constraints(GrammarEngine(binding), ConstraintLimits(max_schema_depth=2))  # type: ignore[arg-type]
    deep = {"type": "object", "properties": {"a": {"type": "object", "properties": {}}}}
    fmt = {"type": "json_schema", "json_schema": {"name": "d", "schema": deep}}
    found = plan(constraints, response_format=fmt)
    assert found is not None
    with pytest.raises(InvalidRequestError, match="the limit is 2"):
        await constraints.compile(found)


async def test_a_grammar_is_compiled_once_for_every_request_that_sends_it(
    constraints: Constraints,
) -> None:
    first = await constraints.compile(built_plan(constraints))
    second = await constraints.compile(built_plan(constraints))
    assert first is not None and second is not None and first is not second
    compiler = constraints._compiler
    assert compiler is not None and compiler.compiles == 1


def built_plan(constraints: Constraints) -> ConstraintPlan:
    found = plan(constraints, response_format=JSON_SCHEMA)
    assert found is not None
    return found


async def test_errors_name_the_field_the_client_sent(constraints: Constraints) -> None:
    """The Responses API's format is `text.format`: a compile error names it, as does
    the refusal on an engine that cannot constrain."""
    paths = FieldPaths(format="text.format")
    fmt = response_format_of(JsonFormat("json_schema", schema=SCHEMA, name="a", strict=True))
    assert fmt == {
        "type": "json_schema",
        "json_schema": {"name": "a", "schema": SCHEMA, "strict": True},
    }
    found = constraints.plan_completion(fmt, paths)
    assert found is not None
    compiled = await constraints.compile(found)
    assert compiled is not None and compiled.param == "response_format"
    bad = constraints.plan_completion(
        response_format_of(JsonFormat("json_schema", schema={"type": 1}, name="b")), paths
    )
    assert bad is not None
    with pytest.raises(InvalidRequestError) as refused:
        await constraints.compile(bad)
    assert refused.value.param == "text.format"
    with pytest.raises(UnsupportedFeatureError) as unsupported:
        Constraints(EchoEngine()).plan_completion(fmt, paths)
    assert unsupported.value.param == "text.format"
