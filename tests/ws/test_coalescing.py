"""A client that falls behind gets fewer, larger chunks with exactly the same text."""

from __future__ import annotations

import socket
import time

import pytest
from websockets.asyncio.client import connect

from realtime.config import ServerConfig
from realtime.engine.echo import EchoTokenizer
from tests.conftest import wait_until
from tests.ws.wsclient import chat, recv_frame

pytestmark = pytest.mark.anyio

# A long answer with logprobs: folded chunks must carry every token's logprob, in order.
ANSWER = " ".join(f"word{i}" for i in range(3000))


async def test_chunks_held_for_a_slow_reader_fold_without_changing_text_or_usage(server_factory):
    server = server_factory(ServerConfig(log_level="warning"), socket_buffer_bytes=32 * 1024)
    tokens = len(EchoTokenizer().encode(ANSWER))
    sock = socket.create_connection(("127.0.0.1", server.port))
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 32 * 1024)
    # max_queue=1: the client library stops reading TCP while we do not call recv().
    async with connect(server.ws_url, sock=sock, max_queue=1, ping_interval=None) as ws:
        await ws.send(chat(ANSWER, "slow", logprobs=True, stream_options={"include_usage": True}))
        wait_until(lambda: len(server.sessions()) == 1)
        session = server.sessions()[0]
        stats = server.engine.stats

        def generation_paused() -> None:
            previous = -1
            for _ in range(200):
                time.sleep(0.05)  # blocks this loop: the client reads nothing meanwhile
                if stats.tokens_generated == previous:
                    return
                previous = stats.tokens_generated
            raise AssertionError("generation never paused for a full socket")

        # Not reading: the socket backs up, and the request goes on producing into a held
        # chunk that the following chunks fold into, until `--outbound-queue` chunks'
        # worth wait; then generation pauses.
        generation_paused()
        assert stats.tokens_generated < tokens
        assert session.folded_chunks > 0
        assert session.outbound_frames < session.folded_chunks

        text, logprobs, chunks, usage = "", [], 0, None
        while True:
            frame = await recv_frame(ws)
            if frame.get("type") == "response.done":
                break
            if frame["choices"]:
                chunks += 1
                choice = frame["choices"][0]
                text += choice["delta"].get("content") or ""
                logprobs += (choice["logprobs"] or {}).get("content") or []
            else:
                usage = frame["usage"]
    assert frame["status"] == "completed"
    assert text == ANSWER
    assert len(logprobs) == tokens
    assert "".join(entry["token"] for entry in logprobs) == ANSWER
    assert usage is not None and usage["completion_tokens"] == tokens
    assert session.folded_chunks > 0
    assert chunks < tokens + 1  # + 1: the finish chunk; folding sent fewer frames
    assert chunks == tokens + 1 - session.folded_chunks
