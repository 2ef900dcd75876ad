"""uvicorn's sans-I/O WebSocket protocol, with a Close frame that a stalled client cannot hold up.

uvicorn makes every ASGI send, `websocket.close` included, wait until the
transport's write buffer is below its high-water mark. For a client that stopped
reading that never happens, so the server could not close the socket it had just
decided to drop for being a slow consumer (1008). Here a close skips that wait
(a Close frame is at most 125 bytes), and if the peer has still not taken the
buffered bytes when uvicorn's close timeout ends, the connection is aborted
instead of waiting forever for the buffer to drain.

When the WebSocket layer itself closes a connection (a message over
`--max-frame-bytes`: 1009; invalid UTF-8 in a text frame: 1007), uvicorn writes
the Close frame and closes the TCP connection at once (and logs invalid UTF-8 as
an ERROR with a traceback). A client still sending then gets a reset, which can
destroy the Close frame it has not read yet, so it never learns why. Here the
server sends the Close frame, tells the app, and goes on reading (skipping the
rest of an oversize message unbuffered: `realtime.ws.server_protocol`) until
the client's Close completes the handshake, or the close timeout ends. Other
protocol failures (1002) still half-close at once and read until the client
closes.

A connection that drops without a Close frame reaches the app as 1006
(abnormal closure), as RFC 6455 names it; uvicorn reports 1005, the code for a
Close frame that carried no status.

It also marks a handshake refused with an HTTP response (the denial extension,
used for 401/403/503) as finished, which uvicorn 0.54 forgets, logging
"ASGI callable returned without completing handshake" for every refusal.

Keepalive under backpressure. uvicorn reads one message at a time: it stops
reading the TCP socket while a message waits for the app, and the session stops
taking messages while its request queue is full (backpressure). A client's pong
then sits unread behind its own pipelined requests, and uvicorn's pong deadline
would close a client that did answer (1011 "keepalive ping timeout"), dropping
every request it had queued. Here a deadline that passes while reading is paused
is not the client's fault: it is set again once the server reads again, and
only a deadline that passes while the server is reading closes the connection.
A pong read late still schedules the next ping.

Large messages go out in fragments. A text message of more than
`FRAGMENT_BYTES` (a 4 MB Realtime item sent back by `conversation.item.retrieve`)
is sent as a Text frame and Continuation frames of `FRAGMENT_BYTES` each. Between
fragments the sender yields to the loop and waits, as before every message, until
the write buffer is below its high-water mark: framing and copying the message
then costs the loop one fragment at a time, not the whole message at once (other
clients are served in between), and a reader that falls behind holds at most a
fragment more in the server's buffer, not the whole message. Control frames
(pings, pongs, a Close) may come between fragments (RFC 6455, 5.4); the session's
outbox sends one message at a time, so no other message's frames can.

And it tells the app whether the socket can take a frame without waiting: the
scope's `extensions["realtime.writable"]` is uvicorn's own flag (an
`asyncio.Event`, clear while the write buffer is above its high-water mark). The
session's outbox reads it to hold frames, and fold text chunks, instead of
blocking the request inside a send while the client is behind.
"""

from __future__ import annotations

import asyncio
from asyncio import BaseTransport
from typing import TYPE_CHECKING, Any

from uvicorn.protocols.utils import ClientDisconnected
from uvicorn.protocols.websockets.websockets_sansio_impl import WebSocketsSansIOProtocol
from websockets.exceptions import InvalidState
from websockets.frames import CloseCode

from realtime.ws.handshake import redacting_copy
from realtime.ws.server_protocol import RealtimeServerProtocol

if TYPE_CHECKING:
    from uvicorn._types import ASGIReceiveEvent, ASGISendEvent
    from websockets.frames import Frame
    from websockets.http11 import Request

#: The scope extension that carries the socket's writability flag.
WRITABLE_EXTENSION = "realtime.writable"
#: A `websocket.send` key this transport reads in place of `text`: the text frame's
#: UTF-8 bytes, already encoded (a large frame's JSON, straight from orjson). A frame
#: of megabytes is then not decoded to `str` by the sender and encoded back here.
UTF8_TEXT = "realtime.utf8"


#: A text message longer than this (bytes of UTF-8) is sent in fragments of this size.
FRAGMENT_BYTES = 256 * 1024

#: The reason of the Close frame for a text message that is not UTF-8.
INVALID_UTF8_REASON = "invalid UTF-8 in a text frame"


