"""Soak: steady mixed load for minutes; RSS slope, one terminal frame per request, intact answers.

Why: per-request bookkeeping that is never removed (a map keyed by request id,
a label set that grows) costs nothing per request and everything per day. It
shows only as a slow, linear rise of the server's memory under steady load that
stays when the load stops, so the scenario runs long, samples the server's RSS
the whole time and fits a line through the steady part. The same load checks
the protocol's promises on every request: exactly one terminal frame (the cancel
race made some requests end with none), and every completed answer equal to what
the echo model must say (a cancelled one: a prefix of it).

The load, against `python -m realtime serve --engine echo` in its own process:

* `sockets` WebSockets, each keeping 2 to 4 requests in flight (5 to 40 words),
  a tenth of them cancelled 0 to 20 ms after they were sent (a third of those
  within 2 ms: the race), and now and then a socket dropped without a Close
  frame while its requests stream (those requests expect no terminal frame) and
  replaced by a new one;
* `sse_clients` HTTP clients streaming `POST /v1/chat/completions` one after the
  other, a tenth of them hanging up after the first event;
* at the end every socket sends `session.close` and must get Close 1000 once its
  requests are answered; the server's gauges must read zero in flight.
"""

from __future__ import annotations

import asyncio
import random
import time
import urllib.request
from dataclasses import asdict, dataclass, field
from typing import Any

import orjson

from bench.client_loop import run as run_client
from bench.context import RunContext
from bench.payloads import MODEL, SSE_PATH, WS_PATH
from bench.procs import ServerProcess, rss_bytes, running, start_realtime
from bench.results import Chart, Goal, ScenarioResult, Series
from bench.wire import SseClient, WsClient

NAME = "soak"
TITLE = "Soak: memory and protocol integrity under minutes of mixed load"
SUMMARY = (
    "Sockets with several requests in flight, cancels (some within 2 ms), dropped sockets and "
    "SSE clients for minutes against one echo server: the server's RSS slope over the steady "
    "part, terminal frames per request (exactly one) and the integrity of every answer."
)
VARIANT = "realtime"
MIB = 1024 * 1024
#: RSS may rise at most this much per minute over the steady part (the bug was 1.9).
SLOPE_GOAL = 0.25


@dataclass(frozen=True)
class Params:
    seconds: float
    sockets: int
    sse_clients: int
    echo_delay: float
    cancel_ratio: float
    #: Chance, per request started, that the socket is dropped while it streams.
    drop_ratio: float
    sample_every: float
    #: The first part of the run, left out of the slope (allocator and caches warming up).
    warmup_fraction: float
    #: Quiet time after the load before the idle RSS is read.
    idle_seconds: float

    @classmethod
    def for_mode(cls, quick: bool) -> Params:
        if quick:
            return cls(
                seconds=2.5,
                sockets=6,
                sse_clients=1,
                echo_delay=0.01,
                cancel_ratio=0.1,
                drop_ratio=0.02,
                sample_every=0.25,
                warmup_fraction=0.25,
                idle_seconds=0.5,
            )
        return cls(
            seconds=300.0,
            sockets=50,
            sse_clients=4,
            echo_delay=0.03,
            cancel_ratio=0.1,
            drop_ratio=0.01,
            sample_every=5.0,
            warmup_fraction=0.2,
            idle_seconds=15.0,
        )


@dataclass
class Tally:
    """What every client saw, summed over the run."""

    requests: int = 0
    completed: int = 0
    cancelled: int = 0
    errors: int = 0
    dropped: int = 0
    sse_streams: int = 0
    sse_hangups: int = 0
    #: Requests with no terminal frame or more than one, or frames after the terminal one.
    terminal_violations: int = 0
    #: Answers whose text is not what the echo model must say (or a prefix, if cancelled).
    corrupt: int = 0
    #: Sockets whose `session.close` at the end did not end in Close 1000.
    bad_closes: int = 0
    examples: list[str] = field(default_factory=list)

    def problem(self, what: str) -> None:
        if len(self.examples) < 10:
            self.examples.append(what)


def _text(rng: random.Random) -> str:
    return " ".join(f"w{rng.randrange(100000)}" for _ in range(rng.randint(5, 40)))


def _ws_body(text: str, request_id: str) -> bytes:
    messages = [{"role": "user", "content": text}]
    return orjson.dumps({"model": MODEL, "request_id": request_id, "messages": messages})


