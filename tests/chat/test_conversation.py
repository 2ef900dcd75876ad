"""Template input: content parts joined one per line, tool-call arguments decoded when safe,
and one conversion of conversation items for every API."""

from __future__ import annotations

import json

from realtime.chat.conversation import answer_items, template_messages, template_tools
from realtime.protocol.conversation import (
    FunctionCall,
    FunctionCallOutput,
    FunctionTool,
    Message,
    Reasoning,
)
from realtime.protocol.output import ParsedOutput, ParsedToolCall


def test_text_parts_are_joined_with_a_newline() -> None:
    assert template_messages([Message("user", ("part a", "part b"))]) == [
        {"role": "user", "content": "part a\npart b"}
    ]


def test_empty_parts_keep_their_line() -> None:
    [message] = template_messages([Message("user", ("one", "no", "", "two"))])
    assert message["content"] == "one\nno\n\ntwo"
    assert template_messages([Message("user", ())]) == [{"role": "user", "content": ""}]


def test_string_content_and_other_keys_are_left_alone() -> None:
    extras = {"name": "n", "x": [1]}
    assert template_messages([Message("user", ("as is",), extras)]) == [
        {"role": "user", "content": "as is", "name": "n", "x": [1]}
    ]


def test_a_message_without_content_has_no_content_key() -> None:
    call = FunctionCall("c", "f", "{}")
    assert template_messages([Message("assistant", None), call]) == [
        {
            "role": "assistant",
            "tool_calls": [
                {"id": "c", "type": "function", "function": {"name": "f", "arguments": {}}}
            ],
        }
    ]


def _arguments(arguments: str) -> object:
    [message] = template_messages([FunctionCall("c", "f", arguments)])
    return message["tool_calls"][0]["function"]["arguments"]


def test_arguments_are_decoded_for_the_template() -> None:
    assert _arguments('{"city": "Oslo"}') == {"city": "Oslo"}


def test_arguments_that_are_not_json_or_too_deep_stay_a_string() -> None:
    deep = json.dumps({"a": 1})
    for _ in range(70):
        deep = '{"a": ' + deep + "}"
    for arguments in ("{not json", deep, "[" * 5000 + "]" * 5000):
        assert _arguments(arguments) == arguments


def test_one_conversation_of_every_kind_of_item() -> None:
    items = [
        Message("system", ("Be brief.",)),
        Message("user", ("Weather?", "In Oslo.")),
        Reasoning("They want weather."),
        Message("assistant", ("Let me look.",)),
        FunctionCall("call_1", "weather", '{"city": "Oslo"}'),
        FunctionCall("call_2", "time", "{}"),
        FunctionCallOutput("call_1", ("Sunny",)),
        FunctionCallOutput("call_2", ("12:00", "CET")),
        Reasoning("dropped: a user message follows"),
        Message("user", ("Thanks",)),
        Reasoning("first"),
        Reasoning("second"),
        FunctionCall("call_3", "f", "{}"),
    ]
    assert template_messages(items) == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Weather?\nIn Oslo."},
        {
            "role": "assistant",
            "content": "Let me look.",
            "reasoning_content": "They want weather.",
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "weather", "arguments": {"city": "Oslo"}},
                },
                {"id": "call_2", "type": "function", "function": {"name": "time", "arguments": {}}},
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "Sunny"},
        {"role": "tool", "tool_call_id": "call_2", "content": "12:00\nCET"},
        {"role": "user", "content": "Thanks"},
        {
            "role": "assistant",
            "reasoning_content": "first\nsecond",
            "tool_calls": [
                {"id": "call_3", "type": "function", "function": {"name": "f", "arguments": {}}}
            ],
        },
    ]


def test_an_answer_renders_as_the_client_sends_it_back() -> None:
    calls = ParsedOutput("", "", [ParsedToolCall("c1", "f", '{"a": 1}')])
    assert template_messages(answer_items(calls)) == [
        {
            "role": "assistant",
            "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "f", "arguments": {"a": 1}}}
            ],
        }
    ]
    reasoning = ParsedOutput("Sunny.", "The user wants the weather.")
    assert template_messages(answer_items(reasoning)) == [
        {
            "role": "assistant",
            "content": "Sunny.",
            "reasoning_content": "The user wants the weather.",
        }
    ]
    assert template_messages(answer_items(ParsedOutput())) == [{"role": "assistant", "content": ""}]


def test_tools_in_the_shape_every_template_reads() -> None:
    assert template_tools(None) is None
    assert template_tools(
        [FunctionTool("f"), FunctionTool("g", "does g", {"type": "object"}, True)]
    ) == [
        {"type": "function", "function": {"name": "f"}},
        {
            "type": "function",
            "function": {"name": "g", "description": "does g", "parameters": {"type": "object"}},
        },
    ]
