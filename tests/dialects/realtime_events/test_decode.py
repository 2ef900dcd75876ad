"""Every client event's bad inputs: a specific error naming the field, nothing else changed."""

from __future__ import annotations

from typing import Any

import pytest

from realtime.dialects.realtime_events.decode import decode_event
from realtime.dialects.realtime_events.errors import EventError
from realtime.dialects.realtime_events.models import ItemCreateEvent, SessionUpdateEvent
from realtime.protocol.input_limits import InputLimits
from tests.dialects.realtime_events.helpers import error_of, send, session, user

TEXT_ITEM = {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "x"}]}

BAD_EVENTS: list[tuple[dict[str, Any], str | None, str | None]] = [
    # (event, code, param)
    ({"type": "nope.nope"}, "unknown_event_type", "type"),
    ({"no_type": 1}, None, "type"),  # code None: plain invalid_request_error
    ({"type": 5}, None, "type"),
    ({"type": "input_audio_buffer.append", "audio": "AAAA"}, "audio_not_supported", "type"),
    ({"type": "input_audio_buffer.commit"}, "audio_not_supported", "type"),
    ({"type": "input_audio_buffer.clear"}, "audio_not_supported", "type"),
    ({"type": "output_audio_buffer.clear"}, "audio_not_supported", "type"),
    ({"type": "session.update"}, None, "session"),
    (
        {"type": "session.update", "session": {"type": "realtime", "voice": "x"}},
        "unknown_field",
        "session.voice",
    ),
    (
        {"type": "session.update", "session": {"type": "realtime", "output_modalities": ["audio"]}},
        "audio_not_supported",
        "session.output_modalities",
    ),
    (
        {"type": "session.update", "session": {"type": "realtime", "audio": {"output": {}}}},
        "audio_not_supported",
        "session.audio",
    ),
    (
        {"type": "session.update", "session": {"type": "transcription"}},
        "audio_not_supported",
        "session.type",
    ),
    (
        {"type": "session.update", "session": {"type": "realtime", "tracing": "auto"}},
        "unsupported",
        "session.tracing",
    ),
    (
        {"type": "session.update", "session": {"type": "realtime", "max_output_tokens": 0}},
        None,
        "session.max_output_tokens",
    ),
    (
        {"type": "session.update", "session": {"type": "realtime", "temperature": "hot"}},
        "invalid_type",
        "session.temperature",
    ),
    (
        {"type": "session.update", "session": {"type": "realtime", "tools": [{"type": "mcp"}]}},
        "unsupported",
        "session.tools.0.type",
    ),
    (
        {"type": "session.update", "session": {"type": "realtime", "tools": [{"name": ""}]}},
        None,
        "session.tools.0.name",
    ),
    (
        {
            "type": "session.update",
            "session": {"type": "realtime", "tool_choice": {"type": "function"}},
        },
        None,
        "session.tool_choice.name",
    ),
    ({"type": "conversation.item.create"}, None, "item"),
    (
        {"type": "conversation.item.create", "item": {"type": "message", "role": "tool"}},
        None,
        "item.role",
    ),
    (
        {"type": "conversation.item.create", "item": {"type": "mcp_call"}},
        "unsupported",
        "item.type",
    ),
    ({"type": "conversation.item.create", "item": {"type": "image"}}, None, "item.type"),
    (
        {
            "type": "conversation.item.create",
            "item": {**TEXT_ITEM, "content": [{"type": "input_audio", "audio": "AAAA"}]},
        },
        "audio_not_supported",
        "item.content.0.type",
    ),
    (
        {
            "type": "conversation.item.create",
            "item": {**TEXT_ITEM, "content": [{"type": "input_image", "image_url": "data:"}]},
        },
        "unsupported",
        "item.content.0.type",
    ),
    (
        {"type": "conversation.item.create", "item": {**TEXT_ITEM, "content": [{}]}},
        None,
        "item.content.0.text",
    ),
    (
        {"type": "conversation.item.create", "item": {**TEXT_ITEM, "content": "hi"}},
        "invalid_type",
        "item.content",
    ),
    ({"type": "conversation.item.create", "item": {**TEXT_ITEM, "id": "x" * 65}}, None, "item.id"),
    (
        {"type": "conversation.item.create", "item": {"type": "function_call", "name": "f"}},
        None,
        "item.arguments",
    ),
    (
        {
            "type": "conversation.item.create",
            "item": {"type": "function_call_output", "output": "x"},
        },
        None,
        "item.call_id",
    ),
    ({"type": "conversation.item.delete"}, None, "item_id"),
    ({"type": "conversation.item.retrieve", "item_id": 3}, "invalid_type", "item_id"),
    (
        {
            "type": "conversation.item.truncate",
            "item_id": "a",
            "content_index": -1,
            "audio_end_ms": 0,
        },
        None,
        "content_index",
    ),
    (
        {"type": "response.create", "response": {"conversation": "conv_x"}},
        "unsupported",
        "response.conversation",
    ),
    (
        {"type": "response.create", "response": {"output_modalities": ["text", "audio"]}},
        "audio_not_supported",
        "response.output_modalities",
    ),
    (
        {"type": "response.create", "response": {"prompt": {"id": "p"}}},
        "unsupported",
        "response.prompt",
    ),
    (
        {"type": "response.create", "response": {"metadata": {str(i): "v" for i in range(17)}}},
        None,
        "response.metadata",
    ),
    (
        {"type": "response.create", "response": {"metadata": {"k": "v" * 513}}},
        None,
        "response.metadata",
    ),
    (
        {"type": "response.create", "response": {"input": [{"type": "item_reference"}]}},
        None,
        "response.input.0.id",
    ),
    (
        {"type": "response.create", "response": {"temprature": 1}},
        "unknown_field",
        "response.temprature",
    ),
    ({"type": "response.cancel", "response_id": ["r"]}, "invalid_type", "response_id"),
]


