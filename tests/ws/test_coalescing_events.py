"""The Realtime events and the Responses WebSocket mode fold under a slow reader as chat
chunks do: fewer, larger delta events with exactly the same text, each by its dialect's
own rule (`Dialect.fold`)."""

from __future__ import annotations

import json
import socket
import time
from typing import Any

import pytest
from websockets.asyncio.client import ClientConnection, connect

from realtime.config import ServerConfig
from realtime.engine.echo import EchoTokenizer
from tests.conftest import RunningServer, wait_until
from tests.ws.wsclient import recv_frame

pytestmark = pytest.mark.anyio

ANSWER = " ".join(f"word{i}" for i in range(3000))


def slow_socket(server: RunningServer) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", server.port))
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 32 * 1024)
    return sock


def wait_for_a_paused_engine(server: RunningServer) -> None:
    """Reading nothing (blocking this loop), until generation stops for the full socket."""
    stats, previous = server.engine.stats, -1
    for _ in range(200):
        time.sleep(0.05)
        if stats.tokens_generated == previous:
            return
        previous = stats.tokens_generated
    raise AssertionError("generation never paused for a full socket")


async def deltas_until(ws: ClientConnection, delta: str, terminal: set[str]) -> list[str]:
    pieces = []
    while True:
        frame = await recv_frame(ws)
        assert frame["type"] != "error", frame
        if frame["type"] == delta:
            pieces.append(frame["delta"])
        if frame["type"] in terminal:
            return pieces


async def check_folded(server: RunningServer, ws: ClientConnection, **kinds: Any) -> None:
    tokens = len(EchoTokenizer().encode(ANSWER))
    wait_until(lambda: len(server.sessions()) == 1)
    session = server.sessions()[0]
    # Folding first (a starved engine on a busy machine can look paused before it is),
    # then the pause that backpressure brings.
    wait_until(lambda: session.folded_chunks > 0)
    wait_for_a_paused_engine(server)
    assert server.engine.stats.tokens_generated < tokens  # backpressure reached the engine
    pieces = await deltas_until(ws, **kinds)
    assert "".join(pieces) == ANSWER
    assert len(pieces) < tokens  # folding sent fewer events
    assert len(pieces) == tokens - session.folded_chunks


async def test_realtime_text_deltas_fold_for_a_slow_reader(server_factory: Any) -> None:
    server = server_factory(ServerConfig(log_level="warning"), socket_buffer_bytes=32 * 1024)
    url = server.ws_url + "?model=echo"
    async with connect(url, sock=slow_socket(server), max_queue=1, ping_interval=None) as ws:
        assert (await recv_frame(ws))["type"] == "session.created"
        item = {
            "type": "message",
            "role": "user",
            "content": [{"type": "input_text", "text": ANSWER}],
        }
        await ws.send(json.dumps({"type": "conversation.item.create", "item": item}))
        await ws.send(json.dumps({"type": "response.create"}))
        await check_folded(
            server, ws, delta="response.output_text.delta", terminal={"response.done"}
        )


async def test_responses_text_deltas_fold_for_a_slow_reader(server_factory: Any) -> None:
    server = server_factory(ServerConfig(log_level="warning"), socket_buffer_bytes=32 * 1024)
    url = f"ws://127.0.0.1:{server.port}/v1/responses"
    async with connect(url, sock=slow_socket(server), max_queue=1, ping_interval=None) as ws:
        await ws.send(json.dumps({"type": "response.create", "model": "echo", "input": ANSWER}))
        await check_folded(
            server,
            ws,
            delta="response.output_text.delta",
            terminal={"response.completed", "response.incomplete", "response.failed"},
        )
