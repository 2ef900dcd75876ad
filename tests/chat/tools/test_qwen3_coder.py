"""qwen3_coder: `<function=NAME><parameter=P>value</parameter></function>`, typed by schema."""

from __future__ import annotations

import pytest

from realtime.chat.tools.qwen3_coder import typed_value
from tests.chat.tools.harness import Calls, check_case, check_malformed, specs, state_trace

SCHEMA = {
    "type": "object",
    "properties": {
        "city": {"type": "string"},
        "days": {"type": "integer"},
        "ratio": {"type": "number"},
        "metric": {"type": "boolean"},
        "tags": {"type": "array"},
        "opts": {"type": "object"},
        "maybe": {"anyOf": [{"type": "integer"}, {"type": "null"}]},
        "code": {"type": "string"},
    },
}
TOOLS = specs("get_time", get_weather=SCHEMA)


def call(name: str, **params: str) -> str:
    body = "".join(f"<parameter={k}>\n{v}\n</parameter>\n" for k, v in params.items())
    return f"<tool_call>\n<function={name}>\n{body}</function>\n</tool_call>"


CASES: list[tuple[str, str, str, Calls]] = [
    (
        "typed_by_schema",
        call(
            "get_weather",
            city="Paris",
            days="3",
            ratio="0.5",
            metric="true",
            tags='["a", "b"]',
            opts="{'deep': [1, None]}",
            maybe="null",
        ),
        "",
        [
            (
                "get_weather",
                {
                    "city": "Paris",
                    "days": 3,
                    "ratio": 0.5,
                    "metric": True,
                    "tags": ["a", "b"],
                    "opts": {"deep": [1, None]},
                    "maybe": None,
                },
            )
        ],
    ),
    (
        "strings_keep_inner_newlines_and_markup",
        call("get_weather", code="def f():\n    return '<b>東京</b>'\n", city="3"),
        "",
        [("get_weather", {"code": "def f():\n    return '<b>東京</b>'\n", "city": "3"})],
    ),
    (
        "parallel_with_text",
        "I'll check.\n\n" + call("get_weather", city="Rome") + "\n" + call("get_time"),
        "I'll check.",
        [("get_weather", {"city": "Rome"}), ("get_time", {})],
    ),
    (
        "no_schema_means_strings",
        call("get_time", tz="UTC", offset="2"),
        "",
        [("get_time", {"tz": "UTC", "offset": "2"})],
    ),
    (
        "missing_parameter_end_tag",
        "<tool_call>\n<function=get_weather>\n<parameter=city>\nOslo\n<parameter=days>\n2\n"
        "</function>\n</tool_call>",
        "",
        [("get_weather", {"city": "Oslo", "days": 2})],
    ),
    (
        "value_that_does_not_convert_stays_a_string",
        call("get_weather", days="three"),
        "",
        [("get_weather", {"days": "three"})],
    ),
    ("plain", "Use <function=x> syntax.", "Use <function=x> syntax.", []),
]


@pytest.mark.parametrize(
    ("text", "content", "calls"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_cases(text: str, content: str, calls: Calls) -> None:
    check_case("qwen3_coder", text, content, calls, TOOLS)


def test_parameters_stream_one_by_one() -> None:
    from realtime.chat.tools.qwen3_coder import Qwen3CoderToolParser
    from realtime.protocol.output import ToolCallArguments, ToolCallStart

    parser = Qwen3CoderToolParser(TOOLS)
    events = parser.feed("<tool_call>\n<function=get_weather>\n<parameter=city>\nRome\n</param")
    assert [type(e) for e in events] == [ToolCallStart]
    assert parser.feed("eter>\n<parameter=days>\n") == [ToolCallArguments(0, '{"city": "Rome"')]
    assert parser.feed("4\n</parameter>\n</function>") == [ToolCallArguments(0, ', "days": 4}')]


def test_typed_value() -> None:
    assert typed_value("12", {"type": "integer"}) == 12
    assert typed_value("1e3", {"type": "number"}) == 1000.0
    assert typed_value("False", {"type": "boolean"}) is False
    assert typed_value("x", {"type": ["integer", "string"]}) == "x"
    assert typed_value("nan", {"type": "number"}) == "nan"
    assert typed_value("[1,", {"type": "array"}) == "[1,"


MALFORMED = [
    ("truncated_value", "<tool_call>\n<function=get_weather>\n<parameter=city>\nPar"),
    ("truncated_head", "<tool_call>\n<function=get_wea"),
    ("unknown_tool", call("rm", path="/")),
    ("no_function_tag", '<tool_call>\n{"name": "get_time"}\n</tool_call>'),
    (
        "repeated_parameter",
        call("get_weather", city="a").replace(
            "</function>", "<parameter=city>\nb\n</parameter>\n</function>"
        ),
    ),
    ("text_inside_function", "<tool_call>\n<function=get_time>\nhello\n</function>\n</tool_call>"),
]


@pytest.mark.parametrize("text", [m[1] for m in MALFORMED], ids=[m[0] for m in MALFORMED])
def test_malformed(text: str, caplog: pytest.LogCaptureFixture) -> None:
    check_malformed("qwen3_coder", text, caplog, TOOLS)


def test_qwen3_coder_state_path() -> None:
    text = "<tool_call>\n<function=f>\n<parameter=a>\n1\n</parameter>\n</function>\n</tool_call> ok"
    assert state_trace("qwen3_coder", [text]) == [
        "CONTENT",
        "HEAD",
        "FN_NAME",
        "BODY",
        "P_NAME",
        "VALUE",
        "BODY",
        "AFTER",
        "CONTENT",
    ]
