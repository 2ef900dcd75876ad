"""Each configurable limit, with its documented behaviour."""

from __future__ import annotations

import asyncio
import time

import httpx
import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed
from websockets.frames import Opcode

from realtime.config import ServerConfig
from tests.ws.rawclient import RawClient
from tests.ws.wsclient import chat, collect_until_terminal, recv_frame, text_of

pytestmark = pytest.mark.anyio

TEN_WORDS = "one two three four five six seven eight nine ten"


async def _closed(ws) -> ConnectionClosed:
    with pytest.raises(ConnectionClosed) as info:
        while True:
            await ws.recv()
    return info.value


# --- max in flight ------------------------------------------------------------------


async def test_a_request_over_the_in_flight_limit_gets_an_error_frame_and_the_socket_stays(
    server_factory,
):
    server = server_factory(
        ServerConfig(echo_delay=0.02, max_in_flight_per_socket=2, log_level="warning")
    )
    async with connect(server.ws_url) as ws:
        await ws.send(chat(TEN_WORDS, request_id="a"))
        await ws.send(chat(TEN_WORDS, request_id="b"))
        await ws.send(chat(TEN_WORDS, request_id="c"))
        terminals = {}
        while len(terminals) < 3:
            frame = await recv_frame(ws)
            if frame.get("type") in ("response.done", "error"):
                terminals[frame["request_id"]] = frame
        # Once a and b are answered, there is room again.
        await ws.send(chat("room again", request_id="d"))
        after = await collect_until_terminal(ws)
    refused = terminals["c"]
    assert refused["type"] == "error"
    assert refused["error"]["code"] == "too_many_requests_in_flight"
    assert refused["error"]["type"] == "rate_limit_error"
    assert "the limit is 2" in refused["error"]["message"]
    assert terminals["a"]["status"] == terminals["b"]["status"] == "completed"
    assert text_of(after) == "room again"
    assert server.engine.stats.requests_started == 3


async def test_with_the_default_limit_the_queue_backpressures_before_the_limit_is_reached():
    config = ServerConfig()
    # queued + read ahead + running + held by the dispatcher
    bound = (
        config.request_queue_size
        + config.read_ahead_requests
        + config.max_concurrent_per_socket
        + 1
    )
    assert config.max_in_flight_per_socket > bound


# --- idle timeout ----------------------------------------------------------------


async def test_an_idle_socket_is_closed_with_1000_idle_timeout(server_factory):
    server = server_factory(ServerConfig(idle_timeout_seconds=0.3, log_level="warning"))
    async with connect(server.ws_url) as ws:
        await ws.send(chat("then silence"))
        await collect_until_terminal(ws)
        started = time.monotonic()
        closed = await _closed(ws)
    assert closed.rcvd.code == 1000 and closed.rcvd.reason == "idle timeout"
    assert 0.25 <= time.monotonic() - started < 3


async def test_a_running_request_keeps_the_socket_from_being_idle(server_factory):
    server = server_factory(
        ServerConfig(idle_timeout_seconds=0.2, echo_delay=0.05, log_level="warning")
    )
    text = " ".join(f"w{i}" for i in range(20))  # 1 s of generation, no frames in between
    async with connect(server.ws_url) as ws:
        await ws.send(chat(text, stream=False))
        frames = await collect_until_terminal(ws)
        closed = await _closed(ws)
    assert frames[0]["choices"][0]["message"]["content"] == text
    assert closed.rcvd.reason == "idle timeout"


# --- keepalive ---------------------------------------------------------------------


def test_pings_are_sent_and_a_client_that_never_answers_is_closed_1011(server_factory):
    server = server_factory(
        ServerConfig(
            ws_ping_interval=0.1, ws_ping_timeout=0.2, idle_timeout_seconds=0, log_level="warning"
        )
    )
    client = RawClient(server.ws_url)
    time.sleep(0.6)  # never read, so never answer a ping
    client.read_until_closed(answer_pings=False)
    client.close()
    assert any(f.opcode is Opcode.PING for f in client.frames)
    assert client.close_code == 1011 and client.close_reason == "keepalive ping timeout"


