"""uvicorn's sans-I/O WebSocket protocol, with a Close frame that a stalled client cannot hold up.

uvicorn makes every ASGI send, `websocket.close` included, wait until the
transport's write buffer is below its high-water mark. For a client that stopped
reading that never happens, so the server could not close the socket it had just
decided to drop for being a slow consumer (1008). Here a close skips that wait
(a Close frame is at most 125 bytes), and if the peer has still not taken the
buffered bytes when uvicorn's close timeout ends, the connection is aborted
instead of waiting forever for the buffer to drain.

When the WebSocket layer itself fails a connection (a message over
`--max-frame-bytes`: 1009; invalid UTF-8: 1007), uvicorn writes the Close frame
and closes the TCP connection at once. A client still sending then gets a reset,
which can destroy the Close frame it has not read yet, so it never learns why.
Here the server only shuts its sending side (FIN after the Close frame) and
keeps reading, discarding, until the client closes or the close timeout ends.

It also marks a handshake refused with an HTTP response (the denial extension,
used for 401/403/503) as finished, which uvicorn 0.54 forgets, logging
"ASGI callable returned without completing handshake" for every refusal.

And it tells the app whether the socket can take a frame without waiting: the
scope's `extensions["realtime.writable"]` is uvicorn's own flag (an
`asyncio.Event`, clear while the write buffer is above its high-water mark). The
session's outbox reads it to hold frames, and fold text chunks, instead of
blocking the request inside a send while the client is behind.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from uvicorn.protocols.websockets.websockets_sansio_impl import WebSocketsSansIOProtocol

from realtime.ws.handshake import redacting_copy

if TYPE_CHECKING:
    from uvicorn._types import ASGISendEvent
    from websockets.http11 import Request

#: The scope extension that carries the socket's writability flag.
WRITABLE_EXTENSION = "realtime.writable"


class RealtimeWebSocketProtocol(WebSocketsSansIOProtocol):
    _failed = False

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # Handshake refusals name the bad header, never quote it (realtime.ws.handshake).
        self.conn = redacting_copy(self.conn)

    def handle_connect(self, event: Request) -> None:
        super().handle_connect(event)
        # The app's task was only created, not started: it sees the extension.
        scope = getattr(self, "scope", None)
        if scope is not None:
            scope.setdefault("extensions", {})[WRITABLE_EXTENSION] = self.writable

    def handle_parser_exception(self) -> None:
        if self._failed:  # called again for every later read; once is enough
            return
        self._failed = True
        if not self.close_sent:  # else the app already closed and knows
            close = self.conn.close_sent
            code = close.code if close is not None else 1011
            reason = close.reason if close is not None else ""
            self.queue.put_nowait({"type": "websocket.disconnect", "code": code, "reason": reason})
            self.close_sent = True
        self.transport.write(b"".join(self.conn.data_to_send()))
        if self.transport.can_write_eof():
            self.transport.write_eof()
        if self.close_timer is None:
            self.close_timer = self.loop.call_later(self.close_timeout, self._close_or_abort)

    async def send(self, message: ASGISendEvent) -> None:
        if message["type"] == "websocket.send":  # the per-token path: nothing to add
            await super().send(message)
            return
        closing = (
            message["type"] == "websocket.close" and self.handshake_complete and not self.close_sent
        )
        if closing:
            self.writable.set()
        await super().send(message)
        if message["type"] == "websocket.http.response.body" and not message.get("more_body"):
            self.handshake_complete = True
        if closing and self.close_timer is not None:
            self.close_timer.cancel()
            self.close_timer = self.loop.call_later(self.close_timeout, self._close_or_abort)

    def _close_or_abort(self) -> None:
        self.close_timer = None
        if self.transport.get_write_buffer_size() > 0:
            self.transport.abort()  # the peer reads nothing; do not wait on it
        else:
            self.transport.close()
