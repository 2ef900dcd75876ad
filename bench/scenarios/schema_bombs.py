"""The `hostile` scenario's schema bombs: a neighbour's short request next to hostile schemas.

One server process on the cpu engine (the tiny model, operator defaults). A neighbour
sends an 8-token chat request (`ignore_eos`, greedy) on its own keep-alive
connection, one after another, and times each (request written -> whole response
read). First alone (`schema idle`), then while two clients each send, back to back,
a `response_format` schema within every documented size limit:

* `plain answers`: no schema, 64 tokens each (the baseline: the same two clients
  decoding beside the neighbour, without a grammar);
* `endless schema`: a `$ref` recursion through a required property (refused: 400);
* `1,500 optional properties` (55 kB), `enum of 3,000 objects`, `anyOf of 400
  objects`: served; their grammars cost up to the step budget per token;
* `new schema each time`: the 1,500 properties with a new description in every
  request, so each one is compiled (the compile cache never helps).

Hostile answers are sampled (temperature 1) up to 64 tokens. The goal (issue 27):
the neighbour's p99 under each hostile load within 2x its idle p99.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from bench.client_loop import run as run_client
from bench.context import RunContext, rotated
from bench.machine_load import BACKGROUND, other_cores, snapshot
from bench.neighbour import read_response
from bench.procs import running, start_server
from bench.results import Chart, Goal, ScenarioResult, Series, paired_ratios, percentile

IDLE, PLAIN = "schema idle", "plain answers"
ENDLESS, WIDE = "endless schema", "1,500 optional properties"
ENUM, ANY_OF, FRESH = "enum of 3,000 objects", "anyOf of 400 objects", "new schema each time"
HOSTILE = (ENDLESS, WIDE, ENUM, ANY_OF, FRESH)
VARIANTS = (IDLE, PLAIN, *HOSTILE)
BOUND = 2.0
MODEL = "bench-model"
CLIENTS = 2
NEIGHBOUR_TOKENS = 8
HOSTILE_TOKENS = 64

SCHEMAS: dict[str, dict[str, Any]] = {
    ENDLESS: {"type": "object", "properties": {"a": {"$ref": "#"}}, "required": ["a"]},
    WIDE: {
        "type": "object",
        "properties": {f"property_{i:04d}": {"type": "string"} for i in range(1500)},
    },
    ENUM: {"enum": [{"k": i} for i in range(3000)]},
    ANY_OF: {
        "anyOf": [
            {
                "type": "object",
                "properties": {"kind": {"const": f"k{i}"}, "a": {"type": "string"}},
                "required": ["kind"],
            }
            for i in range(400)
        ]
    },
}
SCHEMAS[FRESH] = SCHEMAS[WIDE]


@dataclass(frozen=True)
class Params:
    #: Seconds each variant runs (the neighbour's samples come from this window).
    seconds: float
    #: The variants run (the smoke run takes a few).
    variants: tuple[str, ...]

    @classmethod
    def for_mode(cls, quick: bool) -> Params:
        if quick:
            return cls(seconds=0.3, variants=(IDLE, PLAIN, ENDLESS, WIDE))
        return cls(seconds=10.0, variants=VARIANTS)


def _post(body: dict[str, Any]) -> bytes:
    payload = orjson.dumps(body)
    head = (
        "POST /v1/chat/completions HTTP/1.1\r\nHost: bench\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(payload)}\r\n\r\n"
    )
    return head.encode() + payload


def _neighbour_request() -> bytes:
    return _post(
        {
            "model": MODEL,
            "messages": [{"role": "user", "content": "hello"}],
            "max_tokens": NEIGHBOUR_TOKENS,
            "ignore_eos": True,
            "temperature": 0,
        }
    )


def _hostile_request(variant: str, n: int) -> bytes:
    body: dict[str, Any] = {
        "model": MODEL,
        "messages": [{"role": "user", "content": "Answer in JSON."}],
        "max_tokens": HOSTILE_TOKENS,
        "temperature": 1.0,
        "seed": n,
    }
    if variant == PLAIN:
        return _post({**body, "ignore_eos": True})
    schema = SCHEMAS[variant]
    if variant == FRESH:
        schema = {**schema, "description": f"version {n}"}
    return _post(
        {
            **body,
            "response_format": {
                "type": "json_schema",
                "json_schema": {"name": "h", "schema": schema},
            },
        }
    )


async def _loop(
    port: int,
    make: Callable[[int], bytes],
    stop: asyncio.Event,
    on_done: Callable[[float, int], None],
) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        for n in itertools.count():
            if stop.is_set():
                return
            t0 = time.perf_counter()
            writer.write(make(n))
            status = await read_response(reader)
            on_done(time.perf_counter() - t0, status)
    finally:
        writer.close()


async def _one(port: int, p: Params, variant: str) -> dict[str, float]:
    samples: list[float] = []
    statuses: dict[int, int] = {}

    def neighbour_done(seconds: float, status: int) -> None:
        if status != 200:
            raise RuntimeError(f"the neighbour's request answered {status}")
        samples.append(seconds * 1000)

    def hostile_done(seconds: float, status: int) -> None:
        statuses[status] = statuses.get(status, 0) + 1

    def hostile(c: int) -> Callable[[int], bytes]:
        """Client `c`'s request bodies: its n-th is seeded n * CLIENTS + c (distinct seeds)."""
        return lambda n: _hostile_request(variant, n * CLIENTS + c)

    # Warm: the variant's grammar compiled once, outside the window (but for FRESH).
    stop = asyncio.Event()
    tasks = [asyncio.create_task(_loop(port, lambda n: _neighbour_request(), stop, neighbour_done))]
    if variant != IDLE:
        tasks += [
            asyncio.create_task(_loop(port, hostile(c), stop, hostile_done)) for c in range(CLIENTS)
        ]
    await asyncio.sleep(p.seconds)
    stop.set()
    await asyncio.gather(*tasks)
    return {
        "p50": percentile(samples, 50),
        "p99": percentile(samples, 99),
        "samples": float(len(samples)),
        "hostile": float(sum(statuses.values())),
        "refused": float(statuses.get(400, 0)),
        "failed": float(sum(n for status, n in statuses.items() if status >= 500)),
    }