@pytest.mark.parametrize(("event", "code", "param"), BAD_EVENTS)
def test_bad_event_is_refused_and_the_session_carries_on(
    event: dict[str, Any], code: str | None, param: str | None
) -> None:
    s = session()
    send(s, user("kept"))
    before = (s.config, [dict(item) for item in s.conversation.items()])
    error = error_of(send(s, {**event, "event_id": "evt_client_1"}))
    assert error["type"] == "invalid_request_error"
    assert error["code"] == code
    assert error["param"] == param
    assert error["event_id"] == "evt_client_1"
    assert (s.config, s.conversation.items()) == before
    # and the next good event works
    assert send(s, user("after")).events[0]["type"] == "conversation.item.added"


@pytest.mark.parametrize(
    ("text", "code"),
    [
        (b"{not json", "invalid_json"),
        (b"[1, 2]", None),
        (b"[" * 2000 + b"]" * 2000, "json_too_deep"),
        (
            b'{"type": "session.update", "session": ' + b'{"a": ' * 80 + b"1" + b"}" * 81,
            "json_too_deep",
        ),
    ],
)
def test_undecodable_text_is_an_error_event(text: bytes, code: str | None) -> None:
    with pytest.raises(EventError) as caught:
        decode_event(text, InputLimits())
    assert caught.value.error.code == code


def test_too_many_json_values_is_refused_before_validation() -> None:
    event = user("x")
    event["item"]["content"] = [{"type": "input_text", "text": "a"}] * 50
    with pytest.raises(EventError) as caught:
        decode_event(__import__("orjson").dumps(event), InputLimits(max_json_values=100))
    assert caught.value.error.code == "too_many_json_values"


def test_a_long_unknown_type_is_not_echoed_in_full() -> None:
    error = error_of(send(session(), {"type": "x" * 10_000}))
    assert len(error["message"]) < 400


def test_items_are_parsed_once_and_kept() -> None:
    event = decode_event(__import__("orjson").dumps(user("hello")), InputLimits())
    assert isinstance(event, ItemCreateEvent)
    assert event.parsed.content[0].text == "hello"  # type: ignore[union-attr]


def test_null_resets_and_absent_keeps() -> None:
    s = session()
    send(
        s,
        {
            "type": "session.update",
            "session": {"type": "realtime", "instructions": "be terse", "max_output_tokens": 9},
        },
    )
    assert (s.config.instructions, s.config.max_output_tokens) == ("be terse", 9)
    send(s, {"type": "session.update", "session": {"type": "realtime", "max_output_tokens": None}})
    assert (s.config.instructions, s.config.max_output_tokens) == ("be terse", "inf")
    event = decode_event(
        b'{"type": "session.update", "session": {"type": "realtime"}}', InputLimits()
    )
    assert isinstance(event, SessionUpdateEvent)
