"""The `hostile` scenario's engine half: does hostile input slow the engine's decoding?

Issue 28 asks two things of a hostile neighbour: that a neighbour's p99 stays within
2x idle (the other parts of `hostile` measure that), and that the engine's tokens/s
stays at least 0.9x idle. With the engine in a process of its own, the front end's
work on hostile input (reading and decoding a large body, tokenizing it, compiling a
grammar) should no longer take decoding time; this measures whether it does.

One server on the cpu engine (the tiny model, operator defaults: the engine in its own
process). Four keep-alive clients decode 64-token chat answers back to back (greedy,
`ignore_eos`). Each variant runs for a window: the load alone (`engine idle`); with one
client sending large bodies back to back (a chat message of one 8 MiB string, 1 MiB in
quick mode: unlike the `large body` variant's unknown field, refused while it is
decoded, a message reaches the tokenizer and the context check); with two clients
sending schema bombs (`schema_bombs`' enum of 3,000 objects); and with both.

Two tokens/s figures, both against `engine idle`: the load's own (its completion
tokens in the window) and the engine's (`vllm:generation_tokens_total` from the
server's `/metrics`, read before and after the window). The engine figure also
counts the schema bombs' own answers, so it can hold while the load's falls; that is
why both are reported and judged. A `/health` neighbour (its own process) is timed
meanwhile. A large body still in flight when the window closes is waited for outside
it, so it never spills into the next variant's window.
"""

from __future__ import annotations

import asyncio
import math
import time
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import orjson

from bench.client_loop import run as run_client
from bench.context import RunContext, rotated
from bench.machine_load import BACKGROUND, other_cores, snapshot
from bench.neighbour import Neighbour
from bench.procs import running, start_server
from bench.results import Chart, Goal, ScenarioResult, Series, paired_ratios, percentile
from bench.scenarios import schema_bombs
from bench.scenarios.schema_bombs import ENUM, MODEL

IDLE, BODIES = "engine idle", "large bodies"
BOMBS, BOTH = "schema bombs", "bodies and schema bombs"
HOSTILE = (BODIES, BOMBS, BOTH)
VARIANTS = (IDLE, *HOSTILE)
LOAD_CLIENTS = 4
LOAD_TOKENS = 64
BOMB_CLIENTS = 2
#: Goals (issue 28): tokens/s at least this share of idle; neighbour p99 at most BOUND x.
TOKENS_FLOOR = 0.9
BOUND = 2.0
GENERATION_COUNTER = "vllm:generation_tokens_total"
PATH = "/v1/chat/completions"


@dataclass(frozen=True)
class Params:
    #: Seconds each variant's window lasts (the figures come from it).
    seconds: float
    #: Seconds the clients run before the window opens, so the load is steady.
    warmup: float
    #: Bytes of a large body (the hostile scenario's size).
    body_bytes: int
    variants: tuple[str, ...]

    @classmethod
    def for_mode(cls, quick: bool) -> Params:
        if quick:
            return cls(seconds=0.5, warmup=0.2, body_bytes=1 << 20, variants=(IDLE, BOTH))
        # Just under the default --max-body-bytes (8 MiB), so the body is read.
        return cls(seconds=10.0, warmup=1.0, body_bytes=(8 << 20) - 4096, variants=VARIANTS)


# --- pure logic -------------------------------------------------------------------


@dataclass(frozen=True)
class Answer:
    """One load request: when it was written, when its answer was read, its tokens."""

    started: float
    ended: float
    tokens: int


def tokens_in_window(answers: Sequence[Answer], opened: float, closed: float) -> float:
    """The answers' tokens decoded inside [opened, closed], each answer's spread evenly
    over its lifetime (a request straddling an edge counts for its share inside)."""
    total = 0.0
    for a in answers:
        overlap = min(a.ended, closed) - max(a.started, opened)
        if overlap <= 0:
            continue
        lifetime = a.ended - a.started
        total += a.tokens if lifetime <= 0 else a.tokens * min(1.0, overlap / lifetime)
    return total


def counter_total(exposition: str, name: str) -> float:
    """The sum of a Prometheus counter over its label sets (NaN if it is missing)."""
    values = [
        float(line.rsplit(" ", 1)[1])
        for line in exposition.splitlines()
        if line.startswith((f"{name}{{", f"{name} "))
    ]
    return math.fsum(values) if values else math.nan


# --- payloads ---------------------------------------------------------------------


