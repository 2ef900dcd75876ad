"""llama3_json: a JSON call at the start of the output, or after <|python_tag|>; `;` separates."""

from __future__ import annotations

import pytest

from tests.chat.tools.harness import Calls, check_case, check_malformed, specs, state_trace

TOOLS = specs("get_weather", "search")

CASES: list[tuple[str, str, str, Calls]] = [
    (
        "bare_object",
        '{"name": "get_weather", "parameters": {"location": "Berlin", "unit": "celsius"}}',
        "",
        [("get_weather", {"location": "Berlin", "unit": "celsius"})],
    ),
    (
        "python_tag",
        '<|python_tag|>{"name": "search", "parameters": {"query": "llama 3.1 release"}}',
        "",
        [("search", {"query": "llama 3.1 release"})],
    ),
    (
        "parallel_with_semicolons",
        '<|python_tag|>{"name": "get_weather", "parameters": {"location": "Rome"}}; '
        '{"name": "get_weather", "parameters": {"location": "Milan"}};{"name": "search",'
        ' "arguments": {"query": "x"}}',
        "",
        [
            ("get_weather", {"location": "Rome"}),
            ("get_weather", {"location": "Milan"}),
            ("search", {"query": "x"}),
        ],
    ),
    (
        "text_before_and_after",
        'Let me search.<|python_tag|>{"name": "search", "parameters": {"query": "ok"}}\nDone.',
        "Let me search.\nDone.",
        [("search", {"query": "ok"})],
    ),
    (
        "leading_whitespace_and_type_key",
        '\n\n {"type": "function", "name": "search", "parameters": {"query": "日本語 ✓"}}',
        "",
        [("search", {"query": "日本語 ✓"})],
    ),
    ("json_later_in_text_is_text", 'Here: {"name": "search"}', 'Here: {"name": "search"}', []),
    ("plain", "Sure, here it is.\n", "Sure, here it is.\n", []),
]


@pytest.mark.parametrize(
    ("text", "content", "calls"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_cases(text: str, content: str, calls: Calls) -> None:
    check_case("llama3_json", text, content, calls, TOOLS)


MALFORMED = [
    ("truncated", '<|python_tag|>{"name": "search", "parameters": {"query": "llam'),
    ("bad_json", '{"name": "search", "parameters": {"query": "x"]}'),
    ("builtin_python_code", '<|python_tag|>brave_search.call(query="weather")'),
    ("answer_that_is_json", '{"result": 42}'),
]


@pytest.mark.parametrize("text", [m[1] for m in MALFORMED], ids=[m[0] for m in MALFORMED])
def test_malformed(text: str, caplog: pytest.LogCaptureFixture) -> None:
    check_malformed("llama3_json", text, caplog, TOOLS)


def test_bad_second_call_after_semicolon(caplog: pytest.LogCaptureFixture) -> None:
    text = '{"name": "search", "parameters": {"query": "a"}}; not a call'
    check_malformed(
        "llama3_json",
        text,
        caplog,
        TOOLS,
        content="; not a call",
        calls=[("search", {"query": "a"})],
    )


def test_llama3_json_state_path() -> None:
    text = '{"name": "f", "parameters": {}}; {"name": "f", "parameters": {}} ok'
    assert state_trace("llama3_json", [text]) == [
        "START",
        "CALL",
        "BETWEEN",
        "CALL",
        "BETWEEN",
        "CONTENT",
    ]
    assert state_trace("llama3_json", ["plain"]) == ["START", "CONTENT"]
