"""A minimal WebSocket client and a minimal HTTP/1.1 SSE client on asyncio protocols.

Why not a client library: at 80k+ frames/s on one socket, or 40k frames/s spread
over 2,000 sockets, a full client library spends more CPU per frame than the
server it measures, and the benchmark would measure the client. These clients do
the least correct thing: one HTTP upgrade, then frame headers parsed straight out
of a bytearray (server frames are never masked), text payloads handed to a
callback as bytes together with the time the read that carried them returned.
They answer pings and close handshakes, so the server sees a well-behaved peer,
and they do not validate UTF-8 or JSON - the scenarios look at bytes only.

The SSE client does the same for `POST /v1/chat/completions` with `stream: true`
on one keep-alive connection: status line, headers, chunked transfer coding,
`data:` events.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import os
import socket
import struct
import time
from collections import deque
from collections.abc import Callable
from typing import cast

try:
    from websockets.speedups import apply_mask
except ImportError:  # a build without its C extension
    from websockets.utils import apply_mask

_GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"

#: (payload, time the read carrying it returned) -> None
FrameHandler = Callable[[bytes, float], None]

DONE_PREFIX = b'{"type":"response.done"'
ERROR_PREFIX = b'{"type":"error"'


def is_terminal(payload: bytes) -> bool:
    """A `response.done` or an `error` frame (our server and the raw replay put `type` first)."""
    return payload.startswith(DONE_PREFIX) or payload.startswith(ERROR_PREFIX)


def _frame(opcode: int, payload: bytes) -> bytes:
    key = os.urandom(4)
    n = len(payload)
    if n < 126:
        head = struct.pack("!BB", 0x80 | opcode, 0x80 | n)
    elif n < 65536:
        head = struct.pack("!BBH", 0x80 | opcode, 0x80 | 126, n)
    else:
        head = struct.pack("!BBQ", 0x80 | opcode, 0x80 | 127, n)
    # websockets' C masking: 6 ms for 8 MiB where a big-integer XOR took 98 ms, time in
    # which this client's event loop (and a neighbour timed on it) stood still.
    return head + key + apply_mask(payload, key)


class WsClient(asyncio.Protocol):
    """One client WebSocket. Use `await WsClient.connect(...)`."""

    def __init__(self, host: str, port: int, path: str, on_frame: FrameHandler | None = None):
        self.host, self.port, self.path = host, port, path
        self.on_frame = on_frame
        self.frames = 0
        self.close_code: int | None = None
        self.transport: asyncio.Transport | None = None
        loop = asyncio.get_running_loop()
        self.handshaken: asyncio.Future[None] = loop.create_future()
        self.closed: asyncio.Future[None] = loop.create_future()
        self._buf = bytearray()
        self._fragments: bytearray | None = None
        self._key = base64.b64encode(os.urandom(16))
        self._close_sent = False
        self._inbox: deque[tuple[bytes, float]] = deque()
        self._waiter: asyncio.Future[None] | None = None

    @classmethod
    async def connect(
        cls,
        host: str,
        port: int,
        path: str,
        on_frame: FrameHandler | None = None,
        *,
        timeout: float = 30.0,
    ) -> WsClient:
        loop = asyncio.get_running_loop()
        client = cls(host, port, path, on_frame)
        await asyncio.wait_for(loop.create_connection(lambda: client, host, port), timeout)
        await asyncio.wait_for(asyncio.shield(client.handshaken), timeout)
        return client

    # --- asyncio.Protocol ---

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports implement asyncio.Transport without subclassing it.
        self.transport = cast(asyncio.Transport, transport)
        request = (
            f"GET {self.path} HTTP/1.1\r\nHost: {self.host}:{self.port}\r\n"
            "Upgrade: websocket\r\nConnection: Upgrade\r\n"
            f"Sec-WebSocket-Key: {self._key.decode()}\r\nSec-WebSocket-Version: 13\r\n\r\n"
        )
        self.transport.write(request.encode())

    def data_received(self, data: bytes) -> None:
        now = time.perf_counter()
        self._buf += data
        if not self.handshaken.done():
            end = self._buf.find(b"\r\n\r\n")
            if end < 0:
                return
            head = bytes(self._buf[:end]).decode("latin-1")
            del self._buf[: end + 4]
            expected = base64.b64encode(hashlib.sha1(self._key + _GUID).digest()).decode()
            if not head.startswith("HTTP/1.1 101") or expected not in head:
                self.handshaken.set_exception(ConnectionError(f"handshake refused: {head[:200]}"))
                self.abort()
                return
            self.handshaken.set_result(None)
        self._parse(now)

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.handshaken.done():
            self.handshaken.set_exception(exc or ConnectionError("closed during handshake"))
        if not self.closed.done():
            self.closed.set_result(None)
        self._wake()

    # --- frames ---

    def _parse(self, now: float) -> None:
        buf = self._buf
        size = len(buf)
        pos = 0
        while size - pos >= 2:
            b0 = buf[pos]
            length = buf[pos + 1] & 0x7F
            head = 2
            if length == 126:
                if size - pos < 4:
                    break
                length = (buf[pos + 2] << 8) | buf[pos + 3]
                head = 4
            elif length == 127:
                if size - pos < 10:
                    break
                length = int.from_bytes(buf[pos + 2 : pos + 10], "big")
                head = 10
            end = pos + head + length
            if end > size:
                break
            payload = bytes(buf[pos + head : end])
            pos = end
            opcode = b0 & 0x0F
            if opcode == 0x1 or opcode == 0x2:
                if b0 & 0x80:
                    self._deliver(payload, now)
                else:
                    self._fragments = bytearray(payload)
            elif opcode == 0x0 and self._fragments is not None:
                self._fragments += payload
                if b0 & 0x80:
                    whole, self._fragments = bytes(self._fragments), None
                    self._deliver(whole, now)
            elif opcode == 0x9:
                self._write(_frame(0xA, payload))
            elif opcode == 0x8:
                self.close_code = int.from_bytes(payload[:2], "big") if len(payload) >= 2 else 1005
                if not self._close_sent:
                    self._close_sent = True
                    self._write(_frame(0x8, payload[:2]))
                if self.transport is not None:
                    self.transport.close()
        if pos:
            del buf[:pos]

    def _deliver(self, payload: bytes, now: float) -> None:
        self.frames += 1
        if self.on_frame is not None:
            self.on_frame(payload, now)
        else:
            self._inbox.append((payload, now))
            self._wake()

    def _wake(self) -> None:
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)

    def _write(self, data: bytes) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.write(data)

    # --- API ---

    def send_text(self, text: str | bytes) -> None:
        payload = text.encode() if isinstance(text, str) else text
        self._write(_frame(0x1, payload))

    async def recv(self, timeout: float = 30.0) -> tuple[bytes, float]:
        """The next frame and its arrival time (only without an `on_frame` callback)."""
        deadline = time.monotonic() + timeout
        while not self._inbox:
            if self.closed.done():
                raise ConnectionError(f"socket closed ({self.close_code})")
            self._waiter = asyncio.get_running_loop().create_future()
            await asyncio.wait_for(self._waiter, max(0.0, deadline - time.monotonic()))
        return self._inbox.popleft()

    async def recv_until_terminal(self, timeout: float = 60.0) -> list[bytes]:
        frames: list[bytes] = []
        while True:
            payload, _ = await self.recv(timeout)
            frames.append(payload)
            if is_terminal(payload):
                return frames

    async def close(self, code: int = 1000, timeout: float = 5.0) -> None:
        """The close handshake: send Close, wait for the server's, then drop the TCP."""
        if not self._close_sent:
            self._close_sent = True
            self._write(_frame(0x8, code.to_bytes(2, "big")))
        try:
            await asyncio.wait_for(asyncio.shield(self.closed), timeout)
        except asyncio.TimeoutError:
            self.abort()

    def abort(self) -> None:
        """Drop the connection at once with a reset: no close handshake, no TIME_WAIT."""
        if self.transport is None:
            return
        sock = self.transport.get_extra_info("socket")
        if sock is not None:
            try:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            except OSError:
                pass
        self.transport.abort()