def _model_dir(ctx: RunContext) -> Path:
    from realtime.testing.tiny_model import cached_tiny_model

    return cached_tiny_model(ctx.scratch / "models")


def run_into(ctx: RunContext, result: ScenarioResult, name: str) -> None:
    """Measure the schema bombs and add their metrics, ratios and goals to `result`."""
    p = Params.for_mode(ctx.quick)
    result.params.update({"schema_seconds": p.seconds, "schema_clients": CLIENTS})
    variants = p.variants
    argv = [
        "-m", "realtime", "serve", "--host", "127.0.0.1", "--port", "0",
        "--engine", "cpu", "--model", str(_model_dir(ctx)), "--model-name", MODEL,
        "--log-level", "warning", "--shutdown-grace", "2", "--no-ui",
    ]  # fmt: skip
    with running(start_server("realtime-cpu", argv, ctx.scratch, timeout=180.0)) as server:
        # Compile each schema once (a cached grammar is what a repeating client gets).
        if not ctx.quick:
            run_client(_warm(server.port))
        for repeat in range(ctx.repeats):
            for variant in rotated(variants, repeat):
                before = snapshot()
                m = run_client(_one(server.port, p, variant))
                result.metric(variant, BACKGROUND, "cores").runs.append(
                    other_cores(before, snapshot())
                )
                for q in ("p50", "p99"):
                    result.metric(variant, f"{q} neighbour latency", "ms").runs.append(m[q])
                result.metric(variant, "neighbour samples", "requests").runs.append(m["samples"])
                if variant != IDLE:
                    result.metric(variant, "hostile requests", "requests").runs.append(m["hostile"])
                    result.metric(variant, "of which refused (400)", "requests").runs.append(
                        m["refused"]
                    )
                    result.metric(variant, "of which failed (5xx)", "requests").runs.append(
                        m["failed"]
                    )
                ctx.log(
                    name,
                    f"run {repeat + 1}/{ctx.repeats} {variant}: neighbour p99 {m['p99']:.1f} ms "
                    f"over {m['samples']:.0f} requests; {m['hostile']:.0f} hostile",
                )
            if not server.alive():
                raise RuntimeError(f"the server died: {server.log_tail()}")
    _judge(result, variants)


async def _warm(port: int) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        for variant in (ENDLESS, WIDE, ENUM, ANY_OF):
            writer.write(_hostile_request(variant, 0))
            await read_response(reader)
    finally:
        writer.close()


def _judge(result: ScenarioResult, variants: tuple[str, ...]) -> None:
    idle = result.metric(IDLE, "p99 neighbour latency", "ms").runs
    for variant in [v for v in variants if v != IDLE]:
        ratio = result.metric("ratio", f"{variant} / schema idle (p99)", "x")
        ratio.runs = paired_ratios(result.metric(variant, "p99 neighbour latency", "ms").runs, idle)
        if variant == PLAIN:
            continue
        result.goals.append(
            Goal.judge(
                f"neighbour p99 next to an {variant}"
                if variant[0] in "aeiou"
                else f"neighbour p99 next to {variant}",
                f"<= {BOUND:g}x idle p99",
                ratio.median,
                "x",
                ratio.median <= BOUND,
            )
        )
    result.charts.append(
        Chart(
            "neighbour's 8-token request next to hostile schemas (cpu engine)",
            "ms",
            "bars",
            [
                Series(
                    q,
                    [
                        (v, m.median, m.low, m.high)
                        for v in variants
                        for m in [result.metric(v, f"{q} neighbour latency", "ms")]
                    ],
                )
                for q in ("p50", "p99")
            ],
        )
    )
