"""mistral: `[TOOL_CALLS]` with a JSON array (<= v7) or `NAME[ARGS]{...}` (v11+); 9-char ids."""

from __future__ import annotations

import re

import pytest

from realtime.chat.tools.mistral import MistralToolParser
from tests.chat.tools.harness import Calls, check_case, check_malformed, specs, state_trace

TOOLS = specs("get_current_weather", "get_time")

CASES: list[tuple[str, str, str, Calls]] = [
    (
        "array",
        '[TOOL_CALLS] [{"name": "get_current_weather", "arguments": {"location": "Paris, FR",'
        ' "format": "celsius"}}]',
        "",
        [("get_current_weather", {"location": "Paris, FR", "format": "celsius"})],
    ),
    (
        "array_parallel",
        '[TOOL_CALLS][{"name": "get_current_weather", "arguments": {"location": "Lyon"}},'
        ' {"name": "get_time", "arguments": {}, "id": "abcdefghi"}]',
        "",
        [("get_current_weather", {"location": "Lyon"}), ("get_time", {})],
    ),
    (
        "v11",
        '[TOOL_CALLS]get_current_weather[ARGS]{"location": "Nice", "format": "celsius"}',
        "",
        [("get_current_weather", {"location": "Nice", "format": "celsius"})],
    ),
    (
        "v11_parallel_and_text",
        'Checking both.[TOOL_CALLS]get_current_weather[ARGS]{"location": "Nice"}'
        '[TOOL_CALLS]get_time[ARGS]{"tz": "Europe/Paris"}',
        "Checking both.",
        [("get_current_weather", {"location": "Nice"}), ("get_time", {"tz": "Europe/Paris"})],
    ),
    (
        "v11_without_args_marker",
        '[TOOL_CALLS]get_time{"tz": "Asia/Tokyo 東京"}',
        "",
        [("get_time", {"tz": "Asia/Tokyo 東京"})],
    ),
    (
        "v11_call_id",
        "[TOOL_CALLS]get_time[CALL_ID]a1B2c3D4e[ARGS]{}",
        "",
        [("get_time", {})],
    ),
    ("plain", "No call [TOOL here.", "No call [TOOL here.", []),
]


@pytest.mark.parametrize(
    ("text", "content", "calls"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_cases(text: str, content: str, calls: Calls) -> None:
    check_case("mistral", text, content, calls, TOOLS)


def test_ids_are_nine_alphanumerics_and_call_id_is_kept() -> None:
    result = MistralToolParser.parse(
        "[TOOL_CALLS]get_time[ARGS]{}[TOOL_CALLS]get_time[CALL_ID]a1B2c3D4e[ARGS]{}", TOOLS
    )
    first, second = result.tool_calls
    assert re.fullmatch(r"[A-Za-z0-9]{9}", first.id)
    assert second.id == "a1B2c3D4e"


MALFORMED = [
    ("truncated_array", '[TOOL_CALLS] [{"name": "get_time", "arguments": {"tz": "U'),
    ("empty_array", "[TOOL_CALLS][]"),
    ("marker_only", "[TOOL_CALLS]"),
    ("v11_bad_name", '[TOOL_CALLS]get time[ARGS]{"tz": "UTC"}'),
    ("v11_args_not_object", '[TOOL_CALLS]get_time[ARGS]"UTC"'),
    ("v11_truncated", '[TOOL_CALLS]get_time[ARGS]{"tz": "UT'),
    ("unknown_tool", "[TOOL_CALLS]format_disk[ARGS]{}"),
]


@pytest.mark.parametrize("text", [m[1] for m in MALFORMED], ids=[m[0] for m in MALFORMED])
def test_malformed(text: str, caplog: pytest.LogCaptureFixture) -> None:
    check_malformed("mistral", text, caplog, TOOLS)


def test_mistral_state_paths() -> None:
    array = '[TOOL_CALLS][{"name": "get_time", "arguments": {}}]'
    assert state_trace("mistral", [array], TOOLS) == [
        "CONTENT",
        "AFTER_MARKER",
        "ARRAY_CALL",
        "ARRAY_NEXT",
        "CONTENT",
    ]
    v11 = '[TOOL_CALLS]get_time[CALL_ID]abcdefghi[ARGS] {"tz": "UTC"}'
    assert state_trace("mistral", [v11], TOOLS) == [
        "CONTENT",
        "AFTER_MARKER",
        "NAME",
        "CALL_ID",
        "ARGS_START",
        "ARGS",
        "CONTENT",
    ]
