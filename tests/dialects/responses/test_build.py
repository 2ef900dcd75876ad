"""Items -> the neutral conversation -> template messages: the prompt a Responses
conversation renders, through the one conversion every API shares."""

from __future__ import annotations

from typing import Any

from realtime.chat.conversation import answer_items, template_messages
from realtime.dialects.responses.build import responses_conversation
from realtime.dialects.responses.items import normalize_input
from realtime.protocol.output import ParsedOutput, ParsedToolCall


def chat_messages(items: list[dict[str, Any]], instructions: str | None) -> list[dict[str, Any]]:
    return template_messages(responses_conversation(items, instructions))


def call(call_id: str, name: str = "f", arguments: str = "{}") -> dict[str, str]:
    return {"type": "function_call", "call_id": call_id, "name": name, "arguments": arguments}


def test_messages_keep_their_roles_and_parts() -> None:
    items = normalize_input(
        [
            {"role": "developer", "content": "dev"},
            {
                "role": "user",
                "content": [
                    {"type": "input_text", "text": "a"},
                    {"type": "input_text", "text": "b"},
                ],
            },
            {"role": "assistant", "content": "reply"},
        ]
    )
    assert chat_messages(items, "sys") == [
        {"role": "system", "content": "sys"},
        {"role": "developer", "content": "dev"},
        {"role": "user", "content": "a\nb"},
        {"role": "assistant", "content": "reply"},
    ]


def test_consecutive_calls_are_one_assistant_turn_and_outputs_are_tool_messages() -> None:
    items = normalize_input(
        [
            {"role": "user", "content": "q"},
            {
                "type": "reasoning",
                "summary": [],
                "content": [{"type": "reasoning_text", "text": "r"}],
            },
            call("c1", "add", '{"a": 1}'),
            call("c2", "mul", '{"b": 2}'),
            {"type": "function_call_output", "call_id": "c1", "output": "1"},
            {"type": "function_call_output", "call_id": "c2", "output": "2"},
            {"role": "assistant", "content": "done"},
        ]
    )
    messages = chat_messages(items, None)
    assert [m["role"] for m in messages] == ["user", "assistant", "tool", "tool", "assistant"]
    turn = messages[1]
    assert "content" not in turn and turn["reasoning_content"] == "r"
    assert [c["id"] for c in turn["tool_calls"]] == ["c1", "c2"]
    assert turn["tool_calls"][1]["function"] == {"name": "mul", "arguments": {"b": 2}}
    assert messages[2] == {"role": "tool", "tool_call_id": "c1", "content": "1"}


def test_an_answer_renders_as_the_chat_api_sends_it_back() -> None:
    """Output items -> the same message the parsed answer renders as (the one a
    speculative warm-up renders), so the two prompts share their prefix."""
    parsed = ParsedOutput(
        content="Checking.",
        reasoning="thinking",
        tool_calls=[ParsedToolCall("call_1", "get_weather", '{"city": "Oslo"}')],
    )
    output = [
        {
            "type": "reasoning",
            "id": "rs_1",
            "summary": [],
            "content": [{"type": "reasoning_text", "text": "thinking"}],
        },
        {
            "type": "message",
            "id": "msg_1",
            "role": "assistant",
            "status": "completed",
            "content": [{"type": "output_text", "text": "Checking.", "annotations": []}],
        },
        {
            "type": "function_call",
            "id": "fc_1",
            "call_id": "call_1",
            "name": "get_weather",
            "arguments": '{"city": "Oslo"}',
            "status": "completed",
        },
    ]
    assert chat_messages(output, None) == template_messages(answer_items(parsed))
    only_calls = ParsedOutput(tool_calls=parsed.tool_calls)
    assert chat_messages(output[2:], None) == template_messages(answer_items(only_calls))
    only_text = ParsedOutput(content="Checking.")
    assert chat_messages(output[1:2], None) == template_messages(answer_items(only_text))


def test_reasoning_falls_back_to_its_summary() -> None:
    items = normalize_input(
        [
            {
                "type": "reasoning",
                "summary": [
                    {"type": "summary_text", "text": "s1"},
                    {"type": "summary_text", "text": "s2"},
                ],
            },
            {"role": "assistant", "content": "a"},
        ]
    )
    assert chat_messages(items, None) == [
        {"role": "assistant", "content": "a", "reasoning_content": "s1\ns2"}
    ]
