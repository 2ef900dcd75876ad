"""pythonic: `[f(a=1), g(b="x")]`, read with `ast`, never evaluated."""

from __future__ import annotations

import json

import pytest

from realtime.chat.tools.pythonic import PythonicToolParser
from tests.chat.tools.harness import Calls, check_case, check_malformed, specs, state_trace

TOOLS = specs("get_weather", "get_time", "search")

CASES: list[tuple[str, str, str, Calls]] = [
    (
        "single",
        '[get_weather(city="San Francisco", metric=True)]',
        "",
        [("get_weather", {"city": "San Francisco", "metric": True})],
    ),
    (
        "parallel_and_literals",
        "[get_weather(city='Paris', days=3, temps=[1.5, -2], opts={'a': None, 'b': (1, 2)}),"
        " get_time()]",
        "",
        [
            (
                "get_weather",
                {"city": "Paris", "days": 3, "temps": [1.5, -2], "opts": {"a": None, "b": [1, 2]}},
            ),
            ("get_time", {}),
        ],
    ),
    (
        "json_literals_and_trailing_comma",
        "[search(query='x', exact=true, limit=null,)]",
        "",
        [("search", {"query": "x", "exact": True, "limit": None})],
    ),
    (
        "strings_with_brackets_quotes_and_unicode",
        "[search(query=\"f(x) = [1, 2], \\\"q\\\" 's' 東京 🎉\", note='''multi\nline, ok)''')]",
        "",
        [("search", {"query": "f(x) = [1, 2], \"q\" 's' 東京 🎉", "note": "multi\nline, ok)"})],
    ),
    (
        "python_start_and_text_after",
        "<|python_start|>[get_time(tz='UTC')]<|python_end|>\nThat is all.",
        "That is all.",
        [("get_time", {"tz": "UTC"})],
    ),
    ("plain", "The answer is 4.", "The answer is 4.", []),
    ("a_list_that_is_not_calls", "[1, 2, 3] are numbers", "[1, 2, 3] are numbers", []),
    ("markdown_link", "[docs](https://example.com)", "[docs](https://example.com)", []),
]


@pytest.mark.parametrize(
    ("text", "content", "calls"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_cases(text: str, content: str, calls: Calls) -> None:
    check_case("pythonic", text, content, calls, TOOLS)


def test_arguments_are_json_dumps_of_the_literals() -> None:
    result = PythonicToolParser.parse("[get_weather(city='Zürich', n=1)]", TOOLS)
    args = result.tool_calls[0].arguments
    assert args == json.dumps({"city": "Zürich", "n": 1}, ensure_ascii=False)


def test_each_argument_streams_when_complete() -> None:
    from realtime.protocol.output import ToolCallArguments, ToolCallStart

    parser = PythonicToolParser(TOOLS)
    events = parser.feed("[get_weather(city='Oslo', da")
    assert isinstance(events[0], ToolCallStart)
    assert events[1:] == [ToolCallArguments(0, '{"city": "Oslo"')]
    assert parser.feed("ys=2)]") == [ToolCallArguments(0, ', "days": 2}')]


def test_nothing_is_evaluated(caplog: pytest.LogCaptureFixture) -> None:
    text = "[get_time(tz=__import__('os').system('echo pwned'))]"
    check_malformed("pythonic", text, caplog, TOOLS)


MALFORMED = [
    ("positional_argument", "[get_time('UTC')]"),
    ("truncated", "[get_weather(city='Par"),
    ("unknown_tool", "[drop_db(force=True)]"),
    ("duplicate_argument", "[get_time(tz='a', tz='b')]"),
    ("non_literal", "[get_time(tz=now())]"),
    ("star_kwargs", "[get_time(**opts)]"),
    ("syntax_error", "[get_time(tz=='UTC')]"),
]


@pytest.mark.parametrize("text", [m[1] for m in MALFORMED], ids=[m[0] for m in MALFORMED])
def test_malformed(text: str, caplog: pytest.LogCaptureFixture) -> None:
    check_malformed("pythonic", text, caplog, TOOLS)


def test_pythonic_state_path() -> None:
    text = "<|python_start|>[f(a=1), g()]<|python_end|> ok"
    assert state_trace("pythonic", [text]) == [
        "START",
        "OPEN",
        "LIST",
        "NAME",
        "ARGS",
        "AFTER_CALL",
        "LIST",
        "NAME",
        "ARGS",
        "AFTER_CALL",
        "END_LIST",
        "CONTENT",
    ]
    assert state_trace("pythonic", ["[1, 2]"]) == ["START", "LIST", "CONTENT"]
