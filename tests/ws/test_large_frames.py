"""A large request frame is prepared off the event loop: the server keeps serving meanwhile.

The proof is structural, not a timing: the test holds the large request's
`prepare()` until `/health` and another socket have been answered. Were
`prepare()` on the event loop, nothing else could be answered while it is held,
and the hold would time out.
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import httpx
import pytest
from websockets.asyncio.client import connect

from realtime.config import ServerConfig
from realtime.pipeline.offload import OFF_LOOP_CHARS
from tests.ws.wsclient import chat, collect_until_terminal, recv_frame, text_of

pytestmark = pytest.mark.anyio

HOLD_SECONDS = 10.0


class HeldPrepare:
    """Wraps the pipeline's `prepare`: records the thread, holds large requests until released."""

    def __init__(self, pipeline: Any):
        self.threads: list[str] = []
        self.release = threading.Event()
        self.entered = threading.Event()
        self.held_too_long = False
        original = pipeline.prepare

        def prepare(request: Any, **options: Any) -> Any:
            self.threads.append(threading.current_thread().name)
            if len(request.conversation[-1].parts[0]) >= OFF_LOOP_CHARS // 2:
                self.entered.set()
                if not self.release.wait(HOLD_SECONDS):
                    self.held_too_long = True
            return original(request, **options)

        pipeline.prepare = prepare


def big_text() -> str:
    return " ".join(f"w{i}" for i in range(OFF_LOOP_CHARS // 4))  # > OFF_LOOP_CHARS characters


async def test_while_a_large_request_is_prepared_health_and_other_sockets_are_served(
    server_factory,
):
    server = server_factory(ServerConfig(log_level="warning"))
    held = HeldPrepare(server.app.state.pipeline)
    text = big_text()
    async with connect(server.ws_url) as big, connect(server.ws_url) as small:
        await big.send(chat(text, request_id="big", max_tokens=3))
        await asyncio.to_thread(held.entered.wait, HOLD_SECONDS)
        async with httpx.AsyncClient(base_url=server.http_url) as http:
            health = await http.get("/health", timeout=HOLD_SECONDS / 2)
        await small.send(chat("meanwhile"))
        neighbour = await asyncio.wait_for(collect_until_terminal(small), HOLD_SECONDS / 2)
        held.release.set()
        answer = await collect_until_terminal(big)
    assert not held.held_too_long
    assert health.status_code == 200
    assert text_of(neighbour) == "meanwhile"
    assert answer[-1]["status"] == "completed" and text_of(answer) == " ".join(text.split()[:3])
    big_thread, small_thread = held.threads
    assert big_thread.startswith("realtime-prepare")
    assert not small_thread.startswith("realtime-prepare"), "small requests stay on the loop"


async def test_a_cancel_while_a_large_request_is_prepared_answers_at_once(server_factory):
    server = server_factory(ServerConfig(log_level="warning"))
    held = HeldPrepare(server.app.state.pipeline)
    async with connect(server.ws_url) as ws:
        await ws.send(chat(big_text(), request_id="big"))
        await asyncio.to_thread(held.entered.wait, HOLD_SECONDS)
        await ws.send('{"type": "response.cancel", "request_id": "big"}')
        done = await asyncio.wait_for(recv_frame(ws), HOLD_SECONDS / 2)
        held.release.set()
        await ws.send(chat("next"))
        after = await collect_until_terminal(ws)
    assert done["type"] == "response.done" and done["request_id"] == "big"
    assert done["status"] == "cancelled"
    assert text_of(after) == "next"
    assert server.engine.stats.requests_started == 1  # the cancelled one never reached it


async def test_a_large_prompt_over_the_context_is_refused_with_its_error(server_factory):
    server = server_factory(ServerConfig(log_level="warning", max_frame_bytes=4 << 20))
    async with connect(server.ws_url, max_size=None) as ws:
        await ws.send(chat("word " * ((3 << 20) // 5), request_id="huge"))
        (error,) = await collect_until_terminal(ws)
        await ws.send(chat("small"))
        after = await collect_until_terminal(ws)
    assert error["type"] == "error" and error["request_id"] == "huge"
    assert error["error"]["code"] == "context_length_exceeded"
    assert text_of(after) == "small"
