"""The gathering stream reader: the same bytes as websockets' reader, one copy for a large read."""

from __future__ import annotations

import os
from collections.abc import Generator

import pytest
from websockets.frames import Frame, Opcode
from websockets.streams import StreamReader

from realtime.ws.stream_reader import GATHER_BYTES, GatheringStreamReader


def _run(reader: StreamReader, reads: list[int], data: bytes, chunk: int) -> list[bytes]:
    """Feed `data` in `chunk`-sized pieces to a parser doing `reads`; what each read got."""
    got: list[bytes] = []

    def parser() -> Generator[None, None, None]:
        for n in reads:
            got.append(bytes((yield from reader.read_exact(n))))

    steps = parser()
    next(steps)
    running = True
    for start in range(0, len(data), chunk):
        reader.feed_data(data[start : start + chunk])  # after the parser is done, too
        if running:
            try:
                next(steps)
            except StopIteration:
                running = False
    return got


@pytest.mark.parametrize("chunk", [1000, 65536, 300_000, 5_000_000])
def test_large_and_small_reads_get_what_websockets_reader_gets(chunk: int) -> None:
    data = os.urandom(3 * GATHER_BYTES + 1234)
    reads = [2, 8, GATHER_BYTES * 2 + 17, 4, GATHER_BYTES, 5]
    expected = _run(StreamReader(), reads, data, chunk)
    gathering = GatheringStreamReader()
    assert _run(gathering, reads, data, chunk) == expected
    assert b"".join(expected) == data[: sum(reads)]
    assert bytes(gathering.buffer) == data[sum(reads) :]  # the rest, left for the next read


def test_a_large_masked_frame_parses_as_with_websockets_reader() -> None:
    payload = os.urandom(GATHER_BYTES * 3)
    client_side = Frame(Opcode.BINARY, payload).serialize(mask=True)
    reader = GatheringStreamReader()
    parser = Frame.parse(reader.read_exact, mask=True)
    next(parser)
    frame = None
    for start in range(0, len(client_side), 65536):
        reader.feed_data(client_side[start : start + 65536])
        try:
            next(parser)
        except StopIteration as done:
            frame = done.value
    assert frame is not None
    assert frame.data == payload


def test_the_stream_ending_mid_read_is_an_eof_error_naming_the_sizes() -> None:
    reader = GatheringStreamReader()
    read = reader.read_exact(GATHER_BYTES)
    next(read)
    reader.feed_data(b"x" * 1000)
    next(read)
    reader.feed_eof()
    with pytest.raises(EOFError, match=f"after 1000 bytes, expected {GATHER_BYTES}"):
        next(read)


def test_a_read_abandoned_midway_leaves_its_bytes_in_the_buffer() -> None:
    reader = GatheringStreamReader()
    read = reader.read_exact(GATHER_BYTES)
    next(read)
    reader.feed_data(b"abc")
    reader.feed_data(b"def")
    read.close()
    assert bytes(reader.buffer) == b"abcdef"
    reader.feed_data(b"g")  # no longer gathering
    assert bytes(reader.buffer) == b"abcdefg"
