"""Stream throughput: how fast one socket streams a long answer, and what each token costs.

One socket, the echo engine with zero delay, answers of `tokens` tokens one
after another. Three variants in the same run, interleaved:

* `realtime ws` - our /v1/realtime, the full pipeline;
* `raw ws` - the bare starlette handler replaying the frames our server sent for
  the same request (`bench.raw_server`): the ceiling of this stack;
* `raw ws, loop pass per frame` - the same handler passing through the event loop
  before each frame, as the zero-delay echo engine does once per token: the
  ceiling for an engine that hands over one token per loop pass. It is not a
  goal's baseline; it splits our distance from `raw ws` into what the engine's
  stepping costs and what the pipeline costs;
* `realtime sse` - our /v1/chat/completions with `stream: true` on one keep-alive
  connection, the same answer as SSE events.

Frames/s counts every frame of an answer (content chunks, the finish chunk, the
terminal `response.done` or `data: [DONE]`). Server CPU per token is the server
process's CPU time over the timed answers divided by the tokens streamed.
Client CPU is reported so a reader can see the client was not the limit.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass

from bench.baseline import capture_frames, start_raw_with
from bench.client_loop import run as run_client
from bench.context import RunContext, rotated
from bench.machine_load import BACKGROUND, other_cores, snapshot
from bench.payloads import RAW_PATH, SSE_PATH, WS_PATH, sse_request, ws_request
from bench.procs import ServerProcess, running, start_realtime
from bench.results import Chart, Goal, ScenarioResult, Series, paired_ratios
from bench.wire import DONE_PREFIX, SseClient, WsClient, is_terminal

NAME = "throughput"
TITLE = "Stream throughput (one socket, zero-delay echo)"
SUMMARY = (
    "One socket streams answers back to back from the zero-delay echo engine; frames/s and "
    "server CPU per token for our WebSocket, the raw starlette baseline sending the same "
    "frame bytes, and our own SSE path."
)

WS, RAW, RAW_STEPPED, SSE = (
    "realtime ws",
    "raw ws",
    "raw ws, loop pass per frame",
    "realtime sse",
)
VARIANTS = (WS, RAW, RAW_STEPPED, SSE)


@dataclass(frozen=True)
class Params:
    tokens: int
    answers: int
    warmup: int

    @classmethod
    def for_mode(cls, quick: bool) -> Params:
        return cls(tokens=50, answers=3, warmup=1) if quick else cls(1000, 40, 5)


@dataclass
class Run:
    frames: int
    seconds: float
    server_cpu: float
    client_cpu: float
    tokens: int
    #: cores used by processes outside the benchmark meanwhile
    background: float = 0.0


async def _timed(
    server: ServerProcess, answers: int, one_answer: Callable[[], Awaitable[None]]
) -> tuple[float, float, float, float]:
    """(wall, server CPU, client CPU, other processes' cores) over `answers` answers."""
    before = snapshot()
    cpu0, client0, t0 = server.cpu(), time.process_time(), time.perf_counter()
    for _ in range(answers):
        await one_answer()
    t1, client1, cpu1 = time.perf_counter(), time.process_time(), server.cpu()
    return t1 - t0, cpu1 - cpu0, client1 - client0, other_cores(before, snapshot())


async def ws_run(server: ServerProcess, path: str, request: str, p: Params) -> Run:
    loop = asyncio.get_running_loop()
    count = 0
    done: asyncio.Future[bytes] = loop.create_future()

    def on_frame(payload: bytes, _now: float) -> None:
        nonlocal count
        count += 1
        if is_terminal(payload) and not done.done():
            done.set_result(payload)

    client = await WsClient.connect("127.0.0.1", server.port, path, on_frame)

    async def one_answer() -> None:
        nonlocal done
        done = loop.create_future()
        client.send_text(request)
        last = await asyncio.wait_for(done, 120)
        if not last.startswith(DONE_PREFIX):
            raise RuntimeError(f"{server.name}: answer failed: {last[:300]!r}")

    try:
        for _ in range(p.warmup):
            await one_answer()
        count = 0
        wall, server_cpu, client_cpu, background = await _timed(server, p.answers, one_answer)
        return Run(count, wall, server_cpu, client_cpu, p.answers * p.tokens, background)
    finally:
        await client.close()


async def sse_run(server: ServerProcess, body: bytes, p: Params) -> Run:
    count = 0

    def on_event(_data: bytes, _now: float) -> None:
        nonlocal count
        count += 1

    client = await SseClient.connect("127.0.0.1", server.port)

    async def one_answer() -> None:
        status = await client.post_stream(SSE_PATH, body, on_event)
        if status != 200:
            raise RuntimeError(f"SSE request answered {status}")

    try:
        for _ in range(p.warmup):
            await one_answer()
        count = 0
        wall, server_cpu, client_cpu, background = await _timed(server, p.answers, one_answer)
        return Run(count, wall, server_cpu, client_cpu, p.answers * p.tokens, background)
    finally:
        client.close()


def run(ctx: RunContext) -> ScenarioResult:
    p = Params.for_mode(ctx.quick)
    result = ScenarioResult(NAME, TITLE, SUMMARY, asdict(p))
    request, body = ws_request(p.tokens), sse_request(p.tokens)
    with running(start_realtime(ctx.scratch)) as ours:
        frames = run_client(capture_frames(ours.port, [request]))
        result.detail["frames_per_answer"] = len(frames[request])
        result.detail["frame_bytes_median"] = sorted(len(f) for f in frames[request])[
            len(frames[request]) // 2
        ]
        raw_server = start_raw_with(ctx.scratch, frames)
        stepped_server = start_raw_with(ctx.scratch, frames, yield_each_frame=True)
        with running(raw_server) as raw, running(stepped_server) as stepped:
            for repeat in range(ctx.repeats):
                for variant in rotated(VARIANTS, repeat):
                    if variant == WS:
                        measured = run_client(ws_run(ours, WS_PATH, request, p))
                    elif variant == RAW:
                        measured = run_client(ws_run(raw, RAW_PATH, request, p))
                    elif variant == RAW_STEPPED:
                        measured = run_client(ws_run(stepped, RAW_PATH, request, p))
                    else:
                        measured = run_client(sse_run(ours, body, p))
                    _record(result, variant, measured)
                    ctx.log(
                        NAME,
                        f"run {repeat + 1}/{ctx.repeats} {variant}: "
                        f"{measured.frames / measured.seconds:,.0f} frames/s",
                    )
    _judge(result)
    return result


def _record(result: ScenarioResult, variant: str, measured: Run) -> None:
    result.metric(variant, "frames/s", "frames/s").runs.append(measured.frames / measured.seconds)
    result.metric(variant, "tokens/s", "tokens/s").runs.append(measured.tokens / measured.seconds)
    result.metric(variant, "server CPU per token", "us").runs.append(
        measured.server_cpu / measured.tokens * 1e6
    )
    seconds = measured.seconds
    result.metric(variant, "server CPU", "cores").runs.append(measured.server_cpu / seconds)
    result.metric(variant, "client CPU", "cores").runs.append(measured.client_cpu / seconds)
    result.metric(variant, BACKGROUND, "cores").runs.append(measured.background)


def _judge(result: ScenarioResult) -> None:
    ws = result.metric(WS, "frames/s", "frames/s").runs
    raw = result.metric(RAW, "frames/s", "frames/s").runs
    sse = result.metric(SSE, "frames/s", "frames/s").runs
    to_raw = result.metric("ratio", "realtime ws / raw ws (frames/s)", "x")
    to_raw.runs = paired_ratios(ws, raw)
    to_sse = result.metric("ratio", "realtime ws / realtime sse (frames/s)", "x")
    to_sse.runs = paired_ratios(ws, sse)
    stepped = result.metric(RAW_STEPPED, "frames/s", "frames/s").runs
    to_stepped = result.metric("ratio", "realtime ws / raw ws, loop pass per frame (frames/s)", "x")
    to_stepped.runs = paired_ratios(ws, stepped)
    cpu = result.metric(WS, "server CPU per token", "us")
    result.goals.append(
        Goal.judge(
            "stream throughput vs raw baseline",
            ">= 0.7",
            to_raw.median,
            "x",
            to_raw.median >= 0.7,
        )
    )
    result.goals.append(
        Goal.judge("server CPU per streamed token", "<= 20 us", cpu.median, "us", cpu.median <= 20)
    )
    result.notes.append(
        f"{result.detail['frames_per_answer']} frames per answer on the socket (content chunks, "
        "the finish chunk, response.done); SSE has the same count with `data: [DONE]` last. "
        f"Median frame: {result.detail['frame_bytes_median']} bytes."
    )
    result.notes.append(
        "Ratios are computed per repeat from the runs of that repeat, then the median."
    )
    result.charts.append(
        Chart(
            "frames/s on one connection",
            "frames/s",
            "bars",
            [_bars(result, "frames/s")],
        )
    )
    result.charts.append(
        Chart(
            "server CPU per token", "us per token", "bars", [_bars(result, "server CPU per token")]
        )
    )


def _bars(result: ScenarioResult, name: str) -> Series:
    points: list[tuple[float | str, float, float, float]] = []
    for variant in VARIANTS:
        metric = result.get(variant, name)
        if metric is not None:
            points.append((variant, metric.median, metric.low, metric.high))
    return Series(name, points)
