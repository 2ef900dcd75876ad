"""websockets' stream reader, copying a large frame's payload once instead of every time it grows.

websockets appends each read to one bytearray (`buffer += data`) and slices the
payload out of it. For a frame of megabytes that arrives in reads of 64-256 KiB,
the bytearray is reallocated, and copied, each time it outgrows its allocation,
and the slice is one more copy: 24 ms of an 8 MiB frame's time on the event loop
went there, all of it holding the GIL. Here a read of at least `GATHER_BYTES`
keeps the chunks as they arrive and joins them once, into the payload it returns.
Everything else is websockets' own reader: the handshake's lines, small frames,
the skip after a 1009 (`server_protocol.py`), which reads `buffer` directly.
"""

from __future__ import annotations

from collections.abc import Generator

from websockets.streams import StreamReader

#: Payloads at least this long are gathered from their chunks (smaller ones are cheap).
GATHER_BYTES = 256 * 1024


class GatheringStreamReader(StreamReader):
    """`StreamReader` whose large `read_exact` joins the chunks it waited for once."""

    def __init__(self) -> None:
        super().__init__()
        #: Reads received while a large `read_exact` waits, and their total size.
        self._chunks: list[bytes] = []
        self._chunked = 0
        self._gathering = False

    def feed_data(self, data: bytes | bytearray) -> None:
        if not self._gathering:
            super().feed_data(data)
            return
        if self.eof:
            raise EOFError("stream ended")
        self._chunks.append(bytes(data))  # no copy for bytes, which is what a transport gives
        self._chunked += len(data)

    def read_exact(self, n: int) -> Generator[None, None, bytearray]:
        if n < GATHER_BYTES:
            return super().read_exact(n)
        return self._gather(n)

    def _gather(self, n: int) -> Generator[None, None, bytearray]:
        self._gathering = True
        try:
            while len(self.buffer) + self._chunked < n:
                if self.eof:
                    have = len(self.buffer) + self._chunked
                    raise EOFError(f"stream ends after {have} bytes, expected {n} bytes")
                yield
            payload = bytearray().join([self.buffer, *self._chunks])
            self._chunks.clear()
            self._chunked = 0
            self.buffer = payload[n:]  # the start of the next frame, if it came along
            del payload[n:]
            return payload
        finally:
            self._gathering = False
            if self._chunks:  # abandoned while waiting: the reads stay readable
                self.buffer += b"".join(self._chunks)
                self._chunks.clear()
                self._chunked = 0

    def discard(self) -> None:
        super().discard()
        self._chunks.clear()
        self._chunked = 0
