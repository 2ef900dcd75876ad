"""Control frames behind a full request queue act at once; requests keep their backpressure.

Set-up: one slot, a queue of 2 and a read-ahead of 2, and a long answer holding
the slot. The proof of "at once" is the order of frames: the cancel's answer
arrives while the long request is still streaming, before its terminal frame;
before the read-ahead, the cancel was read only once the long request ended.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed

from realtime.config import ServerConfig
from tests.conftest import async_wait_until
from tests.ws.wsclient import TERMINAL_TYPES, chat, recv_frame, text_of

pytestmark = pytest.mark.anyio

LONG = " ".join(f"w{i}" for i in range(300))  # 15 s at 50 ms a piece: always cancelled
MEDIUM = " ".join(f"m{i}" for i in range(40))  # 2 s: runs to its end
CONFIG = ServerConfig(
    echo_delay=0.05,
    max_concurrent_per_socket=1,
    request_queue_size=2,
    read_ahead_requests=2,
    log_level="warning",
)
WAIT = 10.0


def cancel(request_id: str) -> str:
    return json.dumps({"type": "response.cancel", "request_id": request_id})


async def fill(ws: Any, server: Any, waiting: int = 4, first: str = LONG) -> Any:
    """The long request running, then `waiting` more: the first in the dispatcher's hand
    (waiting for the slot), two in the full queue, the rest read ahead."""
    await ws.send(chat(first, request_id="long"))
    assert (await recv_frame(ws))["request_id"] == "long"
    for i in range(waiting):
        await ws.send(chat(f"queued {i}", request_id=f"q{i}"))
    accepted = 1 + min(waiting, 5)
    await async_wait_until(
        lambda: bool(server.sessions()) and server.sessions()[0].accepted == accepted
    )
    session = server.sessions()[0]
    assert session.queue_depth == min(waiting, 5) - 1
    return session


async def next_terminal(ws: Any) -> dict[str, Any]:
    while True:
        frame = await asyncio.wait_for(recv_frame(ws), WAIT)
        if frame.get("type") in TERMINAL_TYPES:
            return frame


async def test_a_cancel_behind_a_full_queue_is_answered_while_the_slot_is_still_busy(
    server_factory,
):
    server = server_factory(CONFIG)
    async with connect(server.ws_url) as ws:
        await fill(ws, server)  # the queue is full, q3 waits in the read-ahead
        await ws.send(cancel("q3"))
        first_terminal = await next_terminal(ws)
        assert server.engine.stats.active == 1, "the long request is still generating"
        await ws.send(cancel("q1"))  # one in the queue proper
        second_terminal = await next_terminal(ws)
        await ws.send(cancel("long"))
        rest = [await next_terminal(ws) for _ in range(3)]
    assert first_terminal == {
        "type": "response.done",
        "request_id": "q3",
        "id": None,
        "status": "cancelled",
        "finish_reason": None,
        "usage": None,
    }
    assert second_terminal["request_id"] == "q1" and second_terminal["status"] == "cancelled"
    rest = rest[:3]
    assert [t["request_id"] for t in rest] == ["long", "q0", "q2"]
    assert rest[0]["status"] == "cancelled"
    assert all(t["status"] == "completed" for t in rest[1:])
    # The withdrawn ones never reached the engine; long, q0 and q2 did.
    assert server.engine.stats.requests_started == 3


async def test_a_cancel_for_the_running_request_behind_a_full_queue_acts_at_once(server_factory):
    server = server_factory(CONFIG)
    async with connect(server.ws_url) as ws:
        await fill(ws, server)
        await ws.send(cancel("long"))
        terminal = await next_terminal(ws)
    assert terminal["request_id"] == "long" and terminal["status"] == "cancelled"
    assert terminal["usage"]["completion_tokens"] < 300


async def test_session_close_behind_a_full_queue_is_read_at_once(server_factory):
    server = server_factory(CONFIG)
    async with connect(server.ws_url) as ws:
        session = await fill(ws, server)
        await ws.send(json.dumps({"type": "session.close"}))
        await async_wait_until(lambda: session.state == "draining")
        assert server.engine.stats.active == 1, "read while the long request still runs"
        await ws.send(chat("after the close", request_id="late"))  # never read
        frames: list[dict[str, Any]] = []
        with pytest.raises(ConnectionClosed) as closed:
            while True:
                frames.append(await asyncio.wait_for(recv_frame(ws), 30))
    terminals = [f["request_id"] for f in frames if f.get("type") in TERMINAL_TYPES]
    assert terminals == ["long", "q0", "q1", "q2", "q3"]
    assert closed.value.rcvd is not None and closed.value.rcvd.code == 1000
    assert text_of([f for f in frames if f.get("request_id") == "q3"]) == "queued 3"


async def test_requests_beyond_the_read_ahead_are_not_read_backpressure_is_kept(server_factory):
    server = server_factory(CONFIG)
    async with connect(server.ws_url) as ws:
        session = await fill(ws, server, waiting=10, first=MEDIUM)
        await ws.send(cancel("long"))  # behind the full read-ahead: not read yet
        await asyncio.sleep(0.3)  # every chance to read more than it may
        assert session.accepted == 6, "the reader stopped at queue + read-ahead + 1 + running"
        assert session.max_queue_depth == 4
        assert server.engine.stats.active == 1
        terminals = [await next_terminal(ws) for _ in range(11)]
    # The long answer ran to its end (its cancel came behind q9), then everyone in order.
    assert [t["request_id"] for t in terminals] == ["long"] + [f"q{i}" for i in range(10)]
    assert all(t["status"] == "completed" for t in terminals)
