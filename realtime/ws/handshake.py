"""The WebSocket opening handshake's own refusals, without echoing what the client sent.

websockets answers a malformed handshake (a `Sec-WebSocket-Protocol` list it
cannot parse, a missing `Sec-WebSocket-Key`...) with a plain-text 400 that
quotes the offending header in full. A browser carries its API key in that
header (`realtime-key.<key>`), so the quote would hand the key to whoever reads
the response or a proxy's logs of it. Here the refusal names the header, never
its value, in the OpenAI error shape every other refusal has.
"""

from __future__ import annotations

import email.utils
import http

import orjson
from websockets.datastructures import Headers
from websockets.exceptions import InvalidHeader, InvalidMethod
from websockets.http11 import Response
from websockets.server import ServerProtocol
from websockets.typing import StatusLike

from realtime.protocol.errors import InternalError, InvalidRequestError, RealtimeError


def handshake_error(status: int, exc: BaseException | None) -> RealtimeError:
    """The client-facing error for a refused handshake: which part is wrong, not its value."""
    if status >= 500:
        return InternalError("the WebSocket handshake failed")
    if isinstance(exc, InvalidHeader):
        # `name` is websockets' own constant ("Sec-WebSocket-Protocol"); `value` is input.
        if exc.value is None:
            what = f"missing {exc.name} header"
        elif exc.value == "":
            what = f"empty {exc.name} header"
        else:
            what = f"invalid {exc.name} header"
    elif isinstance(exc, InvalidMethod):
        what = "the method must be GET"
    else:
        what = "malformed request"
    return InvalidRequestError(f"invalid WebSocket handshake: {what}", code="invalid_handshake")


class RedactingServerProtocol(ServerProtocol):
    """websockets' server side, refusing with an error body that quotes no header."""

    def reject(self, status: StatusLike, text: str) -> Response:
        code = http.HTTPStatus(status)
        body = orjson.dumps(handshake_error(code.value, self.handshake_exc).to_body())
        headers = Headers(
            [
                ("Date", email.utils.formatdate(usegmt=True)),
                ("Connection", "close"),
                ("Content-Length", str(len(body))),
                ("Content-Type", "application/json"),
            ]
        )
        return Response(code.value, code.phrase, headers, body)


def redacting_copy(
    protocol: ServerProtocol, kind: type[RedactingServerProtocol] = RedactingServerProtocol
) -> RedactingServerProtocol:
    """A `kind` (a `RedactingServerProtocol`) with the settings uvicorn gave `protocol`
    (before any I/O)."""
    return kind(
        origins=protocol.origins,
        extensions=protocol.available_extensions,
        subprotocols=protocol.available_subprotocols,
        max_size=(protocol.max_message_size, protocol.max_fragment_size),
        logger=protocol.logger,
    )
