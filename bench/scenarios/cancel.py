"""Cancel latency: from the client's close (or `response.cancel`) to the engine stopping.

Runs the server in-process (`bench.inproc`, the real app and server class, with
an observed echo engine and a tap on the socket reads) because the moments that
matter are inside the server: when the close / cancel was READ by the app and
when the engine's generator ENDED, with the engine's step counter at both. The
client (in the main thread, same clock) streams a long answer, and after a few
frames either closes the socket (close handshake) or sends `response.cancel`.

Per sample:

* client -> read: from the client's action to the app reading it (transport and
  uvicorn, including frames still queued ahead of it);
* read -> stop: from that read to the engine's generator having finished;
* steps after read: engine steps taken between the read and the stop - the goal
  is at most one;
* decode step: the engine's mean step time in that sample, the yardstick.

Two engine speeds: zero delay (steps as fast as the loop allows, the hardest
case for "within one step") and a 20 ms step (a real model's decode pace).
"""

from __future__ import annotations

import asyncio
import queue
import time
from dataclasses import asdict, dataclass

from bench.client_loop import run as run_client
from bench.context import RunContext, rotated
from bench.inproc import InProcessServer, Mark, ObservedEcho
from bench.payloads import WS_PATH, cancel_frame, ws_request
from bench.results import Chart, Goal, ScenarioResult, Series, percentile
from bench.wire import WsClient, is_terminal

NAME = "cancel"
TITLE = "Cancel latency (client close / response.cancel to engine stop)"
SUMMARY = (
    "Time and engine steps from a client closing its socket, or sending `response.cancel`, to "
    "the engine's generator stopping; measured inside an in-process server (see notes)."
)

CLOSE, CANCEL = "close", "response.cancel"


@dataclass(frozen=True)
class Params:
    samples: int
    step_delays: tuple[float, ...]
    warm_frames: int
    answer_tokens: int

    @classmethod
    def for_mode(cls, quick: bool) -> Params:
        # The answer must still be streaming when the cancel arrives. The client shares
        # the server's process (and GIL), so it can lag the zero-delay engine by tens of
        # ms; at ~55k tokens/s a 2000-token answer sometimes finished first.
        if quick:
            return cls(samples=3, step_delays=(0.0, 0.02), warm_frames=5, answer_tokens=16000)
        return cls(samples=25, step_delays=(0.0, 0.02), warm_frames=20, answer_tokens=8000)


def label(action: str, delay: float) -> str:
    return f"{action}, {'zero-delay' if not delay else f'{delay * 1000:.0f} ms'} step"


@dataclass
class Sample:
    to_read: float
    read_to_stop: float
    to_stop: float
    steps_after_read: int
    step: float


async def _mark(marks: queue.Queue[Mark], client_port: int | None = None) -> Mark:
    """The next mark the server thread recorded (for `client_port`, if given)."""
    while True:
        mark = await asyncio.to_thread(marks.get, True, 10)
        if client_port is None or mark.client_port == client_port:
            return mark


async def _sample(server: InProcessServer, action: str, p: Params) -> Sample:
    server.clear()
    warm = asyncio.get_running_loop().create_future()
    ended = asyncio.get_running_loop().create_future()

    def on_frame(payload: bytes, _now: float) -> None:
        if client.frames >= p.warm_frames and not warm.done():
            warm.set_result(None)
        if is_terminal(payload) and not ended.done():
            ended.set_result(payload)

    client = await WsClient.connect("127.0.0.1", server.port, WS_PATH, on_frame)
    assert client.transport is not None
    port = int(client.transport.get_extra_info("sockname")[1])
    client.send_text(ws_request(p.answer_tokens, "c"))
    await asyncio.wait_for(warm, 10)
    acted = time.perf_counter()
    if action == CLOSE:
        await client.close()
    else:
        client.send_text(cancel_frame("c"))
        done = await asyncio.wait_for(ended, 10)
        if b'"cancelled"' not in done:
            raise RuntimeError(f"cancel not confirmed: {done[:200]!r}")
        await client.close()
    start, read, stop = (
        await _mark(server.engine.starts),
        await _mark(server.tap.reads, port),
        await _mark(server.engine.stops),
    )
    steps = stop.steps - start.steps
    return Sample(
        to_read=read.at - acted,
        read_to_stop=stop.at - read.at,
        to_stop=stop.at - acted,
        steps_after_read=stop.steps - read.steps,
        step=(stop.at - start.at) / max(1, steps),
    )


