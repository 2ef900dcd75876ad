"""`python -m bench.event_path`: the Realtime event dialect's cost per chunk, beside chat frames.

The same harness as `bench.chunk_path` (one session in one process, a fake socket
that only counts, a fake pipeline replaying prebuilt chat chunks), run twice side
by side on the same chunks: once with the chat-frame dialect, once with the
Realtime event dialect, whose answers are rendered as `response.output_text.delta`
events (plus the item and part events around them) instead of chunks with a
`request_id`. The ratio is the number to watch: it is what a client pays for
speaking OpenAI's Realtime protocol instead of the chat frames, for the session
path alone.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import statistics
import time
from typing import Any

import orjson

from bench.chunk_path import FakePipeline
from bench.chunk_path import FakeSocket as ChatSocket
from realtime.config import ServerConfig
from realtime.consumer_settings import socket_settings
from realtime.dialects.chat.dialect import ChatFrameDialect
from realtime.dialects.realtime_events.dialect import RealtimeEventDialect
from realtime.observability.metrics import Metrics
from realtime.ws.session import RealtimeSession

ITEM = orjson.dumps(
    {
        "type": "conversation.item.create",
        "item": {"type": "message", "role": "user",
                 "content": [{"type": "input_text", "text": "hi"}]},
    }
).decode()  # fmt: skip
#: Out of band, so each answer's items stay out of the conversation (it would fill up).
RESPONSE = orjson.dumps({"type": "response.create", "response": {"conversation": "none"}}).decode()


class EventSocket:
    """Sends one user item, then per answer a `response.create`, waiting for its
    `response.done`; then closes (the events have no `session.close`)."""

    def __init__(self, answers: int):
        self.scope: dict[str, Any] = {"type": "websocket", "extensions": {}}
        self.answers = answers
        self.sent = 0
        self.terminals = 0
        self._item_sent = False
        self._turn = asyncio.Event()
        self._turn.set()
        self.closed: tuple[int, str] | None = None

    async def receive(self) -> dict[str, Any]:
        if not self._item_sent:
            self._item_sent = True
            return {"type": "websocket.receive", "text": ITEM}
        await self._turn.wait()
        if self.answers == 0:
            return {"type": "websocket.disconnect", "code": 1000}
        self._turn.clear()
        self.answers -= 1
        return {"type": "websocket.receive", "text": RESPONSE}

    async def send(self, message: dict[str, Any]) -> None:
        self.sent += 1
        if '"response.done"' in message["text"]:
            self.terminals += 1
            self._turn.set()

    async def close(self, code: int = 1000, reason: str | None = None) -> None:
        self.closed = (code, reason or "")


async def _one_run(events: bool, chunks: int, answers: int) -> float:
    socket: Any = EventSocket(answers) if events else ChatSocket(answers)
    pipeline: Any = FakePipeline(chunks, loop_pass=False)
    session = RealtimeSession(
        socket,
        pipeline,
        socket_settings(ServerConfig()),
        metrics=Metrics(),
        conn_id="bench",
        dialect=(
            RealtimeEventDialect.factory(pipeline, "echo")
            if events
            else ChatFrameDialect.factory(pipeline)
        ),
    )
    started = time.perf_counter()
    await session.run()
    elapsed = time.perf_counter() - started
    assert socket.terminals == answers, (socket.terminals, answers)
    return elapsed


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m bench.event_path",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--chunks", type=int, default=2000, help="chunks per answer")
    parser.add_argument("--answers", type=int, default=20, help="answers per run")
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--quick", action="store_true", help="tiny sizes: proves it runs")
    args = parser.parse_args(argv)
    if args.quick:
        args.chunks, args.answers, args.repeats = 200, 3, 2
    logging.getLogger("realtime").setLevel(logging.WARNING)
    try:
        import uvloop

        uvloop.install()
    except ImportError:  # the server runs on uvloop; without it the numbers are only relative
        pass
    per_chunk: dict[str, list[float]] = {"chat frames": [], "realtime events": []}
    for events in (False, True):
        asyncio.run(_one_run(events, args.chunks, 1))  # warm-up
    for _ in range(args.repeats):  # interleaved, so drifting load hits both alike
        for name, events in (("chat frames", False), ("realtime events", True)):
            seconds = asyncio.run(_one_run(events, args.chunks, args.answers))
            per_chunk[name].append(seconds / (args.answers * args.chunks) * 1e9)
    medians = {name: statistics.median(values) for name, values in per_chunk.items()}
    for name, values in per_chunk.items():
        print(
            f"{name:16} {medians[name]:8.0f} ns per chunk (median of {args.repeats};"
            f" spread {min(values):.0f}-{max(values):.0f} ns)"
        )
    ratio = medians["realtime events"] / medians["chat frames"]
    print(f"events / chat frames: {ratio:.2f}x ({args.answers} answers x {args.chunks} chunks)")


if __name__ == "__main__":
    main()