@dataclass
class _Request:
    text: str
    parts: list[str] = field(default_factory=list)
    terminal: dict[str, Any] | None = None


class _Socket:
    """One WebSocket of the fleet: keeps requests in flight, checks every frame it gets."""

    def __init__(self, port: int, tally: Tally, rng: random.Random, p: Params, name: str):
        self.port, self.tally, self.rng, self.p, self.name = port, tally, rng, p, name
        self.open: dict[str, _Request] = {}
        self.ended: set[str] = set()
        self.client: WsClient | None = None
        self.changed = asyncio.Event()
        self.serial = 0

    def on_frame(self, payload: bytes, _now: float) -> None:
        frame = orjson.loads(payload)
        request_id = frame.get("request_id")
        if request_id is None:
            self.tally.problem(f"{self.name}: frame without request_id: {payload[:120]!r}")
            return
        request = self.open.get(request_id)
        if request is None:
            self.tally.terminal_violations += 1
            self.tally.problem(f"{self.name}: frame after the end of {request_id}")
            return
        kind = frame.get("type")
        if kind in ("response.done", "error"):
            request.terminal = frame
            del self.open[request_id]
            self.ended.add(request_id)
            self._judge(request_id, request)
            self.changed.set()
            return
        for choice in frame.get("choices") or ():
            content = (choice.get("delta") or {}).get("content")
            if content:
                request.parts.append(content)

    def _judge(self, request_id: str, request: _Request) -> None:
        terminal = request.terminal or {}
        text = "".join(request.parts)
        if terminal.get("type") == "error":
            self.tally.errors += 1
            self.tally.problem(f"{self.name}: error for {request_id}: {terminal.get('error')}")
        elif terminal.get("status") == "completed":
            self.tally.completed += 1
            if text != request.text:
                self.tally.corrupt += 1
                self.tally.problem(f"{self.name}: {request_id} answered {text[:60]!r}")
        else:
            self.tally.cancelled += 1
            if not request.text.startswith(text):
                self.tally.corrupt += 1
                self.tally.problem(f"{self.name}: cancelled {request_id} had {text[:60]!r}")

    def _send(self) -> None:
        assert self.client is not None
        self.serial += 1
        request_id = f"{self.name}-{self.serial}"
        text = _text(self.rng)
        self.open[request_id] = _Request(text)
        self.tally.requests += 1
        self.client.send_text(_ws_body(text, request_id))
        if self.rng.random() < self.p.cancel_ratio:
            delay = (
                self.rng.uniform(0, 0.002)
                if self.rng.random() < 0.33
                else self.rng.uniform(0, 0.02)
            )
            cancel = orjson.dumps({"type": "response.cancel", "request_id": request_id})
            client = self.client
            asyncio.get_running_loop().call_later(delay, client.send_text, cancel)

    async def run(self, stop_at: float) -> None:
        while time.monotonic() < stop_at:
            self.client = await WsClient.connect("127.0.0.1", self.port, WS_PATH, self.on_frame)
            target = self.rng.randint(2, 4)
            dropped = False
            while time.monotonic() < stop_at:
                while len(self.open) < target:
                    self._send()
                    if self.rng.random() < self.p.drop_ratio:
                        dropped = True
                        break
                if dropped:
                    break
                self.changed.clear()
                try:
                    await asyncio.wait_for(self.changed.wait(), 1.0)
                except asyncio.TimeoutError:
                    pass
            if dropped:
                await asyncio.sleep(self.rng.uniform(0, 0.05))  # let some chunks arrive
                self.client.abort()
                self.tally.dropped += len(self.open)
                self.open.clear()
                continue
            await self._close()

    async def _close(self) -> None:
        """`session.close`: every request still open must end, then Close 1000."""
        assert self.client is not None
        self.client.send_text(orjson.dumps({"type": "session.close"}))
        try:
            await asyncio.wait_for(asyncio.shield(self.client.closed), 30)
        except asyncio.TimeoutError:
            self.client.abort()
        if self.client.close_code != 1000:
            self.tally.bad_closes += 1
            self.tally.problem(f"{self.name}: session.close ended with {self.client.close_code}")
        if self.open:
            self.tally.terminal_violations += len(self.open)
            self.tally.problem(f"{self.name}: no terminal frame for {sorted(self.open)[:5]}")
            self.open.clear()