def _post(body: bytes) -> bytes:
    head = (
        f"POST {PATH} HTTP/1.1\r\nHost: bench\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    )
    return head.encode() + body


def _load_request() -> bytes:
    return _post(
        orjson.dumps(
            {
                "model": MODEL,
                "messages": [{"role": "user", "content": "hello"}],
                "max_tokens": LOAD_TOKENS,
                "ignore_eos": True,
                "temperature": 0,
            }
        )
    )


def _large_body(size: int) -> bytes:
    """A chat request of `size` bytes whose message is one long string."""
    skeleton = orjson.dumps({"model": MODEL, "messages": [{"role": "user", "content": ""}]})
    cut = skeleton.index(b'""') + 1
    return _post(skeleton[:cut] + b"x" * (size - len(skeleton)) + skeleton[cut:])


# --- clients ----------------------------------------------------------------------


async def _read(reader: asyncio.StreamReader) -> tuple[int, bytes]:
    """One HTTP/1.1 response with a Content-Length: (status, body)."""
    head = await reader.readuntil(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            length = int(line.split(b":", 1)[1])
    return int(head.split(b" ", 2)[1]), await reader.readexactly(length)


async def _load_client(port: int, stop: asyncio.Event, answers: list[Answer]) -> None:
    request = _load_request()
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        while not stop.is_set():
            t0 = time.perf_counter()
            writer.write(request)
            status, body = await _read(reader)
            if status != 200:
                raise RuntimeError(f"a load request answered {status}: {body[:300]!r}")
            tokens = int(orjson.loads(body)["usage"]["completion_tokens"])
            answers.append(Answer(t0, time.perf_counter(), tokens))
    finally:
        writer.close()


async def _generated(port: int) -> float:
    url = f"http://127.0.0.1:{port}/metrics"

    def fetch() -> str:
        with urllib.request.urlopen(url, timeout=30) as response:
            return str(response.read().decode())

    total = counter_total(await asyncio.to_thread(fetch), GENERATION_COUNTER)
    if math.isnan(total):
        raise RuntimeError(f"/metrics has no {GENERATION_COUNTER}")
    return total


@dataclass
class _Statuses:
    counts: dict[int, int] = field(default_factory=dict)

    def done(self, _seconds: float, status: int) -> None:
        self.counts[status] = self.counts.get(status, 0) + 1

    def total(self) -> float:
        return float(sum(self.counts.values()))

    def within(self, low: int, high: int) -> float:
        return float(sum(n for s, n in self.counts.items() if low <= s < high))


async def _one(port: int, p: Params, variant: str, body: bytes) -> dict[str, float]:
    neighbour = Neighbour(port)
    await neighbour.start()
    stop = asyncio.Event()
    answers: list[Answer] = []
    bodies, bombs = _Statuses(), _Statuses()
    load = [asyncio.create_task(_load_client(port, stop, answers)) for _ in range(LOAD_CLIENTS)]
    hostile: list[asyncio.Task[None]] = []
    if variant in (BODIES, BOTH):
        hostile.append(
            asyncio.create_task(schema_bombs._loop(port, lambda n: body, stop, bodies.done))
        )
    if variant in (BOMBS, BOTH):

        def bomb(c: int) -> Callable[[int], bytes]:
            return lambda n: schema_bombs._hostile_request(ENUM, n * BOMB_CLIENTS + c)

        hostile += [
            asyncio.create_task(schema_bombs._loop(port, bomb(c), stop, bombs.done))
            for c in range(BOMB_CLIENTS)
        ]
    try:
        await asyncio.sleep(p.warmup)
        before = await _generated(port)
        opened = time.perf_counter()
        neighbour.open_window()
        await asyncio.sleep(p.seconds)
        neighbour.close_window()
        after = await _generated(port)
        closed = time.perf_counter()
        stop.set()
        await asyncio.gather(*load)
        # A large body in flight is tokenized to its end; wait for it outside the window.
        await asyncio.wait_for(asyncio.gather(*hostile), timeout=300)
    finally:
        stop.set()
        for task in (*load, *hostile):
            task.cancel()
        samples = await neighbour.stop()
    window = closed - opened
    ms = [s * 1000 for s in samples]
    return {
        "load": tokens_in_window(answers, opened, closed) / window,
        "engine": (after - before) / window,
        "p50": percentile(ms, 50),
        "p99": percentile(ms, 99),
        "samples": float(len(ms)),
        "bodies": bodies.total(),
        "bodies 4xx": bodies.within(400, 500),
        "bodies 5xx": bodies.within(500, 600),
        "bombs": bombs.total(),
        "bombs 5xx": bombs.within(500, 600),
    }


# --- the run ----------------------------------------------------------------------


def run_into(ctx: RunContext, result: ScenarioResult, name: str) -> None:
    """Measure the engine's tokens/s next to hostile input; add it to `result`."""
    p = Params.for_mode(ctx.quick)
    result.params.update(
        {
            "engine_seconds": p.seconds,
            "engine_load_clients": LOAD_CLIENTS,
            "engine_load_tokens": LOAD_TOKENS,
            "engine_body_bytes": p.body_bytes,
        }
    )
    body = _large_body(p.body_bytes)
    argv = [
        "-m", "realtime", "serve", "--host", "127.0.0.1", "--port", "0",
        "--engine", "cpu", "--model", str(schema_bombs._model_dir(ctx)), "--model-name", MODEL,
        "--log-level", "warning", "--shutdown-grace", "2", "--no-ui",
    ]  # fmt: skip
    with running(start_server("realtime-cpu", argv, ctx.scratch, timeout=180.0)) as server:
        if any(v in (BOMBS, BOTH) for v in p.variants):
            run_client(_warm(server.port))  # the enum's grammar, compiled once
        for repeat in range(ctx.repeats):
            for variant in rotated(p.variants, repeat):
                before = snapshot()
                m = run_client(_one(server.port, p, variant, body))
                result.metric(variant, BACKGROUND, "cores").runs.append(
                    other_cores(before, snapshot())
                )
                _record(result, variant, m)
                ctx.log(
                    name,
                    f"run {repeat + 1}/{ctx.repeats} {variant}: load {m['load']:.0f} tokens/s, "
                    f"engine {m['engine']:.0f} tokens/s, /health p99 {m['p99']:.1f} ms; "
                    f"{m['bodies']:.0f} bodies, {m['bombs']:.0f} bombs",
                )
            if not server.alive():
                raise RuntimeError(f"the server died: {server.log_tail()}")
    _judge(result, p.variants)


async def _warm(port: int) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(schema_bombs._hostile_request(ENUM, 0))
        await _read(reader)
    finally:
        writer.close()


def _record(result: ScenarioResult, variant: str, m: dict[str, float]) -> None:
    result.metric(variant, "load tokens/s", "tokens/s").runs.append(m["load"])
    result.metric(variant, "engine tokens/s", "tokens/s").runs.append(m["engine"])
    for q in ("p50", "p99"):
        result.metric(variant, f"{q} /health latency", "ms").runs.append(m[q])
    result.metric(variant, "/health samples", "requests").runs.append(m["samples"])
    if variant in (BODIES, BOTH):
        result.metric(variant, "large bodies answered", "requests").runs.append(m["bodies"])
        result.metric(variant, "of which refused (4xx)", "requests").runs.append(m["bodies 4xx"])
        result.metric(variant, "of which failed (5xx)", "requests").runs.append(m["bodies 5xx"])
    if variant in (BOMBS, BOTH):
        result.metric(variant, "schema bombs answered", "requests").runs.append(m["bombs"])
        result.metric(variant, "bombs failed (5xx)", "requests").runs.append(m["bombs 5xx"])


def _judge(result: ScenarioResult, variants: tuple[str, ...]) -> None:
    figures = (
        ("load tokens/s", "tokens/s", "load tokens/s", f">= {TOKENS_FLOOR:g}x idle", True),
        ("engine tokens/s", "tokens/s", "engine tokens/s", f">= {TOKENS_FLOOR:g}x idle", True),
        ("p99 /health latency", "ms", "/health p99 (cpu engine)", f"<= {BOUND:g}x idle p99", False),
    )
    for variant in [v for v in variants if v != IDLE]:
        for metric, unit, label, target, floor in figures:
            ratio = result.metric("ratio", f"{variant} / {IDLE} ({label})", "x")
            ratio.runs = paired_ratios(
                result.metric(variant, metric, unit).runs, result.metric(IDLE, metric, unit).runs
            )
            ok = ratio.median >= TOKENS_FLOOR if floor else ratio.median <= BOUND
            result.goals.append(
                Goal.judge(f"{label} next to {variant}", target, ratio.median, "x", ok)
            )
    result.charts.append(
        Chart(
            "tokens/s next to hostile input (cpu engine, 4 decoding clients)",
            "tokens/s",
            "bars",
            [
                Series(
                    label,
                    [
                        (v, m.median, m.low, m.high)
                        for v in variants
                        for m in [result.metric(v, label, "tokens/s")]
                    ],
                )
                for label in ("load tokens/s", "engine tokens/s")
            ],
        )
    )
