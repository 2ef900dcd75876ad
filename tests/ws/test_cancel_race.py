"""A cancel that reaches a request task before its first step still ends it with one terminal frame.

The race: the dispatcher has created the request's task (it is in the running
set) but the task has not run yet when `response.cancel` (or a teardown) cancels
it. A task cancelled before its first step never runs its body, nor its
`finally`. The deterministic tests cancel at exactly that moment, through a hook
on the session's running-task map; the stress test sends real cancels 0-2 ms
after their requests on many sockets.
"""

from __future__ import annotations

import asyncio
import json
import random
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed

from realtime.config import ServerConfig
from tests.conftest import async_wait_until
from tests.ws.wsclient import TERMINAL_TYPES, chat, collect_until_terminal, recv_frame, text_of

pytestmark = pytest.mark.anyio

LONG = " ".join(f"w{i}" for i in range(50))
WAIT = 10.0


class _OnRegister(dict[str, Any]):
    """The session's `_running` map, calling `act(request_id)` right after a task is registered:
    the task exists and has not taken its first step yet."""

    def __init__(self, act: Callable[[str], None]):
        super().__init__()
        self.act = act
        self.hits: list[str] = []

    def __setitem__(self, request_id: str, task: Any) -> None:
        super().__setitem__(request_id, task)
        self.hits.append(request_id)
        self.act(request_id)


def hook_sessions(server: Any, act: Callable[[Any, str], None]) -> list[_OnRegister]:
    """Install `_OnRegister` on every session the server opens from now on."""
    hub = server.app.state.hub
    add = hub.add
    hooks: list[_OnRegister] = []

    def adding(session: Any) -> None:
        hook = _OnRegister(lambda request_id: act(session, request_id))
        session._running = hook
        hooks.append(hook)
        add(session)

    hub.add = adding
    return hooks


async def _closed(ws: Any) -> ConnectionClosed:
    try:
        while True:
            await recv_frame(ws)
    except ConnectionClosed as closed:
        return closed


@pytest.mark.parametrize("request_id", ["r1", None], ids=["with-id", "without-id"])
async def test_a_cancel_before_the_task_starts_gets_one_terminal_frame(server_factory, request_id):
    server = server_factory(
        ServerConfig(echo_delay=0.01, max_concurrent_per_socket=1, log_level="warning")
    )
    first = request_id or "req_1"
    hooks = hook_sessions(
        server, lambda session, rid: session._cancel(rid) if rid == first else None
    )
    async with connect(server.ws_url) as ws:
        await ws.send(chat(LONG, request_id=request_id))
        frames = await asyncio.wait_for(collect_until_terminal(ws), WAIT)
        # The slot was released: with one slot, the next request runs at all.
        await ws.send(chat("next one", request_id="after"))
        after = await asyncio.wait_for(collect_until_terminal(ws), WAIT)
        await ws.send(json.dumps({"type": "session.close"}))
        closed = await asyncio.wait_for(_closed(ws), WAIT)
    assert hooks[0].hits[0] == first
    assert frames == [frames[-1]] and frames[-1]["type"] == "response.done"
    assert frames[-1]["request_id"] == first and frames[-1]["status"] == "cancelled"
    assert text_of(after) == "next one"
    assert closed.rcvd is not None and closed.rcvd.code == 1000
    assert server.engine.stats.requests_started == 1  # only "after" reached the engine
    await async_wait_until(lambda: not server.sessions())


async def test_a_close_before_the_task_starts_still_sends_its_terminal_frame(server_factory):
    server = server_factory(ServerConfig(echo_delay=0.01, log_level="warning"))

    def grace_over(session: Any, rid: str) -> None:
        # The end of a shutdown grace, and its cancel reaching the task before it ran.
        session.end_shutdown_grace()
        session._running[rid].cancel()

    hook_sessions(server, grace_over)
    async with connect(server.ws_url) as ws:
        await ws.send(chat(LONG, request_id="cut"))
        frames = await asyncio.wait_for(collect_until_terminal(ws), WAIT)
        closed = await asyncio.wait_for(_closed(ws), WAIT)
    assert frames[-1]["type"] == "response.done" and frames[-1]["status"] == "cancelled"
    assert frames[-1]["request_id"] == "cut"
    assert closed.rcvd is not None and closed.rcvd.code == 1001
    await async_wait_until(lambda: not server.sessions())


