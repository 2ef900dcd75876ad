"""The top-level package: its public names, imported lazily, and the parsers on their own.

Everything here is imported from `realtime` itself, as a library user would.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

import realtime
from realtime import (
    ContentDelta,
    ParsedOutput,
    ReasoningDelta,
    ToolCallArguments,
    ToolCallStart,
    ToolSpec,
    UnknownParserError,
    create_reasoning_parser,
    create_tool_parser,
    parse_reasoning,
    parse_tool_calls,
    reasoning_parser_names,
    tool_parser_names,
)

# --- the public names ---


def test_every_public_name_resolves() -> None:
    for name in realtime.__all__:
        assert getattr(realtime, name) is not None, name
    assert set(realtime.__all__) <= set(dir(realtime))


def test_an_unknown_name_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="no attribute 'nothing_here'"):
        realtime.nothing_here  # noqa: B018


def test_importing_a_part_does_not_load_the_server() -> None:
    """The exports are lazy: the parsers (and the package) load without starlette."""
    code = (
        "import sys, realtime\n"
        "from realtime import parse_tool_calls, tool_parser_names\n"
        "print(sorted(m for m in ('starlette', 'uvicorn', 'realtime.app') if m in sys.modules))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert out.strip() == "[]"


def test_the_serving_names_are_the_library_api() -> None:
    from realtime.api import create_app, serve

    assert realtime.create_app is create_app and realtime.serve is serve


# --- tool calls: every supported format ---

CALLS_BEGIN = "<\uff5ctool\u2581calls\u2581begin\uff5c>"
CALLS_END = "<\uff5ctool\u2581calls\u2581end\uff5c>"
CALL_BEGIN = "<\uff5ctool\u2581call\u2581begin\uff5c>"
CALL_END = "<\uff5ctool\u2581call\u2581end\uff5c>"
SEP = "<\uff5ctool\u2581sep\uff5c>"

#: parser -> (model output, the content left, the calls as (name, arguments))
TOOL_TEXTS: dict[str, tuple[str, str, list[tuple[str, dict[str, object]]]]] = {
    "hermes": (
        'Let me look.\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Oslo"}}\n'
        "</tool_call>",
        "Let me look.",
        [("get_weather", {"city": "Oslo"})],
    ),
    "llama3_json": (
        '<|python_tag|>{"name": "get_weather", "parameters": {"city": "Oslo"}}',
        "",
        [("get_weather", {"city": "Oslo"})],
    ),
    "mistral": (
        '[TOOL_CALLS][{"name": "get_weather", "arguments": {"city": "Oslo"}},'
        ' {"name": "get_time", "arguments": {}}]',
        "",
        [("get_weather", {"city": "Oslo"}), ("get_time", {})],
    ),
    "deepseek_v3": (
        f"{CALLS_BEGIN}{CALL_BEGIN}function{SEP}get_weather\n```json\n"
        f'{{"city": "Oslo"}}\n```{CALL_END}{CALLS_END}',
        "",
        [("get_weather", {"city": "Oslo"})],
    ),
    "pythonic": (
        '[get_weather(city="Oslo"), get_time()]',
        "",
        [("get_weather", {"city": "Oslo"}), ("get_time", {})],
    ),
    "qwen3_coder": (
        "<tool_call>\n<function=get_weather>\n<parameter=city>\nOslo\n</parameter>\n"
        "</function>\n</tool_call>",
        "",
        [("get_weather", {"city": "Oslo"})],
    ),
    "json": (
        '{"name": "get_weather", "arguments": {"city": "Oslo"}}',
        "",
        [("get_weather", {"city": "Oslo"})],
    ),
    "passthrough": ('<tool_call>{"name": "get_weather"}</tool_call>', None, []),  # type: ignore[dict-item]
}
TOOLS = [
    {"type": "function", "function": {"name": "get_weather", "parameters": {}}},
    {"type": "function", "function": {"name": "get_time", "parameters": {}}},
]


def test_every_tool_parser_has_a_text_here() -> None:
    assert sorted(TOOL_TEXTS) == tool_parser_names()


@pytest.mark.parametrize("parser", sorted(TOOL_TEXTS))
def test_parse_tool_calls_returns_the_calls(parser: str) -> None:
    text, content, calls = TOOL_TEXTS[parser]
    parsed = parse_tool_calls(text, parser, TOOLS)
    assert isinstance(parsed, ParsedOutput)
    assert [(c.name, json.loads(c.arguments)) for c in parsed.tool_calls] == calls
    assert all(c.id for c in parsed.tool_calls)
    assert parsed.content == (text if content is None else content)
    assert parsed.reasoning == ""


def test_parse_tool_calls_takes_tool_specs_or_nothing() -> None:
    text = '<tool_call>\n{"name": "lookup", "arguments": {"id": 7}}\n</tool_call>'
    undeclared = parse_tool_calls(text, "hermes", [ToolSpec("get_time")])
    assert undeclared.tool_calls == [] and "lookup" in undeclared.content
    [call] = parse_tool_calls(text, "hermes").tool_calls  # no tools declared: any name
    assert (call.name, json.loads(call.arguments)) == ("lookup", {"id": 7})


def test_an_unknown_parser_name_lists_the_valid_ones() -> None:
    with pytest.raises(UnknownParserError, match="valid names: deepseek_v3, hermes"):
        parse_tool_calls("x", "hermes2")
    with pytest.raises(UnknownParserError, match="valid names: deepseek_r1, mistral"):
        parse_reasoning("x", "qwen")


# --- reasoning: every supported format ---

#: parser -> (model output, reasoning, answer)
REASONING_TEXTS = {
    "qwen3": ("<think>\nTwo plus two.\n</think>\n\nIt is 4.", "Two plus two.", "It is 4."),
    "deepseek_r1": ("Let me add.\n</think>\n\nIt is 4.", "Let me add.", "It is 4."),
    "mistral": ("[THINK]Two plus two.[/THINK]It is 4.", "Two plus two.", "It is 4."),
    "tags": ("<think>Two plus two.</think>It is 4.", "Two plus two.", "It is 4."),
}


def test_every_reasoning_parser_has_a_text_here() -> None:
    assert sorted(REASONING_TEXTS) == reasoning_parser_names()


@pytest.mark.parametrize("parser", sorted(REASONING_TEXTS))
def test_parse_reasoning_returns_the_reasoning(parser: str) -> None:
    text, reasoning, answer = REASONING_TEXTS[parser]
    parsed = parse_reasoning(text, parser)
    assert (parsed.reasoning, parsed.content, parsed.tool_calls) == (reasoning, answer, [])


def test_parse_reasoning_follows_the_prompt() -> None:
    # The prompt opened the block: the output starts inside the reasoning.
    parsed = parse_reasoning("Hmm.\n</think>\n\nIt is 4.", "qwen3", prompt="<think>\n")
    assert (parsed.reasoning, parsed.content) == ("Hmm.", "It is 4.")
    off = parse_reasoning("<think>x</think>y", "qwen3", enable_thinking=False)
    assert (off.reasoning, off.content) == ("", "<think>x</think>y")


# --- the streaming classes ---


def test_streaming_parsers_give_the_complete_result_piece_by_piece() -> None:
    text = "<think>Weather first.</think>" + TOOL_TEXTS["hermes"][0]
    reasoning = create_reasoning_parser("qwen3")
    tools = create_tool_parser("hermes", [ToolSpec("get_weather")])
    events: list[object] = []
    for i in range(0, len(text), 3):  # three characters at a time, markers split
        for event in reasoning.feed(text[i : i + 3]):
            events += tools.feed(event.text) if isinstance(event, ContentDelta) else [event]
    for event in reasoning.finish():
        events += tools.feed(event.text) if isinstance(event, ContentDelta) else [event]
    events += tools.finish()
    thought = "".join(e.text for e in events if isinstance(e, ReasoningDelta))
    [start] = [e for e in events if isinstance(e, ToolCallStart)]
    arguments = "".join(e.text for e in events if isinstance(e, ToolCallArguments))
    content = "".join(e.text for e in events if isinstance(e, ContentDelta))
    assert thought == "Weather first."
    assert (start.name, json.loads(arguments)) == ("get_weather", {"city": "Oslo"})
    assert content == "Let me look."
