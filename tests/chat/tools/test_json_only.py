"""json: the whole output is a call object or an array of them."""

from __future__ import annotations

import pytest

from tests.chat.tools.harness import Calls, check_case, check_malformed, specs, state_trace

TOOLS = specs("lookup", "add")

CASES: list[tuple[str, str, str, Calls]] = [
    ("object", '{"name": "lookup", "arguments": {"id": 7}}', "", [("lookup", {"id": 7})]),
    (
        "array",
        ' [{"name": "add", "parameters": {"a": 1, "b": 2}},\n {"name": "lookup", "arguments":'
        ' {"id": "é"}}]',
        "",
        [("add", {"a": 1, "b": 2}), ("lookup", {"id": "é"})],
    ),
    (
        "text_after",
        '{"name": "lookup", "arguments": {}}\n\nThat is my call.',
        "That is my call.",
        [("lookup", {})],
    ),
    ("text_first_is_plain_content", 'Calling {"name": "lookup"}', 'Calling {"name": "lookup"}', []),
]


@pytest.mark.parametrize(
    ("text", "content", "calls"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_json_cases(text: str, content: str, calls: Calls) -> None:
    check_case("json", text, content, calls, TOOLS)


MALFORMED = [
    ("truncated", '{"name": "lookup", "arguments": {"id": '),
    ("empty_array", "[]"),
    ("array_of_numbers", "[1, 2]"),
    ("unknown_tool", '{"name": "shutdown", "arguments": {}}'),
]


@pytest.mark.parametrize("text", [m[1] for m in MALFORMED], ids=[m[0] for m in MALFORMED])
def test_json_malformed(text: str, caplog: pytest.LogCaptureFixture) -> None:
    check_malformed("json", text, caplog, TOOLS)


def test_json_state_path() -> None:
    text = ' [{"name": "add", "arguments": {}}, {"name": "lookup"}] done'
    assert state_trace("json", [text], TOOLS) == [
        "START",
        "CALL",
        "ARRAY_NEXT",
        "CALL",
        "ARRAY_NEXT",
        "CONTENT",
    ]