async def test_a_peer_gone_before_the_task_starts_releases_everything(server_factory):
    server = server_factory(ServerConfig(echo_delay=0.01, log_level="warning"))
    sessions: list[Any] = []

    def drop(session: Any, rid: str) -> None:
        sessions.append(session)
        session.end(None)  # what a failed send or a disconnect does

    hook_sessions(server, drop)
    async with connect(server.ws_url) as ws:
        await ws.send(chat(LONG, request_id="gone"))
        await async_wait_until(lambda: bool(sessions) and sessions[0].finished.is_set())
    (session,) = sessions
    assert not session._running and not session.core.records
    assert session.core.slots_used == 0  # every slot free again
    assert server.engine.stats.requests_started == 0


SOCKETS = 20
REQUESTS_PER_SOCKET = 25


async def _send_and_cancel(url: str, rng: random.Random) -> tuple[Counter[str], int]:
    """Each request then its cancel 0-2 ms later; returns terminal frames per id and the close."""
    terminals: Counter[str] = Counter()
    async with connect(url) as ws:
        ids = [f"q{i}" for i in range(REQUESTS_PER_SOCKET)]

        async def read() -> int:
            try:
                while True:
                    frame = await recv_frame(ws)
                    if frame.get("type") in TERMINAL_TYPES and frame.get("request_id"):
                        terminals[frame["request_id"]] += 1
            except ConnectionClosed as closed:
                return closed.rcvd.code if closed.rcvd is not None else 1006

        reader = asyncio.create_task(read())
        for request_id in ids:
            await ws.send(chat(LONG, request_id=request_id))
            await asyncio.sleep(rng.uniform(0, 0.002))
            await ws.send(json.dumps({"type": "response.cancel", "request_id": request_id}))
        await ws.send(json.dumps({"type": "session.close"}))
        code = await asyncio.wait_for(reader, WAIT * 3)
    return terminals, code


async def test_stress_request_then_cancel_within_2_ms_on_many_sockets(server_factory):
    server = server_factory(ServerConfig(echo_delay=0.001, log_level="warning"))
    rng = random.Random(13)
    results = await asyncio.gather(
        *(_send_and_cancel(server.ws_url, random.Random(rng.random())) for _ in range(SOCKETS))
    )
    for terminals, code in results:
        assert code == 1000, "session.close completed"
        assert set(terminals) == {f"q{i}" for i in range(REQUESTS_PER_SOCKET)}
        assert set(terminals.values()) == {1}, terminals
    await async_wait_until(lambda: not server.sessions())
    assert server.engine.stats.active == 0


async def test_a_session_keeps_no_per_request_state_once_its_requests_ended(server_factory):
    """The session's per-request records and tasks are back to empty: nothing grows with
    requests."""
    server = server_factory(ServerConfig(echo_delay=0.001, log_level="warning"))
    sessions: list[Any] = []
    hooks = hook_sessions(server, lambda session, rid: None)
    add = server.app.state.hub.add

    def capture(session: Any) -> None:
        sessions.append(session)
        add(session)

    server.app.state.hub.add = capture
    terminals, code = await _send_and_cancel(server.ws_url, random.Random(5))
    assert code == 1000 and set(terminals.values()) == {1}
    (session,) = sessions
    assert hooks and session.finished.is_set()
    # One record per request (the core's), and the glue's tasks.
    assert not session.core.records and not session._running and not session._side_tasks
    assert session.core.queue_depth == 0 and session.core.slots_used == 0
    assert len(session._outbox) == 0
    assert not server.app.state.hub._sessions
