"""Template input: content parts joined one per line, tool-call arguments decoded when safe."""

from __future__ import annotations

import json

from realtime.chat.conversation import joined_parts, template_message


def test_text_parts_are_joined_with_a_newline() -> None:
    parts = [{"type": "text", "text": "part a"}, {"type": "text", "text": "part b"}]
    assert joined_parts(parts) == "part a\npart b"
    assert template_message({"role": "user", "content": parts}) == {
        "role": "user",
        "content": "part a\npart b",
    }


def test_a_refusal_part_counts_as_text_and_empty_parts_keep_their_line() -> None:
    parts = [
        {"type": "text", "text": "one"},
        {"type": "refusal", "refusal": "no"},
        {"type": "text", "text": ""},
        {"type": "text", "text": "two"},
    ]
    assert joined_parts(parts) == "one\nno\n\ntwo"
    assert joined_parts([]) == ""


def test_string_content_and_other_keys_are_left_alone() -> None:
    message = {"role": "user", "content": "as is", "name": "n", "x": [1]}
    assert template_message(message) is message


def _call(arguments: str) -> dict[str, object]:
    return {
        "role": "assistant",
        "tool_calls": [
            {"id": "c", "type": "function", "function": {"name": "f", "arguments": arguments}}
        ],
    }


def _arguments(message: dict[str, object]) -> object:
    calls = message["tool_calls"]
    assert isinstance(calls, list)
    return calls[0]["function"]["arguments"]


def test_arguments_are_decoded_for_the_template() -> None:
    assert _arguments(template_message(_call('{"city": "Oslo"}'))) == {"city": "Oslo"}


def test_arguments_that_are_not_json_or_too_deep_stay_a_string() -> None:
    deep = json.dumps({"a": 1})
    for _ in range(70):
        deep = '{"a": ' + deep + "}"
    for arguments in ("{not json", deep, "[" * 5000 + "]" * 5000):
        assert _arguments(template_message(_call(arguments))) == arguments