async def test_a_client_that_answers_pings_stays_connected(server_factory):
    server = server_factory(
        ServerConfig(ws_ping_interval=0.05, ws_ping_timeout=0.2, log_level="warning")
    )
    async with connect(server.ws_url) as ws:
        await asyncio.sleep(0.5)
        await ws.send(chat("still here"))
        assert text_of(await collect_until_terminal(ws)) == "still here"


# --- maximum session duration ----------------------------------------------------------


async def test_max_session_sends_a_warning_then_closes_1000_after_the_grace(server_factory):
    server = server_factory(
        ServerConfig(
            max_session_seconds=0.3,
            session_expiry_grace_seconds=0.4,
            echo_delay=0.05,
            log_level="warning",
        )
    )
    async with connect(server.ws_url) as ws:
        opened = time.monotonic()
        await ws.send(chat(" ".join(f"w{i}" for i in range(100)), request_id="long"))
        frames = []
        with pytest.raises(ConnectionClosed) as info:
            while True:
                frames.append(await recv_frame(ws))
    elapsed = time.monotonic() - opened
    warnings = [f for f in frames if f.get("type") == "session.expiring"]
    assert len(warnings) == 1
    assert warnings[0]["request_id"] is None and warnings[0]["close_in_seconds"] == 0.4
    assert frames[-1]["type"] == "response.done" and frames[-1]["status"] == "cancelled"
    assert info.value.rcvd.code == 1000 and info.value.rcvd.reason == "session expired"
    assert 0.6 <= elapsed < 4


# --- max tokens cap ---------------------------------------------------------------------


async def test_max_tokens_above_the_cap_is_refused_and_the_default_is_cut_at_the_cap(
    server_factory,
):
    config = ServerConfig(max_tokens_cap=3, max_tokens_policy="error", log_level="warning")
    server = server_factory(config)
    async with connect(server.ws_url) as ws:
        await ws.send(chat(TEN_WORDS, request_id="asks", max_tokens=5))
        refused = await collect_until_terminal(ws)
        await ws.send(chat(TEN_WORDS, request_id="fits", max_completion_tokens=3))
        fits = await collect_until_terminal(ws)
        await ws.send(chat(TEN_WORDS, request_id="default"))
        default = await collect_until_terminal(ws)
    error = refused[0]["error"]
    assert error["code"] == "max_tokens_exceeded" and error["param"] == "max_tokens"
    assert "at most 3" in error["message"]
    assert fits[-1]["finish_reason"] == "length" and text_of(fits) == "one two three"
    assert default[-1]["finish_reason"] == "length"
    assert default[-1]["usage"]["completion_tokens"] == 3


def test_max_tokens_cap_on_http_is_a_400_under_the_error_policy(server_factory):
    config = ServerConfig(max_tokens_cap=3, max_tokens_policy="error", log_level="warning")
    server = server_factory(config)
    body = {"model": "echo", "messages": [{"role": "user", "content": TEN_WORDS}]}
    with httpx.Client(base_url=server.http_url, timeout=10) as client:
        response = client.post("/v1/chat/completions", json={**body, "max_tokens": 4})
        assert response.status_code == 400
        assert response.json()["error"]["code"] == "max_tokens_exceeded"
        capped = client.post("/v1/chat/completions", json=body).json()
    assert capped["choices"][0]["finish_reason"] == "length"
    assert capped["usage"]["completion_tokens"] == 3


async def test_the_context_window_still_bounds_max_tokens(server_factory):
    server = server_factory(ServerConfig(max_tokens_policy="error", log_level="warning"))
    async with connect(server.ws_url) as ws:
        await ws.send(chat("hi", max_tokens=10**6))
        frames = await collect_until_terminal(ws)
    assert frames[0]["error"]["code"] == "context_length_exceeded"


# --- frame size ---------------------------------------------------------------------


async def test_a_frame_at_the_limit_is_fine_and_one_byte_more_closes_1009(server_factory):
    server = server_factory(ServerConfig(max_frame_bytes=512, log_level="warning"))
    async with connect(server.ws_url, max_size=None) as ws:
        frame = chat("x")[:-1] + ', "user": "'
        padded = frame + "u" * (512 - len(frame) - 2) + '"}'
        assert len(padded.encode()) == 512
        await ws.send(padded)
        assert text_of(await collect_until_terminal(ws)) == "x"
        await ws.send(padded[:-2] + 'u"}')
        closed = await _closed(ws)
    assert closed.rcvd.code == 1009
