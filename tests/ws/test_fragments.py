"""A large text message goes out in fragments: framing a 4 MB message costs the loop one
fragment at a time, and a reader that falls behind holds the server to a fragment.

Read with websockets' sans-I/O client (`rawclient.py`), which hands over every frame
as it arrived, so the test sees the fragments themselves; the real `websockets` client
(`test_hostile_state.py`, the Realtime SDK tests) sees whole messages, as any client
does.
"""

from __future__ import annotations

import json
import time
from typing import Any

import httpx
from websockets.frames import Opcode

from realtime.ws.transport import FRAGMENT_BYTES, RealtimeWebSocketProtocol
from tests.conftest import RunningServer
from tests.ws.rawclient import RawClient


def _events_client(server: RunningServer, **options: Any) -> RawClient:
    client = RawClient(f"ws://127.0.0.1:{server.port}/v1/realtime?model=echo", **options)
    _frames_until(client, lambda frames: _has_type(frames, "session.created"))
    return client


def _messages(frames: list[Any]) -> list[list[Any]]:
    """The frames of each whole text message, in order (control frames left out)."""
    messages: list[list[Any]] = []
    current: list[Any] = []
    for frame in frames:
        if frame.opcode is Opcode.TEXT or (frame.opcode is Opcode.CONT and current):
            current.append(frame)
            if frame.fin:
                messages.append(current)
                current = []
    return messages


def _decoded(message: list[Any]) -> dict[str, Any]:
    value: dict[str, Any] = json.loads(b"".join(bytes(f.data) for f in message))
    return value


def _has_type(frames: list[Any], kind: str) -> bool:
    return any(_decoded(m)["type"] == kind for m in _messages(frames))


def _frames_until(client: RawClient, done: Any, timeout: float = 30.0) -> list[Any]:
    deadline = time.monotonic() + timeout
    while not done(client.frames):
        assert time.monotonic() < deadline, "the server did not send it in time"
        assert client._receive_once(), "the server closed the connection"
        client.flush()  # pongs
    return client.frames


def _create_item(client: RawClient, text: str) -> None:
    item = {
        "id": "big",
        "type": "message",
        "role": "user",
        "content": [{"type": "input_text", "text": text}],
    }
    client.send_json({"type": "conversation.item.create", "item": item})
    _frames_until(client, lambda frames: _has_type(frames, "conversation.item.done"))


def test_a_large_message_is_sent_in_fragments_and_a_small_one_whole(server: RunningServer) -> None:
    text = "x" * (4 * FRAGMENT_BYTES + 123)
    client = _events_client(server)
    try:
        _create_item(client, text)
        client.frames.clear()
        client.send_json({"type": "conversation.item.retrieve", "item_id": "big"})
        client.send_json({"type": "conversation.item.retrieve", "item_id": "nope"})

        def both(frames: list[Any]) -> bool:
            return _has_type(frames, "error")

        messages = _messages(_frames_until(client, both))
        assert [_decoded(m)["type"] for m in messages] == ["conversation.item.retrieved", "error"]
        retrieved, error = messages
        assert _decoded(retrieved)["item"]["content"][0]["text"] == text
        assert len(retrieved) == 5  # four full fragments and the rest
        assert retrieved[0].opcode is Opcode.TEXT
        assert all(f.opcode is Opcode.CONT for f in retrieved[1:])
        assert all(len(f.data) == FRAGMENT_BYTES for f in retrieved[:-1])
        assert 0 < len(retrieved[-1].data) <= FRAGMENT_BYTES
        assert len(error) == 1  # a small message is one frame
        assert _decoded(error)["error"]["code"] == "item_not_found"
    finally:
        client.close()


def test_a_reader_that_stops_holds_the_server_to_fragments_not_the_message(
    server_factory: Any,
) -> None:
    """A client that stops reading in the middle of a 4 MB message: the server's write
    buffer stays near its high-water mark plus a fragment (the message waits in the
    sender, one fragment at a time), /health is answered meanwhile, and once the client
    reads again the whole message arrives."""
    # small kernel buffers on both ends, so what the client does not read waits in the server
    server = server_factory(socket_buffer_bytes=64 * 1024)
    text = "y" * (16 * FRAGMENT_BYTES)
    client = _events_client(server, rcvbuf=64 * 1024)
    try:
        _create_item(client, text)
        client.frames.clear()
        client.send_json({"type": "conversation.item.retrieve", "item_id": "big"})
        time.sleep(0.5)  # the server fills the socket and its buffer, then waits
        assert httpx.get(server.http_url + "/health", timeout=10).status_code == 200
        buffered = _write_buffer_bytes(server)
        assert buffered < 4 * FRAGMENT_BYTES, buffered
        (retrieved,) = _messages(_frames_until(client, lambda frames: bool(_messages(frames))))
        assert _decoded(retrieved)["item"]["content"][0]["text"] == text
        assert len(retrieved) == 17  # the item's JSON is a little over 16 fragments
    finally:
        client.close()


def _write_buffer_bytes(server: RunningServer) -> int:
    """Bytes held in the write buffer of the server's one open socket (uvicorn's own
    connection set; read from the test's thread, which is fine for a size)."""
    sizes = [
        protocol.transport.get_write_buffer_size()
        for protocol in list(server.server.server_state.connections)
        if isinstance(protocol, RealtimeWebSocketProtocol)
    ]
    assert len(sizes) == 1, sizes
    return sizes[0]
