"""Keepalive under backpressure: a client that answers pings is never closed for a missed pong.

A real server with short keepalive settings and the real `websockets` client, which
answers every ping it reads. The client pipelines 200 `response.create`s on one
lane of a `/v1/responses` socket; the server runs them one at a time, its request
queue fills, and it stops reading the socket (backpressure), so the client's
pongs wait unread behind the creates. uvicorn counted that as a missed pong and
closed the socket 1011 "keepalive ping timeout", dropping every queued response.
Here the deadline waits while the server is not reading: all 200 are answered.
A client that really stops answering is still closed.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed

from realtime.config import ServerConfig

pytestmark = pytest.mark.anyio

CREATES = 200
TERMINAL = {"response.completed", "response.incomplete", "response.failed"}


async def test_a_pipelining_client_that_answers_pings_gets_every_response(
    server_factory: Any,
) -> None:
    server = server_factory(
        ServerConfig(
            log_level="warning", echo_delay=0.005, ws_ping_interval=0.1, ws_ping_timeout=0.3
        )
    )
    create = json.dumps(
        {"type": "response.create", "model": "echo", "input": "one two three four", "store": False}
    )
    ended: list[str] = []
    async with connect(f"ws://127.0.0.1:{server.port}/v1/responses", ping_interval=None) as ws:
        for _ in range(CREATES):
            await ws.send(create)
        try:
            while len(ended) < CREATES:
                event = json.loads(await ws.recv())
                if event["type"] in TERMINAL or event["type"] == "error":
                    ended.append(event["type"])
        except ConnectionClosed as closed:
            raise AssertionError(
                f"closed {closed.rcvd} after {len(ended)} of {CREATES} responses"
            ) from None
        # the server did stop reading (its queue filled), and kept pinging all along
        [session] = server.sessions()
        assert session.max_queue_depth >= server.config.request_queue_size
        [protocol] = _protocols(server)
        assert protocol.ping_sent_at > 0  # (the loop's clock is too coarse for its rtt)
        assert protocol.ping_timer is not None or protocol.pong_timer is not None
    assert ended == ["response.completed"] * CREATES


async def test_a_client_that_stops_answering_pings_is_still_closed(server_factory: Any) -> None:
    server = server_factory(
        ServerConfig(log_level="warning", ws_ping_interval=0.1, ws_ping_timeout=0.3)
    )
    async with connect(f"ws://127.0.0.1:{server.port}/v1/responses", ping_interval=None) as ws:
        ws.transport.pause_reading()  # reads nothing, so answers no ping
        await asyncio.sleep(1.5)
        ws.transport.resume_reading()
        with pytest.raises(ConnectionClosed) as closed:
            await asyncio.wait_for(ws.recv(), 10)
    assert closed.value.rcvd is not None and closed.value.rcvd.code == 1011
    assert closed.value.rcvd.reason == "keepalive ping timeout"


def _protocols(server: Any) -> list[Any]:
    """The server's open WebSocket connections (uvicorn's protocol objects)."""
    connections = server.server.server_state.connections
    return [c for c in connections if hasattr(c, "last_ping_rtt")]