async def _sse_stream(client: SseClient, text: str, hang_up: bool) -> tuple[str, bool]:
    """One streamed chat completion: (the text received, whether `[DONE]` came)."""
    body = orjson.dumps(
        {"model": MODEL, "stream": True, "messages": [{"role": "user", "content": text}]}
    )
    parts: list[str] = []
    done = False

    def on_event(data: bytes, _now: float) -> None:
        nonlocal done
        if data == b"[DONE]":
            done = True
            return
        for choice in orjson.loads(data).get("choices") or ():
            content = (choice.get("delta") or {}).get("content")
            if content:
                parts.append(content)
        if hang_up and client.transport is not None:
            client.transport.abort()  # a client that goes away mid-answer

    await client.post_stream(SSE_PATH, body, on_event, timeout=60)
    return "".join(parts), done


async def _sse_client(port: int, tally: Tally, rng: random.Random, stop_at: float) -> None:
    client = await SseClient.connect("127.0.0.1", port)
    while time.monotonic() < stop_at:
        text = _text(rng)
        hang_up = rng.random() < 0.1
        tally.sse_streams += 1
        try:
            received, done = await _sse_stream(client, text, hang_up)
        except (ConnectionError, OSError):
            if not hang_up:
                raise
            tally.sse_hangups += 1
            client = await SseClient.connect("127.0.0.1", port)
            continue
        if not done or received != text:
            tally.corrupt += 1
            tally.problem(f"sse answer {received[:60]!r} for {text[:60]!r}")
    client.close()


async def _sample_rss(pid: int, every: float, samples: list[tuple[float, float]]) -> None:
    start = time.monotonic()
    while True:
        samples.append((time.monotonic() - start, rss_bytes(pid) / MIB))
        await asyncio.sleep(every)


Samples = list[tuple[float, float]]


async def _load(server: ServerProcess, p: Params, seed: int) -> tuple[Tally, Samples]:
    tally = Tally()
    rng = random.Random(seed)
    samples: list[tuple[float, float]] = []
    sampler = asyncio.create_task(_sample_rss(server.pid, p.sample_every, samples))
    stop_at = time.monotonic() + p.seconds
    sockets = [
        _Socket(server.port, tally, random.Random(rng.random()), p, f"s{i}")
        for i in range(p.sockets)
    ]
    await asyncio.gather(
        *(s.run(stop_at) for s in sockets),
        *(
            _sse_client(server.port, tally, random.Random(rng.random()), stop_at)
            for _ in range(p.sse_clients)
        ),
    )
    sampler.cancel()
    return tally, samples


def slope_per_minute(samples: list[tuple[float, float]]) -> float:
    """Least-squares slope of (seconds, MiB), in MiB per minute; NaN with under 2 points."""
    if len(samples) < 2:
        return float("nan")
    n = len(samples)
    mean_t = sum(t for t, _ in samples) / n
    mean_m = sum(m for _, m in samples) / n
    spread = sum((t - mean_t) ** 2 for t, _ in samples)
    if spread == 0:
        return float("nan")
    return 60 * sum((t - mean_t) * (m - mean_m) for t, m in samples) / spread


