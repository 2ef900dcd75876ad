"""Graceful shutdown: in-flight requests finish within the grace; the rest get a terminal frame."""

from __future__ import annotations

import asyncio
import json
import signal
import time
from collections import defaultdict
from typing import Any

import httpx
import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed

from realtime.config import ServerConfig
from tests.conftest import async_wait_until, wait_until
from tests.ws.wsclient import chat, collect_until_terminal, recv_frame, text_of

pytestmark = pytest.mark.anyio

GRACE = 2.0
SHORT = " ".join(f"s{i}" for i in range(15))  # 15 pieces at 20 ms: done within the grace
LONG = " ".join(f"l{i}" for i in range(400))  # 8 s: still running when the grace ends


async def _read_until_closed(ws: Any) -> tuple[list[dict[str, Any]], ConnectionClosed]:
    frames = []
    try:
        while True:
            frames.append(await recv_frame(ws))
    except ConnectionClosed as closed:
        return frames, closed


async def _sse(base_url: str, text: str, started: asyncio.Event) -> list[str]:
    body = {"model": "echo", "messages": [{"role": "user", "content": text}], "stream": True}
    events: list[str] = []
    async with (
        httpx.AsyncClient(base_url=base_url, timeout=30) as client,
        client.stream("POST", "/v1/chat/completions", json=body) as response,
    ):
        async for line in response.aiter_lines():
            if line.startswith("data: "):
                events.append(line[len("data: ") :])
                started.set()
    return events


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP], ids=["SIGTERM", "SIGHUP"])
async def test_a_signal_during_20_streaming_requests_answers_every_one_and_exits_0(
    serve_process, signum
):
    """SIGHUP (a closed terminal, a process manager's reload) drains exactly like SIGTERM."""
    server = serve_process(
        "--echo-delay", "0.02", "--shutdown-grace", str(GRACE), "--log-level", "warning"
    )
    sockets = [await connect(server.ws_url) for _ in range(4)]
    expected: dict[str, str] = {}
    for s, ws in enumerate(sockets):
        for i in range(5):
            rid = f"s{s}-{i}"
            expected[rid] = SHORT if i % 2 == 0 else LONG
            await ws.send(chat(expected[rid], request_id=rid))
    assert len(expected) == 20
    sse_started = [asyncio.Event(), asyncio.Event()]
    sse = [
        asyncio.create_task(_sse(server.http_url, SHORT, sse_started[0])),
        asyncio.create_task(_sse(server.http_url, LONG, sse_started[1])),
    ]
    # Every request is streaming before the signal.
    frames: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for ws in sockets:
        while len({rid for rid in frames if rid.startswith(f"s{sockets.index(ws)}-")}) < 5:
            frame = await recv_frame(ws)
            frames[frame["request_id"]].append(frame)
    await asyncio.wait_for(asyncio.gather(*(e.wait() for e in sse_started)), 10)

    signalled = time.monotonic()
    server.proc.send_signal(signum)
    closes = []
    for ws in sockets:
        rest, closed = await _read_until_closed(ws)
        closes.append(closed)
        for frame in rest:
            frames[frame["request_id"]].append(frame)
    exit_code = await asyncio.get_running_loop().run_in_executor(None, server.proc.wait, 15)
    elapsed = time.monotonic() - signalled

    assert exit_code == 0
    assert elapsed < GRACE + 3.0, f"exit took {elapsed:.1f} s with a {GRACE} s grace"
    assert [c.rcvd.code for c in closes] == [1001] * 4
    assert all(c.rcvd.reason == "server shutting down" for c in closes)
    for rid, text in expected.items():
        terminal = [f for f in frames[rid] if f.get("type") in ("response.done", "error")]
        assert len(terminal) == 1, (rid, terminal)
        assert frames[rid][-1] is terminal[0], "nothing after the terminal frame"
        if text == SHORT:
            assert terminal[0]["status"] == "completed" and text_of(frames[rid]) == SHORT
        else:
            assert terminal[0]["status"] == "cancelled"
            assert terminal[0]["usage"]["completion_tokens"] >= 1
    short_events, long_events = await asyncio.gather(*sse)
    assert short_events[-1] == "[DONE]" and "error" not in short_events[-2]
    assert long_events[-1] == "[DONE]"
    assert json.loads(long_events[-2])["error"]["code"] == "shutting_down"
    log = server.stderr()
    assert "Traceback" not in log and "ERROR" not in log, log


