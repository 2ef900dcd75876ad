"""deepseek_v3: DeepSeek's special-token layout (V3/R1), and the V3.1 variant."""

from __future__ import annotations

import pytest

from realtime.chat.tools.deepseek_v3 import CALL_BEGIN, CALL_END, CALLS_BEGIN, CALLS_END, SEP
from tests.chat.tools.harness import Calls, check_case, check_malformed, specs, state_trace

TOOLS = specs("get_weather", "get_time")


def v3(name: str, args: str) -> str:
    return f"{CALL_BEGIN}function{SEP}{name}\n```json\n{args}\n```{CALL_END}"


def v31(name: str, args: str) -> str:
    return f"{CALL_BEGIN}{name}{SEP}{args}{CALL_END}"


def test_markers_are_deepseeks_code_points() -> None:
    assert CALLS_BEGIN == "<\uff5ctool\u2581calls\u2581begin\uff5c>"
    assert SEP == "<\uff5ctool\u2581sep\uff5c>"


CASES: list[tuple[str, str, str, Calls]] = [
    (
        "single",
        CALLS_BEGIN + v3("get_weather", '{"location": "Tokyo"}') + CALLS_END,
        "",
        [("get_weather", {"location": "Tokyo"})],
    ),
    (
        "parallel_with_text",
        "I'll check both.\n\n"
        + CALLS_BEGIN
        + v3("get_weather", '{"location": "Hangzhou 杭州"}')
        + "\n"
        + v3("get_time", "{}")
        + CALLS_END,
        "I'll check both.",
        [("get_weather", {"location": "Hangzhou 杭州"}), ("get_time", {})],
    ),
    (
        "v31_layout_and_text_after",
        CALLS_BEGIN + v31("get_time", '{"tz": "UTC"}') + CALLS_END + "\nDone.",
        "Done.",
        [("get_time", {"tz": "UTC"})],
    ),
    (
        "end_markers_missing_at_eos",
        CALLS_BEGIN + f'{CALL_BEGIN}function{SEP}get_time\n```json\n{{"tz": "UTC"}}',
        "",
        [("get_time", {"tz": "UTC"})],
    ),
    (
        "plain",
        "Plain <\uff5cnot a marker\uff5c> answer.",
        "Plain <\uff5cnot a marker\uff5c> answer.",
        [],
    ),
]


@pytest.mark.parametrize(
    ("text", "content", "calls"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_cases(text: str, content: str, calls: Calls) -> None:
    check_case("deepseek_v3", text, content, calls, TOOLS)


MALFORMED = [
    ("truncated_args", CALLS_BEGIN + f'{CALL_BEGIN}function{SEP}get_weather\n```json\n{{"loc'),
    ("truncated_head", CALLS_BEGIN + f"{CALL_BEGIN}functi"),
    ("section_only", CALLS_BEGIN),
    ("bad_json", CALLS_BEGIN + v3("get_weather", '{"location": Tokyo}') + CALLS_END),
    ("garbage_in_section", CALLS_BEGIN + "oops" + CALLS_END),
    ("unknown_tool", CALLS_BEGIN + v3("drop_tables", "{}") + CALLS_END),
    ("name_without_newline", CALLS_BEGIN + f"{CALL_BEGIN}function{SEP}get_time{CALL_END}"),
]


@pytest.mark.parametrize("text", [m[1] for m in MALFORMED], ids=[m[0] for m in MALFORMED])
def test_malformed(text: str, caplog: pytest.LogCaptureFixture) -> None:
    check_malformed("deepseek_v3", text, caplog, TOOLS)


def test_empty_section(caplog: pytest.LogCaptureFixture) -> None:
    check_malformed("deepseek_v3", CALLS_BEGIN + CALLS_END, caplog, TOOLS)


def test_deepseek_v3_state_path() -> None:
    text = (
        CALLS_BEGIN
        + CALL_BEGIN
        + "function"
        + SEP
        + 'f\n```json\n{"a": 1}\n```'
        + CALL_END
        + CALL_BEGIN
        + "g"
        + SEP
        + "{}"
        + CALL_END
        + CALLS_END
        + " ok"
    )
    assert state_trace("deepseek_v3", [text]) == [
        "CONTENT",
        "SECTION",
        "HEAD",
        "AFTER_SEP",
        "NAME",  # the R1 layout: type, separator, then the name on its own line
        "FENCE",
        "ARGS_START",
        "ARGS",
        "TAIL",
        "HEAD",
        "AFTER_SEP",
        "ARGS",  # V3.1: the head was the name and `{` follows the separator
        "TAIL",
        "CONTENT",
    ]
