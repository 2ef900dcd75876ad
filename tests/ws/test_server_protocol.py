"""The sans-I/O server protocol after a message too big: Close 1009, skip, then the handshake.

No sockets: bytes a client would send go in, what the server would write comes out.
"""

from __future__ import annotations

import os

from websockets.frames import Close, Frame, Opcode
from websockets.protocol import CLOSING
from websockets.streams import StreamReader

from realtime.ws.server_protocol import RealtimeServerProtocol

LIMIT = 1024


def client_frame(opcode: Opcode, data: bytes, *, fin: bool = True) -> bytes:
    return Frame(opcode, data, fin).serialize(mask=True)


def open_protocol() -> RealtimeServerProtocol:
    protocol = RealtimeServerProtocol(max_size=LIMIT)
    key = "dGhlIHNhbXBsZSBub25jZQ=="
    protocol.receive_data(
        b"GET /v1/realtime HTTP/1.1\r\nHost: test\r\nUpgrade: websocket\r\n"
        b"Connection: Upgrade\r\nSec-WebSocket-Key: " + key.encode() + b"\r\n"
        b"Sec-WebSocket-Version: 13\r\n\r\n"
    )
    (request,) = protocol.events_received()
    protocol.send_response(protocol.accept(request))
    protocol.data_to_send()
    return protocol


def written_frames(protocol: RealtimeServerProtocol) -> tuple[list[Frame], bool]:
    """The frames the server would write, and whether it would half-close (EOF)."""
    chunks = protocol.data_to_send()
    eof = b"" in chunks
    reader = StreamReader()
    reader.feed_data(b"".join(chunks))
    reader.feed_eof()
    frames = []
    while reader.buffer:
        parser = Frame.parse(reader.read_exact, mask=False)
        try:
            while True:
                next(parser)
        except StopIteration as done:
            frames.append(done.value)
    return frames, eof


def feed_in_pieces(protocol: RealtimeServerProtocol, data: bytes, piece: int = 4096) -> int:
    """Feed `data` as TCP would; returns the largest the parser's buffer ever got."""
    largest = 0
    for start in range(0, len(data), piece):
        protocol.receive_data(data[start : start + piece])
        largest = max(largest, len(protocol.reader.buffer))
    return largest


def test_an_oversize_message_gets_close_1009_without_eof_and_is_skipped_unbuffered():
    protocol = open_protocol()
    oversize = client_frame(Opcode.TEXT, os.urandom(64 * LIMIT))
    largest = feed_in_pieces(protocol, oversize)

    frames, eof = written_frames(protocol)
    assert [f.opcode for f in frames] == [Opcode.CLOSE]
    assert Close.parse(frames[0].data).code == 1009
    assert not eof, "the server must not half-close while the client is still sending"
    assert protocol.parser_exc is None and protocol.state is CLOSING
    assert largest <= 4096, "the skipped payload is never accumulated"
    assert protocol.events_received() == []


def test_after_the_1009_data_frames_are_skipped_pings_answered_and_the_close_completes():
    protocol = open_protocol()
    feed_in_pieces(protocol, client_frame(Opcode.TEXT, b"x" * (3 * LIMIT)))
    protocol.data_to_send()
    later = (
        client_frame(Opcode.BINARY, b"y" * (200 * LIMIT))  # 200 KiB: over the limit too
        + client_frame(Opcode.TEXT, b"small")
        + client_frame(Opcode.PING, b"are you there")
        + client_frame(Opcode.CLOSE, Close(1009, "").serialize())
    )
    largest = feed_in_pieces(protocol, later, piece=1000)

    events = protocol.events_received()
    assert [e.opcode for e in events] == [Opcode.PING, Opcode.CLOSE]
    frames, eof = written_frames(protocol)
    assert [f.opcode for f in frames] == [Opcode.PONG]
    assert frames[0].data == b"are you there"
    assert eof, "the handshake is complete: the server closes TCP"
    assert protocol.close_rcvd is not None and protocol.parser_exc is None
    assert largest <= 1000 + 14


def test_a_fragmented_message_that_grows_too_big_is_skipped_to_its_end():
    protocol = open_protocol()
    first = client_frame(Opcode.TEXT, b"a" * (LIMIT // 2), fin=False)
    second = client_frame(Opcode.CONT, b"b" * LIMIT, fin=False)  # over the limit now
    last = client_frame(Opcode.CONT, b"c" * 10, fin=True)
    feed_in_pieces(protocol, first + second + last)
    assert [e.opcode for e in protocol.events_received()] == [Opcode.TEXT]  # the first part
    frames, eof = written_frames(protocol)
    assert [Close.parse(f.data).code for f in frames] == [1009] and not eof

    protocol.receive_data(client_frame(Opcode.CLOSE, Close(1009, "").serialize()))
    assert [e.opcode for e in protocol.events_received()] == [Opcode.CLOSE]
    assert protocol.close_rcvd is not None and protocol.parser_exc is None


def test_a_huge_control_frame_after_the_1009_fails_the_connection_instead_of_buffering():
    protocol = open_protocol()
    feed_in_pieces(protocol, client_frame(Opcode.TEXT, b"x" * (2 * LIMIT)))
    protocol.data_to_send()
    # A ping header announcing 2**40 bytes: never read into memory.
    protocol.receive_data(bytes([0x89, 0xFF]) + (2**40).to_bytes(8, "big") + b"\x00" * 4)
    assert protocol.parser_exc is not None
    _, eof = written_frames(protocol)
    assert eof


def test_frames_within_the_limit_are_parsed_as_usual():
    protocol = open_protocol()
    protocol.receive_data(client_frame(Opcode.TEXT, b"hello"))
    (event,) = protocol.events_received()
    assert event.opcode is Opcode.TEXT and event.data == b"hello"
    assert protocol.data_to_send() == []