def _gauges(port: int) -> dict[str, float]:
    """The server's own view after the run: requests in flight, open sockets."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        text = response.read().decode()
    wanted = (
        "realtime_requests_in_flight",
        "realtime_ws_connections_open",
        "realtime_state_violations_total",
    )
    values: dict[str, float] = {}
    for line in text.splitlines():
        if line.startswith(wanted):
            name, _, value = line.rpartition(" ")
            values[name] = float(value)
    return values


def run(ctx: RunContext) -> ScenarioResult:
    p = Params.for_mode(ctx.quick)
    result = ScenarioResult(NAME, TITLE, SUMMARY, asdict(p))
    curves: list[Series] = []
    for repeat in range(ctx.repeats):
        with running(start_realtime(ctx.scratch, echo_delay=p.echo_delay)) as server:
            rss_before = server.rss() / MIB
            tally, samples = run_client(_load(server, p, seed=repeat))
            time.sleep(p.idle_seconds)
            rss_idle = server.rss() / MIB
            gauges = _gauges(server.port)
            if not server.alive():
                raise RuntimeError(f"the server died: {server.log_tail()}")
        steady = [s for s in samples if s[0] >= p.seconds * p.warmup_fraction]
        slope = slope_per_minute(steady)
        leftovers = sum(v for k, v in gauges.items() if "in_flight" in k or "open" in k)
        _record(result, p, tally, steady, slope, rss_before, rss_idle, leftovers)
        curves.append(Series(f"run {repeat + 1}", [(t, m, m, m) for t, m in samples]))
        result.detail.setdefault("runs", []).append(
            {"tally": asdict(tally), "gauges": gauges, "rss_samples": samples}
        )
        ctx.log(
            NAME,
            f"run {repeat + 1}/{ctx.repeats}: {tally.requests} socket requests "
            f"({tally.requests / p.seconds:.0f}/s), {tally.sse_streams} SSE, slope "
            f"{slope:.3f} MiB/min, idle {rss_idle:.1f} MiB, violations "
            f"{tally.terminal_violations}, corrupt {tally.corrupt}",
        )
    _judge(result, p)
    result.charts.append(
        Chart("server RSS during the load", "MiB", "lines", curves, xlabel="seconds")
    )
    result.notes.append(
        "RSS is sampled every "
        f"{p.sample_every:g} s; the slope is a least-squares line over the run after its first "
        f"{p.warmup_fraction:.0%}. The quick mode is too short to judge memory: its slope goal is "
        "n/a. Terminal frames and answer integrity are checked on every request in both modes."
    )
    return result


def _record(
    result: ScenarioResult,
    p: Params,
    tally: Tally,
    steady: list[tuple[float, float]],
    slope: float,
    rss_before: float,
    rss_idle: float,
    leftovers: float,
) -> None:
    figures: list[tuple[str, str, float]] = [
        ("socket requests", "requests", tally.requests),
        ("socket requests per second", "req/s", tally.requests / p.seconds),
        ("completed", "requests", tally.completed),
        ("cancelled", "requests", tally.cancelled),
        ("dropped with their socket", "requests", tally.dropped),
        ("SSE streams", "streams", tally.sse_streams),
        ("requests without exactly one terminal frame", "requests", tally.terminal_violations),
        ("corrupt answers", "answers", tally.corrupt),
        ("error frames", "requests", tally.errors),
        ("session.close not ending in 1000", "sockets", tally.bad_closes),
        ("in flight or open after the run", "count", leftovers),
        ("RSS before the load", "MiB", rss_before),
        ("RSS at the start of the steady part", "MiB", steady[0][1] if steady else float("nan")),
        ("RSS at the end of the load", "MiB", steady[-1][1] if steady else float("nan")),
        ("RSS idle after the load", "MiB", rss_idle),
        ("RSS slope over the steady part", "MiB/min", slope),
    ]
    for name, unit, value in figures:
        result.metric(VARIANT, name, unit).runs.append(float(value))
    if tally.examples:
        result.notes.append("problems seen: " + "; ".join(tally.examples))


def _judge(result: ScenarioResult, p: Params) -> None:
    def worst(name: str) -> float:
        metric = result.get(VARIANT, name)
        return metric.high if metric is not None else float("nan")

    violations = worst("requests without exactly one terminal frame")
    result.goals.append(
        Goal.judge(
            "every request gets exactly one terminal frame",
            "0 requests",
            violations,
            "requests (worst run)",
            violations == 0,
            note="dropped sockets' requests excepted; session.close then completes",
        )
    )
    corrupt = worst("corrupt answers") + worst("error frames")
    result.goals.append(
        Goal.judge(
            "every answer intact (a cancelled one: a prefix)",
            "0 answers",
            corrupt,
            "answers (worst run)",
            corrupt == 0,
        )
    )
    closes = worst("session.close not ending in 1000") + worst("in flight or open after the run")
    result.goals.append(
        Goal.judge(
            "session.close completes; nothing left in flight",
            "0",
            closes,
            "count (worst run)",
            closes == 0,
        )
    )
    slope = worst("RSS slope over the steady part")
    result.goals.append(
        Goal.judge(
            "RSS flat under steady load",
            f"<= {SLOPE_GOAL} MiB/min",
            slope,
            "MiB/min (worst run)",
            slope <= SLOPE_GOAL,
            applicable=not p.seconds < 60,
            note=f"over {p.seconds:g} s, {p.sockets} sockets and {p.sse_clients} SSE clients",
        )
    )
