"""Cancel: engine steps between the server reading a client's close and the engine dropping the job.

Both moments are inside the server, so this part serves the same engine in this
process (`realtime.app.build_app` under `RealtimeServer`, as `realtime serve` runs
it) behind an ASGI tap that notes the engine's step count when the app reads the
client's close or `response.cancel` (the same idea as `bench.inproc`). The client
streams a long answer over the socket and, after a few chunks, either closes the
socket or sends `response.cancel`. The engine core counts its steps and the jobs
it cancelled; once the cancel is counted the engine is idle, so its step count
then, minus the count at the read, is the work done after the client was heard.
"""

from __future__ import annotations

import asyncio
import json
import queue
import statistics
import time
from dataclasses import asdict, dataclass
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send
from websockets.asyncio.client import connect

from realtime.app import build_app
from realtime.config import ServerConfig
from realtime.engine.exllamav2.engine import ExLlamaV2Engine
from realtime.server import RealtimeServer, ServerThread, loopback_socket, uvicorn_config

CLOSE, CANCEL = "close", "response.cancel"


class StepTap:
    """ASGI wrapper: the engine's step count when the app reads a close or a cancel."""

    def __init__(self, app: ASGIApp, engine: ExLlamaV2Engine):
        self.app, self.engine = app, engine
        self.reads: queue.Queue[tuple[float, int]] = queue.Queue()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "websocket":
            await self.app(scope, receive, send)
            return

        async def tapped() -> Message:
            message = await receive()
            kind = message["type"]
            if kind == "websocket.disconnect" or (
                kind == "websocket.receive" and '"response.cancel"' in (message.get("text") or "")
            ):
                self.reads.put((time.perf_counter(), self.engine.stats.steps))
            return message

        await self.app(scope, tapped, send)


@dataclass
class Sample:
    action: str
    steps_after_read: int
    read_to_stop_ms: float
    chunks_before: int


async def _sample(
    port: int, engine: ExLlamaV2Engine, tap: StepTap, action: str, answer: int
) -> Sample:
    cancelled = engine.stats.jobs_cancelled
    request = {
        "model": engine.info.name,
        "request_id": "long",
        "messages": [{"role": "user", "content": "Tell me everything."}],
        "max_tokens": answer,
        "temperature": 0,
        "ignore_eos": True,
    }
    chunks = 0
    async with connect(f"ws://127.0.0.1:{port}/v1/realtime") as ws:
        await ws.send(json.dumps(request))
        while chunks < 5:
            frame = json.loads(await ws.recv())
            if frame.get("object") == "chat.completion.chunk":
                chunks += 1
            elif frame.get("type") in ("response.done", "error"):
                raise RuntimeError(f"the answer ended before the cancel: {frame}")
        if action == CANCEL:
            await ws.send(json.dumps({"type": "response.cancel", "request_id": "long"}))
            while True:  # until the server confirms (response.done, cancelled)
                frame = json.loads(await ws.recv())
                if frame.get("type") == "response.done":
                    break
    read_at, steps_at_read = await asyncio.to_thread(tap.reads.get, True, 30)
    deadline = time.monotonic() + 30
    while engine.stats.jobs_cancelled == cancelled:
        if time.monotonic() > deadline:
            raise RuntimeError("the engine never cancelled the job")
        await asyncio.sleep(0.001)
    stopped_at = time.perf_counter()
    await asyncio.sleep(0.05)  # idle now: no step may follow; if one did, it is counted
    return Sample(
        action,
        engine.stats.steps - steps_at_read,
        (stopped_at - read_at) * 1000,
        chunks,
    )


def measure(engine: ExLlamaV2Engine, *, samples: int, answer_tokens: int) -> dict[str, Any]:
    """Serve `engine` in this process and cancel `samples` answers each way."""
    config = ServerConfig(host="127.0.0.1", port=0, log_level="warning")
    app = build_app(config, engine)
    settings = uvicorn_config(config, app)
    tap = StepTap(app, engine)
    settings.app = tap
    server = RealtimeServer(settings, app, config.shutdown_grace_seconds)
    runner = ServerThread(server, loopback_socket(), name="gpu-proof-cancel")
    runner.start(120)
    try:
        results: list[Sample] = []
        for action in (CLOSE, CANCEL):
            for _ in range(samples):
                while not tap.reads.empty():
                    tap.reads.get_nowait()
                results.append(
                    asyncio.run(_sample(runner.port, engine, tap, action, answer_tokens))
                )
    finally:
        runner.stop(30)
    steps = [s.steps_after_read for s in results]
    return {
        "samples": [asdict(s) for s in results],
        "steps_after_read_max": max(steps),
        "steps_after_read_median": statistics.median(steps),
        "read_to_stop_ms_median": statistics.median(s.read_to_stop_ms for s in results),
    }
