"""JSON responses serialized with orjson (the encoder the streams use), and the error response.

`error_response` is the one HTTP form of a `RealtimeError`: the OpenAI error body
with the error's status. Routes answer with it, and so does a refused WebSocket
handshake, before any socket exists. An API with an error body of its own (the
Messages API's, Anthropic's) registers it for its paths in `ERROR_BODIES` (one
line in `app.py`), and what answers before any route runs (the access guard, the
body limit, the HTTP protocol's request limits) uses it there.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

import orjson
from starlette.responses import JSONResponse, Response

from realtime.protocol.errors import RealtimeError


class ORJSONResponse(JSONResponse):
    def render(self, content: Any) -> bytes:
        return orjson.dumps(content)


def error_response(error: RealtimeError) -> Response:
    return ORJSONResponse(error.to_body(), status_code=error.status, headers=_headers(error))


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
#: OpenAI's. Filled by `app.py` (the Messages API's paths: Anthropic's body); read by what
#: answers before a route runs (the access guard, the body limit, the HTTP protocol's
#: request limits), so a client gets its API's body there too.
ERROR_BODIES: dict[str, ErrorBody] = {}


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
    return partial(body_response, body)


def body_response(body: ErrorBody, error: RealtimeError) -> Response:
    """`error` in the body `body` makes, with the status and headers of every error."""
    return ORJSONResponse(body(error), status_code=error.status, headers=_headers(error))
