from __future__ import annotations

from typing import Any

import orjson

from realtime.dialects.realtime_events.limits import EventLimits
from realtime.dialects.realtime_events.session_state import EventReply, EventSession
from realtime.protocol.input_limits import InputLimits
from tests.dialects.realtime_events.sdk_types import check_server_event

MODEL = "test-model"


def session(limits: EventLimits | None = None, model: str | None = MODEL) -> EventSession:
    s = EventSession(
        "sess_0123456789abcdef",
        MODEL,
        model,
        limits=limits or EventLimits(),
        input_limits=InputLimits(),
    )
    s.open()
    return s


def send(s: EventSession, event: dict[str, Any]) -> EventReply:
    return s.receive(orjson.dumps(event))


def user(text: str, **extra: Any) -> dict[str, Any]:
    return {
        "type": "conversation.item.create",
        "item": {
            "type": "message",
            "role": "user",
            "content": [{"type": "input_text", "text": text}],
            **extra,
        },
    }


def error_of(reply: EventReply) -> dict[str, Any]:
    assert reply.action is None
    [event] = reply.events
    assert event["type"] == "error", event
    check_server_event(event)
    return event["error"]  # type: ignore[no-any-return]
