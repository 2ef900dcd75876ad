"""`python -m bench.chunk_path`: what one socket's session costs per streamed chunk and per request.

A micro-benchmark of the /v1/realtime session alone, in one process, with no
network and no engine: a fake socket whose `send` only counts the message, and a
fake pipeline that replays one-token steps. What is left is the session's own
path for each chunk (the chunk rendered by a real `DeltaGenerator`, the request
id, the latency timer, the outbox, orjson) and for each request (reading,
accepting, ordering, starting, the terminal frame, the metrics and the log line).
It is the number to compare before and after a change to `realtime/ws/`: the full
benchmarks
(`python -m bench --scenarios throughput,latency`) measure the same path
through uvicorn, the pipeline and the echo engine, where it is a fraction of
the whole.

Two runs, each repeated and reported as the median of the repeats:

* per chunk: answers of `--chunks` chunks, back to back on one socket; the time
  per chunk includes each request's own cost spread over its chunks;
* per request: one-chunk answers, back to back; the time per request.

`--loop-pass` makes the fake pipeline pass through the event loop before each
chunk, as the zero-delay echo engine does.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import statistics
import time
from collections.abc import AsyncGenerator
from dataclasses import dataclass
from typing import Any

import orjson

from realtime.config import ServerConfig
from realtime.consumer_settings import socket_settings
from realtime.dialects.chat.dialect import ChatFrameDialect
from realtime.model.generation import FinishReason
from realtime.observability.metrics import Metrics
from realtime.pipeline.events import Finish, Step, Usage
from realtime.ws.session import RealtimeSession

REQUEST = orjson.dumps({"model": "echo", "messages": [{"role": "user", "content": "hi"}]}).decode()
CLOSE = orjson.dumps({"type": "session.close"}).decode()


@dataclass
class _Prepared:
    usage: Usage
    id: str = "chatcmpl-bench"


class FakePipeline:
    """Replays `chunks` one-token steps and a finish for every request; the session's
    renderer turns them into chunks with a real `DeltaGenerator`, as it does for the
    real pipeline's output."""

    model_name = "echo"
    system_fingerprint = "fp_bench"

    def __init__(self, chunks: int, *, loop_pass: bool):
        self.chunks = chunks
        self.loop_pass = loop_pass
        self._step = Step([1], "tok ", None)

    def prepare(self, request: Any, **options: Any) -> _Prepared:
        return _Prepared(Usage(1))

    async def constrain(self, prepared: _Prepared) -> None:
        """No constraint to compile: a request without `response_format` or `tool_choice`."""
        return None

    async def events(self, prepared: _Prepared) -> AsyncGenerator[Step | Finish, None]:
        """The same one-token step each time (nothing is held, so nothing folds)."""
        step, loop_pass = self._step, self.loop_pass
        for _ in range(self.chunks):
            if loop_pass:
                await asyncio.sleep(0)
            yield step
        yield Finish(FinishReason.STOP, prepared.usage)

    def end_session(self, session_id: str) -> None:
        return None


class FakeSocket:
    """Hands the session `answers` request frames, one after each terminal frame, then
    `session.close`; counts what the session sends."""

    def __init__(self, answers: int):
        self.scope: dict[str, Any] = {"type": "websocket", "extensions": {}}
        self.answers = answers
        self.sent = 0
        self.terminals = 0
        self._turn = asyncio.Event()
        self._turn.set()
        self.closed: tuple[int, str] | None = None

    async def receive(self) -> dict[str, Any]:
        if self.answers == 0:
            await self._turn.wait()
            return (
                {"type": "websocket.receive", "text": CLOSE}
                if self.closed is None
                else {"type": "websocket.disconnect", "code": 1000}
            )
        await self._turn.wait()
        self._turn.clear()
        self.answers -= 1
        return {"type": "websocket.receive", "text": REQUEST}

    async def send(self, message: dict[str, Any]) -> None:
        self.sent += 1
        if '"response.done"' in message["text"]:
            self.terminals += 1
            self._turn.set()

    async def close(self, code: int = 1000, reason: str | None = None) -> None:
        self.closed = (code, reason or "")


async def _one_run(chunks: int, answers: int, loop_pass: bool) -> tuple[float, int]:
    socket = FakeSocket(answers)
    pipeline = FakePipeline(chunks, loop_pass=loop_pass)
    session = RealtimeSession(
        socket,  # type: ignore[arg-type]
        pipeline,
        socket_settings(ServerConfig()),
        metrics=Metrics(),
        conn_id="bench",
        dialect=ChatFrameDialect.factory(pipeline),  # type: ignore[arg-type]
    )
    started = time.perf_counter()
    await session.run()
    elapsed = time.perf_counter() - started
    assert socket.terminals == answers, (socket.terminals, answers)
    return elapsed, socket.sent


def measure(chunks: int, answers: int, repeats: int, loop_pass: bool) -> list[float]:
    """Seconds per run, `repeats` runs."""
    return [asyncio.run(_one_run(chunks, answers, loop_pass))[0] for _ in range(repeats)]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m bench.chunk_path",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--chunks", type=int, default=2000, help="chunks per answer (per-chunk run)"
    )
    parser.add_argument("--answers", type=int, default=20, help="answers per per-chunk run")
    parser.add_argument("--requests", type=int, default=2000, help="answers per per-request run")
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--loop-pass", action="store_true", help="one event-loop pass per chunk")
    parser.add_argument("--quick", action="store_true", help="tiny sizes: proves it runs")
    args = parser.parse_args(argv)
    if args.quick:
        args.chunks, args.answers, args.requests, args.repeats = 200, 3, 100, 2
    logging.getLogger("realtime").setLevel(logging.WARNING)
    try:
        import uvloop

        uvloop.install()
    except ImportError:  # the server runs on uvloop; without it the numbers are only relative
        pass
    measure(args.chunks, 1, 1, args.loop_pass)  # warm-up: imports, first allocations
    per_chunk = measure(args.chunks, args.answers, args.repeats, args.loop_pass)
    per_request = measure(0, args.requests, args.repeats, args.loop_pass)
    chunk_ns = statistics.median(per_chunk) / (args.answers * args.chunks) * 1e9
    request_us = statistics.median(per_request) / args.requests * 1e6
    print(
        f"per chunk:   {chunk_ns:8.0f} ns  (median of {args.repeats}; "
        f"{args.answers} answers x {args.chunks} chunks; spread "
        f"{min(per_chunk) / (args.answers * args.chunks) * 1e9:.0f}-"
        f"{max(per_chunk) / (args.answers * args.chunks) * 1e9:.0f} ns)"
    )
    print(
        f"per request: {request_us:8.1f} us  (median of {args.repeats}; "
        f"{args.requests} one-chunk answers; spread "
        f"{min(per_request) / args.requests * 1e6:.1f}-"
        f"{max(per_request) / args.requests * 1e6:.1f} us)"
    )


if __name__ == "__main__":
    main()
