"""websockets' sans-I/O server protocol, finishing the closing handshake after a message too big.

When a message exceeds `--max-frame-bytes`, websockets "fails" the connection:
it writes Close 1009, half-closes TCP at once and discards whatever the client
sends next. A client still writing the rest of that message then sees the
server's EOF while megabytes sit in its send buffer; the standard `websockets`
client closes its transport there, and CPython's selector transport, once that
buffer drains, reports the connection lost without marking it so. The client's
next `close()` (the one `async with connect(...)` makes on exit) then dies in
`transport.abort()` with `AttributeError: 'NoneType' object has no attribute
'call_soon'` instead of raising the 1009 it had received.

Here the server sends Close 1009 without the EOF and keeps parsing, cheaply: it
skips the rest of the oversize frame and every later data frame without
buffering them (they count for nothing once a Close is sent), still answers
pings, and when the client's Close arrives the handshake completes as a normal
one does (the server closes TCP). By then the client has written everything,
so its transport closes with an empty buffer. A client that never answers is
cut off by the transport's close timeout (`realtime.ws.transport`).
"""

from __future__ import annotations

import sys
from collections.abc import Generator
from typing import Any

from websockets.exceptions import PayloadTooBig, ProtocolError
from websockets.frames import CloseCode, Frame
from websockets.protocol import OPEN

from realtime.ws.handshake import RedactingServerProtocol
from realtime.ws.stream_reader import GatheringStreamReader

#: Text, binary and continuation: the frames skipped after the Close 1009.
_DATA_OPCODES = frozenset({0x0, 0x1, 0x2})
#: RFC 6455 5.5: a control frame carries at most 125 bytes.
_MAX_CONTROL_PAYLOAD = 125
#: A client masks every frame: 4 bytes between the length and the payload.
_MASK_BYTES = 4
#: The partial-message size counter: `current_size` in websockets 15+, `cur_size` in 14.
_FRAGMENT_SIZE_ATTRIBUTES = ("current_size", "cur_size")


class RealtimeServerProtocol(RedactingServerProtocol):
    """Also refuses a bad handshake without quoting it (`RedactingServerProtocol`), and
    reads a large frame's payload with one copy (`GatheringStreamReader`)."""

    #: The PayloadTooBig answered with a Close 1009 and a skip, not a failure.
    _answered: PayloadTooBig | None = None

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # Before any data: the parser websockets started reads from the reader it had.
        self.reader = GatheringStreamReader()
        self.parser = self.parse()
        next(self.parser)

    def fail(self, code: int, reason: str = "") -> None:
        # `parse()` calls this from its `except PayloadTooBig` block: the exception says
        # how much of the frame is still unread (Frame.parse stops right after the length).
        exc = sys.exc_info()[1]
        if (
            code == CloseCode.MESSAGE_TOO_BIG
            and isinstance(exc, PayloadTooBig)
            and self.state is OPEN
        ):
            self.send_close(code, reason)
            self._answered = exc
            for name in _FRAGMENT_SIZE_ATTRIBUTES:  # the message is dropped, not continued
                if getattr(self, name, None) is not None:
                    setattr(self, name, None)
            unread = _MASK_BYTES + exc.size if exc.size is not None else 0
            self.parser = self._skip_until_close(unread)
            next(self.parser)
            return
        super().fail(code, reason)

    def receive_data(self, data: bytes | bytearray) -> None:
        super().receive_data(data)
        if self.parser_exc is not None and self.parser_exc is self._answered:
            # Answered in `fail()`: the closing handshake goes on; no parser failure.
            self.parser_exc = None

    def _skip_until_close(self, unread: int) -> Generator[None]:
        """Discard `unread` bytes, then every data frame, until the client's Close."""
        reader = self.reader
        try:
            while True:
                while unread > 0:
                    if (yield from reader.at_eof()):
                        raise EOFError("unexpected end of stream")
                    taken = min(unread, len(reader.buffer))
                    del reader.buffer[:taken]
                    unread -= taken
                if (yield from reader.at_eof()):
                    raise EOFError("unexpected end of stream")
                header = yield from self._peek(2)
                if header[0] & 0x0F in _DATA_OPCODES:
                    unread = yield from self._frame_bytes(header)
                    continue
                # Close, ping or pong: websockets handles it (a Close completes the
                # handshake and replaces this parser by its own `discard()`).
                frame = yield from Frame.parse(
                    reader.read_exact,
                    mask=True,
                    max_size=_MAX_CONTROL_PAYLOAD,
                    extensions=self.extensions,
                )
                self.recv_frame(frame)
        except (ProtocolError, PayloadTooBig, UnicodeDecodeError) as exc:
            self.fail(CloseCode.PROTOCOL_ERROR, str(exc))
            self.parser_exc = exc
        except EOFError as exc:
            self.fail(CloseCode.ABNORMAL_CLOSURE, str(exc))
            self.parser_exc = exc
        yield
        raise AssertionError("_skip_until_close() shouldn't step after an error")

    def _peek(self, size: int) -> Generator[None, None, bytes]:
        """The next `size` bytes, left in the buffer."""
        reader = self.reader
        while len(reader.buffer) < size:
            if reader.eof:
                raise EOFError("unexpected end of stream")
            yield
        return bytes(reader.buffer[:size])

    def _frame_bytes(self, header: bytes) -> Generator[None, None, int]:
        """The whole size of the data frame starting in the buffer: header, mask, payload."""
        length = header[1] & 0x7F
        size = 2
        if length == 126:
            size = 4
            length = int.from_bytes((yield from self._peek(size))[2:4], "big")
        elif length == 127:
            size = 10
            length = int.from_bytes((yield from self._peek(size))[2:10], "big")
        if header[1] & 0x80:
            size += _MASK_BYTES
        return size + length
