"""JSON responses serialized with orjson (the encoder the streams use), and the error response.

`error_response` is the one HTTP form of a `RealtimeError`: the OpenAI error body
with the error's status. Routes answer with it, and so does a refused WebSocket
handshake, before any socket exists. The Messages API's routes answer with
`anthropic_error_response` instead: the same error in Anthropic's body.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import orjson
from starlette.responses import JSONResponse, Response

from realtime.dialects.messages.errors import error_body as anthropic_error_body
from realtime.protocol.errors import RealtimeError


class ORJSONResponse(JSONResponse):
    def render(self, content: Any) -> bytes:
        return orjson.dumps(content)


def error_response(error: RealtimeError) -> Response:
    return ORJSONResponse(error.to_body(), status_code=error.status, headers=_headers(error))


def anthropic_error_response(error: RealtimeError) -> Response:
    """The same error in the Messages API's body (`{"type": "error", "error": {...}}`)."""
    return ORJSONResponse(
        anthropic_error_body(error), status_code=error.status, headers=_headers(error)
    )


def _headers(error: RealtimeError) -> dict[str, str] | None:
    if error.status >= 500 and not error.retryable:
        # The SDKs retry 5xx twice by default; a failure that will recur would run the
        # engine three times for nothing.
        return {"x-should-retry": "false"}
    return None


ErrorRenderer = Callable[[RealtimeError], Response]
ErrorBody = Callable[[RealtimeError], dict[str, Any]]


def _openai_body(error: RealtimeError) -> dict[str, Any]:
    return error.to_body()


#: Path prefix -> the error body of the API served there; every other path answers with
#: OpenAI's. Read by what answers before a route runs (the access guard, the body limit,
#: the HTTP protocol's request limits), so a Messages client gets Anthropic's body there
#: too.
ERROR_BODIES: dict[str, ErrorBody] = {"/v1/messages": anthropic_error_body}


def error_body_for(path: str) -> ErrorBody:
    """The error body of the API at `path` (the app's own path, without a query)."""
    for prefix, body in ERROR_BODIES.items():
        if path == prefix or path.startswith((prefix + "/", prefix + "?")):
            return body
    return _openai_body


def error_response_for(path: str) -> ErrorRenderer:
    """The error response of the API at `path`."""
    body = error_body_for(path)
    if body is _openai_body:
        return error_response
    return lambda error: ORJSONResponse(
        body(error), status_code=error.status, headers=_headers(error)
    )
