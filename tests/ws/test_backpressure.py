"""A client that floods requests and does not read: nothing is lost, nothing grows."""

from __future__ import annotations

import asyncio
import socket

import pytest
from websockets.asyncio.client import connect

from realtime.config import ServerConfig
from tests.conftest import wait_until
from tests.ws.wsclient import chat, recv_frame

pytestmark = pytest.mark.anyio

REQUESTS = 200
# Padding in a system message makes request frames large (the echo model only
# repeats the last user message), so the flood fills socket buffers quickly.
PADDING = "p" * 20_000


async def test_flood_without_reading_backpressures_and_loses_nothing(server_factory):
    config = ServerConfig(log_level="warning")
    server = server_factory(config, socket_buffer_bytes=32 * 1024)
    sock = socket.create_connection(("127.0.0.1", server.port))
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 * 1024)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 64 * 1024)
    answer = " ".join(f"w{i}" for i in range(40))
    # No client keepalive: while this client deliberately does not read, it would
    # not see the server's pongs either.
    async with connect(server.ws_url, sock=sock, max_queue=1, ping_interval=None) as ws:

        async def flood() -> None:
            for i in range(REQUESTS):
                await ws.send(
                    chat(
                        answer,
                        request_id=f"r{i}",
                        messages=[
                            {"role": "system", "content": PADDING},
                            {"role": "user", "content": answer},
                        ],
                    )
                )

        sender = asyncio.create_task(flood())
        wait_until(lambda: len(server.sessions()) == 1)
        session = server.sessions()[0]
        # Wait until everything stands still: the engine no longer generates (its
        # output has nowhere to go) and the server no longer reads requests.
        stats = server.engine.stats
        previous = (-1, -1)
        for _ in range(100):
            await asyncio.sleep(0.1)
            now = (session.accepted, stats.tokens_generated)
            if now == previous:
                break
            previous = now
        stalled_at = session.accepted
        generated = stats.tokens_generated
        await asyncio.sleep(0.3)
        assert session.accepted == stalled_at, "the server kept reading while full"
        assert stats.tokens_generated == generated, "the engine kept generating into a full socket"
        assert not sender.done(), "backpressure never reached the sending client"
        waiting = config.request_queue_size + config.read_ahead_requests
        assert session.max_queue_depth <= waiting
        # queued + read ahead + running + one the dispatcher holds while it waits for a slot
        assert stalled_at <= waiting + config.max_concurrent_per_socket + 1
        assert session.outbound_frames <= config.outbound_queue_frames

        done: dict[str, dict] = {}
        texts: dict[str, list[str]] = {}
        while len(done) < REQUESTS:
            frame = await recv_frame(ws)
            rid = frame["request_id"]
            if frame.get("type") == "response.done":
                assert rid not in done, "two terminal frames for one request"
                done[rid] = frame
            else:
                assert frame.get("type") != "error", frame
                texts.setdefault(rid, []).append(frame["choices"][0]["delta"].get("content") or "")
        await sender
    assert set(done) == {f"r{i}" for i in range(REQUESTS)}
    assert all(d["status"] == "completed" for d in done.values())
    assert all("".join(texts[rid]) == answer for rid in done)
    assert session.max_queue_depth <= config.request_queue_size + config.read_ahead_requests
