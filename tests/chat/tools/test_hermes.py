"""hermes: `<tool_call>{json}</tool_call>` blocks (Hermes 2 Pro, Qwen2.5, Qwen3)."""

from __future__ import annotations

import pytest

from tests.chat.tools.harness import Calls, check_case, check_malformed, specs, state_trace

WEATHER = specs("get_weather", "get_time")

CASES: list[tuple[str, str, str, Calls]] = [
    (
        "single",
        '<tool_call>\n{"name": "get_weather", "arguments": {"location": "San Francisco, CA",'
        ' "unit": "fahrenheit"}}\n</tool_call>',
        "",
        [("get_weather", {"location": "San Francisco, CA", "unit": "fahrenheit"})],
    ),
    (
        "parallel",
        '<tool_call>\n{"name": "get_weather", "arguments": {"location": "Paris"}}\n</tool_call>\n'
        '<tool_call>\n{"name": "get_time", "arguments": {"tz": "Europe/Paris"}}\n</tool_call>',
        "",
        [("get_weather", {"location": "Paris"}), ("get_time", {"tz": "Europe/Paris"})],
    ),
    (
        "text_before_and_after",
        "Let me look that up.\n\n"
        '<tool_call>\n{"name": "get_weather", "arguments": {"location": "Oslo"}}\n</tool_call>'
        "\n\nI'll report back.",
        "Let me look that up.\n\nI'll report back.",
        [("get_weather", {"location": "Oslo"})],
    ),
    (
        "arguments_before_name",
        '<tool_call>{"arguments": {"tz": "UTC"}, "name": "get_time"}</tool_call>',
        "",
        [("get_time", {"tz": "UTC"})],
    ),
    (
        "unicode_and_escapes",
        '<tool_call>\n{"name": "get_weather", "arguments": {"location": "東京 🗼",'
        ' "note": "caf\\u00e9 \\"quoted\\" \\\\ back", "nested": {"a": [1, -2.5e3, true, null]}}}'
        "\n</tool_call>",
        "",
        [
            (
                "get_weather",
                {
                    "location": "東京 🗼",
                    "note": 'café "quoted" \\ back',
                    "nested": {"a": [1, -2500.0, True, None]},
                },
            )
        ],
    ),
    (
        "arguments_as_a_json_string",
        '<tool_call>{"name": "get_time", "arguments": "{\\"tz\\": \\"UTC\\"}"}</tool_call>',
        "",
        [("get_time", {"tz": "UTC"})],
    ),
    (
        "no_arguments_and_extra_keys",
        '<tool_call>{"type": "function", "name": "get_time"}</tool_call>',
        "",
        [("get_time", {})],
    ),
    (
        "missing_closing_tag_at_eos",
        '<tool_call>\n{"name": "get_time", "arguments": {}}',
        "",
        [("get_time", {})],
    ),
    ("plain_text", "No tools needed: 2 + 2 = 4.  ", "No tools needed: 2 + 2 = 4.  ", []),
    (
        "lookalike_tag",
        "Use <tool_calls> or <tool_ in text.",
        "Use <tool_calls> or <tool_ in text.",
        [],
    ),
]


@pytest.mark.parametrize(
    ("text", "content", "calls"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_cases(text: str, content: str, calls: Calls) -> None:
    check_case("hermes", text, content, calls, WEATHER)


def test_arguments_are_the_model_text_verbatim() -> None:
    text = '<tool_call>{"name": "get_time", "arguments": {"tz" :  "UTC" }}</tool_call>'
    result = check_case("hermes", text, "", [("get_time", {"tz": "UTC"})], WEATHER)
    assert result.tool_calls[0].arguments == '{"tz" :  "UTC" }'


def test_arguments_stream_before_the_object_closes() -> None:
    from realtime.chat.tools.hermes import HermesToolParser
    from realtime.protocol.output import ToolCallArguments, ToolCallStart

    parser = HermesToolParser(WEATHER)
    first = parser.feed('<tool_call>{"name": "get_weather", "arguments": {"location": "Par')
    assert isinstance(first[0], ToolCallStart)
    assert first[0].name == "get_weather"
    assert first[0].id.startswith("call_")
    assert first[1] == ToolCallArguments(0, '{"location": "Par')
    assert parser.feed('is"}}') == [ToolCallArguments(0, 'is"}')]


def test_without_declared_tools_any_name_is_accepted() -> None:
    check_case(
        "hermes",
        '<tool_call>{"name": "anything", "arguments": {}}</tool_call>',
        "",
        [("anything", {})],
        None,
    )


MALFORMED = [
    (
        "bad_json",
        'Checking. <tool_call>{"name": "get_weather", "arguments": {"a": 1,,}}</tool_call>',
    ),
    (
        "truncated_in_arguments",
        '<tool_call>\n{"name": "get_weather", "arguments": {"location": "Pa',
    ),
    ("truncated_in_name", '<tool_call>{"name": "get_wea'),
    ("truncated_after_tag", "Sure <tool_call>"),
    ("not_json", "<tool_call>get_weather(location='Paris')</tool_call>"),
    ("no_name", '<tool_call>{"arguments": {"x": 1}}</tool_call>'),
    ("name_not_a_string", '<tool_call>{"name": 42, "arguments": {}}</tool_call>'),
    ("arguments_not_an_object", '<tool_call>{"name": "get_time", "arguments": [1]}</tool_call>'),
    ("unknown_tool", '<tool_call>{"name": "rm_rf", "arguments": {}}</tool_call>'),
    (
        "string_arguments_not_json",
        '<tool_call>{"name": "get_time", "arguments": "UTC"}</tool_call>',
    ),
]


@pytest.mark.parametrize("text", [m[1] for m in MALFORMED], ids=[m[0] for m in MALFORMED])
def test_malformed(text: str, caplog: pytest.LogCaptureFixture) -> None:
    check_malformed("hermes", text, caplog, WEATHER)


def test_one_bad_call_keeps_the_good_one(caplog: pytest.LogCaptureFixture) -> None:
    from realtime.chat.tools.hermes import HermesToolParser

    bad = '<tool_call>{"name": "get_time", "arguments": {"tz": }}</tool_call>'
    good = '<tool_call>{"name": "get_weather", "arguments": {"location": "Rome"}}</tool_call>'
    result = HermesToolParser.parse(good + "\n" + bad, WEATHER)
    assert [(c.name, c.arguments) for c in result.tool_calls] == [
        ("get_weather", '{"location": "Rome"}')
    ]
    assert result.content == bad
    assert "unexpected '}'" in caplog.text


def test_hermes_state_path() -> None:
    text = 'Hi <tool_call>{"name": "get_time", "arguments": {}}</tool_call> bye'
    assert state_trace("hermes", [text], WEATHER) == ["CONTENT", "CALL", "AFTER", "CONTENT"]
    # A call that breaks goes back to content, not to AFTER.
    broken = '<tool_call>{"name": 1}</tool_call>'
    assert state_trace("hermes", [broken], WEATHER) == ["CONTENT", "CALL", "CONTENT"]
