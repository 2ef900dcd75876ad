"""tool_choice and parallel_tool_calls: normalisation, refusals, and the compliance check."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from realtime.chat.tools import fold_events
from realtime.chat.tools.choice import (
    ToolChoice,
    ToolChoiceError,
    normalize_tool_choice,
    tool_choice_violation,
)
from realtime.chat.tools.output import build_output_parser
from realtime.dialects.chat.request import NamedToolChoice

TOOLS = [
    {"type": "function", "function": {"name": "get_weather", "parameters": {}}},
    {"type": "function", "function": {"name": "get_time"}},
]
WEATHER = '<tool_call>{"name": "get_weather", "arguments": {"city": "Oslo"}}</tool_call>'
TIME = '<tool_call>{"name": "get_time", "arguments": {}}</tool_call>'


def parse(text: str, **options: Any) -> tuple[Any, Any]:
    options.setdefault("tool_parser", "hermes")
    options.setdefault("tools", TOOLS)
    parser = build_output_parser(**options)
    result = fold_events([*parser.feed(text), *parser.finish()])
    return result, parser


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (None, ToolChoice("auto")),
        ("none", ToolChoice("none")),
        ("auto", ToolChoice("auto")),
        ("required", ToolChoice("required")),
        ({"type": "function", "function": {"name": "f"}}, ToolChoice("function", "f")),
        (NamedToolChoice.model_validate({"function": {"name": "g"}}), ToolChoice("function", "g")),
    ],
)
def test_normalize(value: Any, expected: ToolChoice) -> None:
    assert normalize_tool_choice(value) == expected


@pytest.mark.parametrize("value", ["always", {"type": "function"}, {"function": {"name": ""}}, 3])
def test_normalize_rejects(value: Any) -> None:
    with pytest.raises(ToolChoiceError):
        normalize_tool_choice(value)


def test_none_leaves_calls_as_content() -> None:
    result, parser = parse(WEATHER, tool_choice="none")
    assert result.content == WEATHER
    assert not result.tool_calls
    assert parser.tool_choice_violation() is None


def test_no_tools_in_the_request_means_no_parsing() -> None:
    result, _ = parse(WEATHER, tools=None)
    assert result.content == WEATHER


def test_auto_parses() -> None:
    result, parser = parse(WEATHER)
    assert [c.name for c in result.tool_calls] == ["get_weather"]
    assert parser.tool_choice_violation() is None


def test_required() -> None:
    _, ok = parse(WEATHER, tool_choice="required")
    assert ok.tool_choice_violation() is None
    _, bad = parse("Just text.", tool_choice="required")
    assert bad.tool_choice_violation() == (
        "tool_choice is 'required' but the model answered without calling a tool"
    )


def test_named_function(caplog: pytest.LogCaptureFixture) -> None:
    named = {"type": "function", "function": {"name": "get_weather"}}
    result, ok = parse(WEATHER, tool_choice=named)
    assert [c.name for c in result.tool_calls] == ["get_weather"]
    assert ok.tool_choice_violation() is None
    with caplog.at_level(logging.WARNING, logger="realtime.chat.tools"):
        result, other = parse(TIME, tool_choice=named)
    # A call to another function is refused by the parser: it stays content.
    assert result.content == TIME
    assert "not among the request's tools" in caplog.text
    assert other.tool_choice_violation() == (
        "tool_choice names 'get_weather' but the model did not call it"
    )


def test_violation_function_directly() -> None:
    choice = ToolChoice("function", "f")
    assert tool_choice_violation(choice, ["f", "g"]) == (
        "tool_choice names 'f' but the model called 'g'"
    )
    assert tool_choice_violation(ToolChoice("auto"), []) is None


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"tool_choice": "required", "tools": None}, "needs `tools`"),
        (
            {"tool_choice": {"type": "function", "function": {"name": "nope"}}},
            "'nope', which is not among the request's tools",
        ),
        ({"tool_choice": "required", "tool_parser": None}, "needs a tool parser"),
        ({"tool_choice": "required", "tool_parser": "passthrough"}, "needs a tool parser"),
    ],
)
def test_choices_that_cannot_be_checked_are_refused(options: Any, message: str) -> None:
    with pytest.raises(ToolChoiceError, match=message) as info:
        parse("x", **options)
    assert info.value.param == "tool_choice"


def test_parallel_tool_calls_false_keeps_the_first(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="realtime.chat.tools"):
        result, parser = parse(WEATHER + TIME, parallel_tool_calls=False)
    assert [c.name for c in result.tool_calls] == ["get_weather"]
    assert parser.call_names == ["get_weather"]
    assert "parallel_tool_calls is false: dropping the model's extra call to 'get_time'" in (
        caplog.text
    )
