"""The openai SDK's own Responses types, as validators for what the server sends."""

from __future__ import annotations

from typing import Any

from openai.types.responses import Response, ResponseItem, ResponseStreamEvent
from openai.types.responses.responses_server_event import ResponsesServerEvent
from pydantic import TypeAdapter

STREAM_EVENT: TypeAdapter[Any] = TypeAdapter(ResponseStreamEvent)
ITEM: TypeAdapter[Any] = TypeAdapter(ResponseItem)


def check_event(event: dict[str, Any]) -> Any:
    """Validate one server event against the SDK's union (strictly: types and literals)."""
    if event["type"] in ("response.failed",):
        # our error codes are more specific than the SDK's literal list; check the rest
        event = {**event, "response": {**event["response"], "error": None}}
    return STREAM_EVENT.validate_python(event)


def check_response(response: dict[str, Any]) -> Response:
    body = response if response.get("error") is None else {**response, "error": None}
    return Response.model_validate(body)


def check_item(item: dict[str, Any]) -> Any:
    return ITEM.validate_python(item)


SOCKET_EVENT: TypeAdapter[Any] = TypeAdapter(ResponsesServerEvent)


def check_socket_event(event: dict[str, Any]) -> Any:
    """Validate one WebSocket-mode frame against the SDK's `ResponsesServerEvent` union
    (what `responses.connect()` parses), with `check_event`'s allowance for error codes."""
    if event["type"] in ("response.failed",):
        event = {**event, "response": {**event["response"], "error": None}}
    return SOCKET_EVENT.validate_python(event)