async def test_requests_in_flight_finish_within_the_grace_then_1001(server_factory):
    server = server_factory(ServerConfig(echo_delay=0.02, shutdown_grace_seconds=5))
    async with connect(server.ws_url) as ws:
        await ws.send(chat(SHORT, request_id="short"))
        await recv_frame(ws)
        stopper = asyncio.get_running_loop().run_in_executor(None, server.stop)
        frames, closed = await _read_until_closed(ws)
        await stopper
    assert frames[-1]["type"] == "response.done" and frames[-1]["status"] == "completed"
    assert closed.rcvd.code == 1001 and closed.rcvd.reason == "server shutting down"


async def test_while_draining_new_requests_are_refused_and_cancels_still_work(server_factory):
    server = server_factory(ServerConfig(echo_delay=0.02, shutdown_grace_seconds=10))
    hub = server.app.state.hub
    async with connect(server.ws_url) as ws:
        await ws.send(chat(LONG, request_id="running"))
        await recv_frame(ws)
        server.loop.call_soon_threadsafe(hub.begin_shutdown)
        wait_until(lambda: server.sessions()[0].state == "shutting_down")
        await ws.send(chat("too late", request_id="late"))
        await ws.send(chat("too late, no id"))
        refused = []
        while len(refused) < 2:
            frame = await recv_frame(ws)
            if frame.get("type") == "error":
                refused.append(frame)
        await ws.send(json.dumps({"type": "response.cancel", "request_id": "running"}))
        frames, closed = await _read_until_closed(ws)
    assert [f["request_id"] for f in refused] == ["late", "req_1"]
    for frame in refused:
        assert frame["error"]["code"] == "shutting_down"
        assert frame["error"]["type"] == "service_unavailable"
    assert frames[-1]["type"] == "response.done" and frames[-1]["status"] == "cancelled"
    # The last request was answered: the socket closes at once, not at the end of the grace.
    assert closed.rcvd.code == 1001


async def test_shutdown_grace_over_cancels_with_terminal_frames_and_closes_1001(server_factory):
    server = server_factory(
        ServerConfig(echo_delay=0.05, shutdown_grace_seconds=0.3, log_level="warning")
    )
    async with connect(server.ws_url) as ws:
        await ws.send(chat(LONG, request_id="long"))
        await ws.send(chat("queued behind", request_id="queued", stream=False))
        await recv_frame(ws)
        stopper = asyncio.get_running_loop().run_in_executor(None, server.stop)
        frames, closed = await _read_until_closed(ws)
        await stopper
    assert closed.rcvd.code == 1001
    done = {f["request_id"]: f for f in frames if f.get("type") == "response.done"}
    assert done["long"]["status"] == "cancelled"
    assert done["queued"]["status"] == "completed"  # it had a slot and finished in the grace
    assert server.engine.stats.active == 0


async def test_a_non_streaming_http_request_still_running_at_the_end_gets_503(server_factory):
    server = server_factory(
        ServerConfig(echo_delay=0.05, shutdown_grace_seconds=0.3, log_level="warning")
    )
    body = {"model": "echo", "messages": [{"role": "user", "content": LONG}]}
    async with httpx.AsyncClient(base_url=server.http_url, timeout=30) as client:
        pending = asyncio.create_task(client.post("/v1/chat/completions", json=body))
        await async_wait_until(lambda: server.engine.stats.active == 1)
        stopper = asyncio.get_running_loop().run_in_executor(None, server.stop)
        response = await pending
        await stopper
    assert response.status_code == 503
    assert response.json()["error"]["code"] == "shutting_down"


async def test_ready_is_503_while_draining(server_factory):
    server = server_factory()
    async with httpx.AsyncClient(base_url=server.http_url, timeout=10) as client:
        assert (await client.get("/ready")).status_code == 200
        server.app.state.lifecycle.begin_drain()
        response = await client.get("/ready")
        server.app.state.lifecycle.draining = False
    assert response.status_code == 503 and response.json()["status"] == "shutting_down"


async def test_a_socket_opened_during_shutdown_is_closed_1001(server_factory):
    server = server_factory()
    server.app.state.hub.accepting = False
    async with connect(server.ws_url) as ws:
        _, closed = await _read_until_closed(ws)
    server.app.state.hub.accepting = True
    assert closed.rcvd.code == 1001


async def test_session_close_then_shutdown_still_answers_everything(server_factory):
    server = server_factory(ServerConfig(echo_delay=0.02, shutdown_grace_seconds=10))
    async with connect(server.ws_url) as ws:
        await ws.send(chat(SHORT, request_id="a"))
        await ws.send(json.dumps({"type": "session.close"}))
        await recv_frame(ws)
        server.loop.call_soon_threadsafe(server.app.state.hub.begin_shutdown)
        frames = await collect_until_terminal(ws)
        _, closed = await _read_until_closed(ws)
    assert frames[-1]["status"] == "completed"
    assert closed.rcvd.code == 1000 and closed.rcvd.reason == "session closed"
