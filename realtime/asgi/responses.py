"""JSON responses serialized with orjson (the encoder the streams use), and the error response.

`error_response` is the one HTTP form of a `RealtimeError`: the OpenAI error body
with the error's status. Routes answer with it, and so does a refused WebSocket
handshake, before any socket exists.
"""

from __future__ import annotations

from typing import Any

import orjson
from starlette.responses import JSONResponse, Response

from realtime.protocol.errors import RealtimeError


class ORJSONResponse(JSONResponse):
    def render(self, content: Any) -> bytes:
        return orjson.dumps(content)


def error_response(error: RealtimeError) -> Response:
    headers = None
    if error.status >= 500 and not error.retryable:
        # The openai SDK retries 5xx twice by default; a failure that will recur
        # would run the engine three times for nothing.
        headers = {"x-should-retry": "false"}
    return ORJSONResponse(error.to_body(), status_code=error.status, headers=headers)