class RealtimeWebSocketProtocol(WebSocketsSansIOProtocol):
    _failed = False
    #: The pong deadline passed while the server was not reading: it is set again once
    #: reading resumes.
    _pong_overdue = False

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # Handshake refusals name the bad header, never quote it (realtime.ws.handshake).
        # The copy keeps uvicorn's size limit and extensions; the subclass (itself a
        # redacting one) changes what happens after a 1009 and how large frames are read.
        self.conn = redacting_copy(self.conn, RealtimeServerProtocol)

    def connection_made(self, transport: BaseTransport) -> None:
        # Called by uvicorn's HTTP protocol as it hands the connection over (the
        # transport still names that protocol). It never sees `connection_lost` after
        # an upgrade, which is where it drops its parser, and the two reference each
        # other: every socket's HTTP half would wait for a full garbage collection.
        upgraded_from = transport.get_protocol()
        if upgraded_from is not self and hasattr(upgraded_from, "parser"):
            upgraded_from.parser = None
        super().connection_made(transport)

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        if self.conn.close_sent is not None and not self.close_sent:
            if not self.transport.is_closing():
                self._closed_by_layer()

    def send_receive_event_to_app(self) -> None:
        """uvicorn's, with invalid UTF-8 answered by Close 1007 instead of a logged traceback."""
        data = self.frames[0] if len(self.frames) == 1 else b"".join(self.frames)
        self.frames = []
        if self.close_sent or self.conn.close_sent is not None:
            # Past a Close (the app's, or the layer's for a later frame of the same
            # read, such as a 1009): discarded until the client's Close reply.
            return
        if self.curr_msg_data_type == "text":
            try:
                text = data.decode()
            except UnicodeDecodeError:
                self.conn.send_close(CloseCode.INVALID_DATA, INVALID_UTF8_REASON)
                self._closed_by_layer()
                return
            self.queue.put_nowait({"type": "websocket.receive", "text": text})
        else:
            self.queue.put_nowait({"type": "websocket.receive", "bytes": data})
        if not self.read_paused:
            self.read_paused = True
            self.transport.pause_reading()

    def _closed_by_layer(self) -> None:
        """The WebSocket layer sent a Close frame itself: tell the app, keep reading."""
        close = self.conn.close_sent
        assert close is not None
        self.queue.put_nowait(
            {"type": "websocket.disconnect", "code": close.code, "reason": close.reason}
        )
        self.close_sent = True
        self.transport.write(b"".join(self.conn.data_to_send()))
        if self.read_paused:  # the app takes no more messages; the Close reply must be read
            self.read_paused = False
            self.transport.resume_reading()
        if self.close_timer is None:
            self.close_timer = self.loop.call_later(self.close_timeout, self._close_or_abort)

    def connection_lost(self, exc: Exception | None) -> None:
        if self.conn.close_rcvd is not None:
            code = self.conn.close_rcvd.code
        elif self.conn.close_sent is not None:
            code = self.conn.close_sent.code
        else:
            code = int(CloseCode.ABNORMAL_CLOSURE)  # no Close frame either way: 1006
        # Read first by the app if nothing was queued before; uvicorn's own (1005) follows.
        self.queue.put_nowait({"type": "websocket.disconnect", "code": code})
        super().connection_lost(exc)
        # websockets' parser is a generator suspended in a method of the protocol object
        # it belongs to: a reference cycle that outlives the connection until a garbage
        # collection (rare in `realtime serve`), with the handshake and the buffers.
        # Nothing reads from this connection any more: close the generator.
        self.conn.parser.close()

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
            text = message.get("text")
            if text is None:  # binary, or a large frame's UTF-8 (`UTF8_TEXT`)
                utf8: bytes | None = message.get(UTF8_TEXT)  # type: ignore[assignment]
                if utf8 is not None:
                    if self.handshake_complete:
                        await self._send_fragments(utf8)
                        return
                    message = {"type": "websocket.send", "text": utf8.decode()}
            elif len(text) > FRAGMENT_BYTES and self.handshake_complete:
                await self._send_fragments(text.encode())
                return
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

    async def _send_fragments(self, data: bytes) -> None:
        """One text message as fragments of `FRAGMENT_BYTES`, yielding the loop and
        waiting for the write buffer to drain between them (the module says why)."""
        view = memoryview(data)
        for start in range(0, len(view), FRAGMENT_BYTES):
            await self.writable.wait()
            if self.disconnected or self.close_sent:
                raise ClientDisconnected()
            end = start + FRAGMENT_BYTES
            fin = end >= len(view)
            try:
                if start == 0:
                    self.conn.send_text(view[start:end], fin=fin)
                else:
                    self.conn.send_continuation(view[start:end], fin=fin)
            except InvalidState:
                raise ClientDisconnected() from None
            self.transport.write(b"".join(self.conn.data_to_send()))
            if not fin:
                await asyncio.sleep(0)  # the other clients' turn

    # --- keepalive under backpressure ---

    def keepalive_timeout(self) -> None:
        if self.read_paused and not self.close_sent and not self.transport.is_closing():
            # The server stopped reading (the app's backpressure): the pong may be in the
            # socket, unread. Wait again once reading resumes (`receive`).
            self.pong_timer = None
            self._pong_overdue = True
            return
        self._pong_overdue = False
        super().keepalive_timeout()

    def handle_pong(self, event: Frame) -> None:
        answered = (
            self.pending_ping_payload is not None and bytes(event.data) == self.pending_ping_payload
        )
        deadline_set = self.pong_timer is not None
        super().handle_pong(event)  # with a deadline set, it schedules the next ping
        if answered and self._pong_overdue:
            self._pong_overdue = False
            if not deadline_set:  # read late, with no deadline running: keep pinging
                self.schedule_ping()

    async def receive(self) -> ASGIReceiveEvent:
        message = await super().receive()
        if self._pong_overdue and not self.read_paused and self.pong_timer is None:
            # Reading again: the client has a full timeout for its pong to be read.
            assert self.ping_timeout is not None
            self.pong_timer = self.loop.call_later(self.ping_timeout, self.keepalive_timeout)
        return message

    def _close_or_abort(self) -> None:
        self.close_timer = None
        if self.transport.get_write_buffer_size() > 0:
            self.transport.abort()  # the peer reads nothing; do not wait on it
        else:
            self.transport.close()
