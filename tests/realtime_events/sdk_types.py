"""Server events checked against the openai SDK's own types (the specification)."""

from __future__ import annotations

from typing import Any

from openai.types.realtime import RealtimeServerEvent
from pydantic import TypeAdapter

_SERVER_EVENT: TypeAdapter[Any] = TypeAdapter(RealtimeServerEvent)


def check_server_event(event: dict[str, Any]) -> Any:
    """Validate `event` as the SDK's server event union; the parsed event's type must match."""
    parsed = _SERVER_EVENT.validate_python(event)
    assert parsed.type == event["type"]
    return parsed