def run(ctx: RunContext) -> ScenarioResult:
    p = Params.for_mode(ctx.quick)
    result = ScenarioResult(NAME, TITLE, SUMMARY, asdict(p))
    variants = [(action, delay) for delay in p.step_delays for action in (CLOSE, CANCEL)]
    engine = ObservedEcho()
    with InProcessServer(engine) as server:
        for repeat in range(ctx.repeats):
            for action, delay in rotated(variants, repeat):
                engine.delay = delay
                samples = [run_client(_sample(server, action, p)) for _ in range(p.samples)]
                name = label(action, delay)
                _record(result, name, samples)
                ctx.log(
                    NAME,
                    f"run {repeat + 1}/{ctx.repeats} {name}: action->stop "
                    f"{result.metric(name, 'client action -> engine stop', 'ms').runs[-1]:.2f} ms,"
                    f" max steps after read {max(s.steps_after_read for s in samples)}",
                )
    for delay in p.step_delays:
        worst = max(
            result.metric(label(a, delay), "steps after read (max)", "steps").high
            for a in (CLOSE, CANCEL)
        )
        result.goals.append(
            Goal.judge(
                f"engine stops within one decode step of the close being read "
                f"({'zero-delay' if not delay else f'{delay * 1000:.0f} ms'} steps)",
                "<= 1 step",
                worst,
                "steps (worst sample)",
                worst <= 1,
                note="close and response.cancel, all samples",
            )
        )
    result.notes.append(
        "Measured in-process: the real app (`build_app`) and server class (`RealtimeServer`) in a "
        "thread, an echo engine subclass recording when generation stops, and an ASGI wrapper "
        "recording when the app read the close / cancel. Nothing in realtime/ is changed; the "
        "client shares the process (and its GIL), so absolute times are slightly pessimistic."
    )
    result.charts.append(
        Chart(
            "time to engine stop",
            "ms (log scale)",
            "bars",
            [
                Series(
                    metric_name,
                    [
                        (label(a, d), m.median, m.low, m.high)
                        for a, d in variants
                        for m in [result.metric(label(a, d), metric_name, "ms")]
                    ],
                )
                for metric_name in (
                    "client action -> engine stop",
                    "read -> engine stop",
                    "decode step",
                )
            ],
            logy=True,
        )
    )
    steps = "steps after read (max)"
    result.charts.append(
        Chart(
            "engine steps after the read (worst sample per run)",
            "steps",
            "bars",
            [
                Series(
                    steps,
                    [
                        (label(a, d), m.median, m.low, m.high)
                        for a, d in variants
                        for m in [result.metric(label(a, d), steps, "steps")]
                    ],
                )
            ],
        )
    )
    return result


def _record(result: ScenarioResult, name: str, samples: list[Sample]) -> None:
    def median(values: list[float]) -> float:
        return percentile(values, 50)

    result.metric(name, "client action -> engine stop", "ms").runs.append(
        median([s.to_stop * 1000 for s in samples])
    )
    result.metric(name, "client action -> read", "ms").runs.append(
        median([s.to_read * 1000 for s in samples])
    )
    result.metric(name, "read -> engine stop", "ms").runs.append(
        median([s.read_to_stop * 1000 for s in samples])
    )
    result.metric(name, "steps after read (max)", "steps").runs.append(
        float(max(s.steps_after_read for s in samples))
    )
    result.metric(name, "decode step", "ms").runs.append(median([s.step * 1000 for s in samples]))