class SseClient(asyncio.Protocol):
    """One keep-alive HTTP/1.1 connection streaming SSE responses, one request at a time."""

    def __init__(self, host: str, port: int):
        self.host, self.port = host, port
        self.transport: asyncio.Transport | None = None
        self.on_event: FrameHandler | None = None
        self.events = 0
        self.status = 0
        self._buf = bytearray()
        self._state = "idle"
        self._remaining = 0
        self._pending = bytearray()
        self._response: asyncio.Future[int] | None = None
        self.closed: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    @classmethod
    async def connect(cls, host: str, port: int, *, timeout: float = 30.0) -> SseClient:
        loop = asyncio.get_running_loop()
        client = cls(host, port)
        await asyncio.wait_for(loop.create_connection(lambda: client, host, port), timeout)
        return client

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports implement asyncio.Transport without subclassing it.
        self.transport = cast(asyncio.Transport, transport)

    def connection_lost(self, exc: Exception | None) -> None:
        if self._response is not None and not self._response.done():
            self._response.set_exception(exc or ConnectionError("connection closed mid-response"))
        if not self.closed.done():
            self.closed.set_result(None)

    async def post_stream(
        self, path: str, body: bytes, on_event: FrameHandler, timeout: float = 120.0
    ) -> int:
        """POST `body`, call `on_event` per SSE `data:` event, return the status when done."""
        assert self.transport is not None and self._state == "idle"
        self.on_event = on_event
        self._state = "head"
        self._response = asyncio.get_running_loop().create_future()
        head = (
            f"POST {path} HTTP/1.1\r\nHost: {self.host}:{self.port}\r\n"
            "Content-Type: application/json\r\nAccept: text/event-stream\r\n"
            f"Content-Length: {len(body)}\r\n\r\n"
        )
        self.transport.write(head.encode() + body)
        return await asyncio.wait_for(self._response, timeout)

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()

    def data_received(self, data: bytes) -> None:
        now = time.perf_counter()
        buf = self._buf
        buf += data
        pos = 0
        while True:
            state = self._state
            if state == "head":
                end = buf.find(b"\r\n\r\n", pos)
                if end < 0:
                    break
                lines = bytes(buf[pos:end]).decode("latin-1").split("\r\n")
                pos = end + 4
                self.status = int(lines[0].split(" ", 2)[1])
                headers = {
                    k.strip().lower(): v.strip()
                    for k, _, v in (line.partition(":") for line in lines[1:])
                }
                if headers.get("transfer-encoding", "").lower() == "chunked":
                    self._state = "size"
                else:
                    self._remaining = int(headers.get("content-length", "0"))
                    self._state = "length"
            elif state == "size":
                end = buf.find(b"\r\n", pos)
                if end < 0:
                    break
                size = int(bytes(buf[pos:end]).split(b";", 1)[0], 16)
                pos = end + 2
                if size == 0:
                    self._state = "trailer"
                else:
                    self._remaining = size
                    self._state = "data"
            elif state == "data":
                if len(buf) - pos < self._remaining + 2:
                    break
                self._body(bytes(buf[pos : pos + self._remaining]), now)
                pos += self._remaining + 2
                self._state = "size"
            elif state == "trailer":
                end = buf.find(b"\r\n", pos)
                if end < 0:
                    break
                empty = end == pos
                pos = end + 2
                if empty:
                    self._finish()
            elif state == "length":
                if len(buf) - pos < self._remaining:
                    break
                self._body(bytes(buf[pos : pos + self._remaining]), now)
                pos += self._remaining
                self._finish()
            else:
                break
        if pos:
            del buf[:pos]

    def _body(self, data: bytes, now: float) -> None:
        pending = self._pending
        if not pending and data.endswith(b"\n\n") and data.count(b"\n\n") == 1:
            self._event(data[:-2], now)  # the usual case: one chunk, one event
            return
        pending += data
        while True:
            end = pending.find(b"\n\n")
            if end < 0:
                return
            event = bytes(pending[:end])
            del pending[: end + 2]
            self._event(event, now)

    def _event(self, event: bytes, now: float) -> None:
        if event.startswith(b"data: "):
            self.events += 1
            if self.on_event is not None:
                self.on_event(event[6:], now)

    def _finish(self) -> None:
        self._state = "idle"
        self._pending.clear()
        if self._response is not None and not self._response.done():
            self._response.set_result(self.status)
