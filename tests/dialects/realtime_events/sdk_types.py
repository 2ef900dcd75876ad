"""Server events checked against the openai SDK's types (the specification) and our own
documented models (what asyncapi.yaml is generated from)."""

from __future__ import annotations

from typing import Any

from openai.types.realtime import RealtimeServerEvent
from pydantic import TypeAdapter

from realtime.dialects.realtime_events.event_models import SERVER_EVENT_NAMES, SERVER_EVENTS_DOC

_SERVER_EVENT: TypeAdapter[Any] = TypeAdapter(RealtimeServerEvent)


def check_server_event(event: dict[str, Any]) -> Any:
    """Validate `event` as the SDK's server event union and as our documented model."""
    parsed = _SERVER_EVENT.validate_python(event)
    assert parsed.type == event["type"]
    SERVER_EVENTS_DOC[SERVER_EVENT_NAMES[event["type"]]].model_validate(event)
    return parsed
