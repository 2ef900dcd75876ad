"""Concurrent requests on the CPU engine, side by side with vLLM's CPU server (issue 18).

Both servers serve the same tiny model (`realtime.testing.tiny_model`, hidden size 128: vLLM
needs a head size of 32 or more) in float32 and answer the same closed-loop load at
each concurrency: greedy, `max_tokens` tokens per request, `ignore_eos`. Both run
during the whole scenario, but only one is loaded at a time; per repeat and per
concurrency the two take turns, the order rotating, so drifts on a shared machine
spread over both. Measured per (server, concurrency): aggregate completion tokens/s,
time to first token p50 and p99, and the server's CPU per token (its whole process
tree: vLLM runs its engine core in a child process, ours its engine process and, with
`--api-servers N`, its N front ends).

Goals: realtime >= vLLM in tokens/s at every concurrency, and realtime at 8 requests
>= 3x realtime at 1.
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Protocol

from bench import client_loop
from bench.batching.load import closed_loop
from bench.batching.servers import (
    MODEL_NAME,
    start_realtime,
    start_vllm,
    tree_cpu_seconds,
    vllm_python,
)
from bench.context import RunContext, rotated
from bench.machine_load import BACKGROUND, other_cores, snapshot
from bench.results import Chart, Goal, ScenarioResult, Series, paired_ratios, percentile

NAME = "batching"
TITLE = "Concurrent requests: CPU engine vs vLLM on CPU"
SUMMARY = (
    "Aggregate completion tokens/s, time to first token and server CPU per token at 1 to 16 "
    "concurrent streaming requests (greedy, ignore_eos), our server's CPU engine and vLLM's CPU "
    "server side by side on the same model, loaded in turn."
)

OURS, VLLM = "realtime", "vLLM"
#: Ours with `--engine-process off` (the engine on a thread of the server's process).
ONE_PROCESS = "realtime-1proc"
#: Front-end counts of ours measured by default (`--api-servers N`, one engine process).
FRONT_ENDS = (1, 2)
SCALE_GOAL = 3.0
#: Issue 28: tokens/s against vLLM per concurrency (the engine in its own process).
VLLM_GOALS = {1: 1.0, 4: 1.0, 8: 1.3, 16: 1.3}
#: Pause before each measured run (vLLM idles down within about 5 s of its last request).
SETTLE_SECONDS = 3.0
SCALE_AT = 8


@dataclass(frozen=True)
class Params:
    concurrency: tuple[int, ...]
    tokens: int
    #: requests per worker per measured run
    rounds: int
    hidden_size: int = 128
    threads: int = 1
    #: also measure ours with the engine in the server's process (`--engine-process off`)
    one_process: bool = True
    #: ours with the engine in its own process and N front ends, per N (1 is `realtime`)
    api_servers: tuple[int, ...] = FRONT_ENDS

    @classmethod
    def for_mode(cls, quick: bool) -> Params:
        if quick:
            return cls(concurrency=(1, 2), tokens=16, rounds=1, one_process=False, api_servers=(1,))
        return cls(concurrency=(1, 4, 8, 16), tokens=128, rounds=4)


def front_ends_name(count: int) -> str:
    """Ours with `count` front ends: `realtime` for one, else e.g. `realtime-2fe`."""
    return OURS if count == 1 else f"{OURS}-{count}fe"


def our_servers(api_servers: tuple[int, ...], one_process: bool) -> dict[str, str]:
    """Our variants, name to the report's label, in report order: by front-end count,
    then the one-process server."""
    servers = {
        front_ends_name(count): OURS if count == 1 else f"{OURS} {count} front ends"
        for count in api_servers
    }
    if one_process:
        servers[ONE_PROCESS] = f"{OURS} one process"
    return servers


def front_ends_ratio(count: int) -> str:
    """The metric name of N front ends' tokens/s over one front end's."""
    return f"realtime {count} front ends / 1 (tokens/s)"


class _Server(Protocol):
    port: int

    @property
    def pid(self) -> int: ...

    def stop(self) -> None: ...


def _model_dir(ctx: RunContext, p: Params) -> Path:
    from realtime.testing.tiny_model import ModelSize, cached_tiny_model

    return cached_tiny_model(ctx.scratch / "models", size=ModelSize(hidden_size=p.hidden_size))


@contextlib.contextmanager
def _running(server: _Server) -> Iterator[_Server]:
    try:
        yield server
    finally:
        server.stop()


def run(ctx: RunContext, p: Params, vllm_venv: Path | None) -> ScenarioResult:
    result = ScenarioResult(NAME, TITLE, SUMMARY, {**asdict(p), "repeats": ctx.repeats})
    model_dir = _model_dir(ctx, p)
    python = vllm_python(vllm_venv) if vllm_venv is not None else None
    if vllm_venv is None:
        result.notes.append("vLLM was not run (`--no-vllm`).")
    elif python is None:
        result.notes.append(
            f"vLLM is not installed in `{vllm_venv.name}` (run "
            "`bash bench/batching/install_vllm.sh`); only our server was measured."
        )
    with contextlib.ExitStack() as stack:
        servers: dict[str, _Server] = {}
        for count in p.api_servers:
            ctx.log(NAME, f"starting our server, {count} front end(s)")
            servers[front_ends_name(count)] = stack.enter_context(
                _running(
                    start_realtime(model_dir, ctx.scratch, threads=p.threads, api_servers=count)
                )
            )
        if p.one_process:
            servers[ONE_PROCESS] = stack.enter_context(
                _running(
                    start_realtime(model_dir, ctx.scratch, threads=p.threads, engine_process="off")
                )
            )
        if python is not None:
            ctx.log(NAME, "starting vLLM (minutes: it compiles and profiles at start-up)")
            try:
                servers[VLLM] = stack.enter_context(
                    _running(start_vllm(python, model_dir, ctx.scratch))
                )
            except RuntimeError as exc:
                result.notes.append(f"vLLM did not start: {str(exc)[:800]}")
        for name, server in servers.items():  # warm-up: one request per worker, unmeasured
            client_loop.run(
                closed_loop(server.port, MODEL_NAME, concurrency=4, rounds=1, max_tokens=p.tokens)
            )
            ctx.log(NAME, f"{name} warmed up")
        served = 0
        for repeat in range(ctx.repeats):
            for concurrency in p.concurrency:
                for name in rotated(list(servers), repeat):
                    served += 1
                    _measure(ctx, result, name, servers[name], p, concurrency, served)
    _judge(result, p, VLLM in {m.variant.split(" ")[0] for m in result.metrics})
    return result


def _variant(server: str, concurrency: int) -> str:
    return f"{server} c={concurrency}"


def _measure(
    ctx: RunContext,
    result: ScenarioResult,
    name: str,
    server: _Server,
    p: Params,
    concurrency: int,
    served: int,
) -> None:
    # vLLM's engine keeps polling for a moment after its last request; let the server
    # that ran before settle, so it takes no CPU from this run.
    time.sleep(SETTLE_SECONDS)
    before, cpu_before = snapshot(), tree_cpu_seconds(server.pid)
    load = client_loop.run(
        closed_loop(
            server.port,
            MODEL_NAME,
            concurrency=concurrency,
            rounds=p.rounds,
            max_tokens=p.tokens,
            first=served * 1000,
        )
    )
    cpu = tree_cpu_seconds(server.pid) - cpu_before
    background = other_cores(before, snapshot())
    expected = concurrency * p.rounds * p.tokens
    if load.tokens != expected:
        raise RuntimeError(f"{name} streamed {load.tokens} tokens, {expected} were asked for")
    variant = _variant(name, concurrency)
    rate = load.tokens / load.seconds
    ttfts = [answer.ttft * 1000 for answer in load.answers]
    result.metric(variant, "tokens/s", "tokens/s").runs.append(rate)
    result.metric(variant, "TTFT p50", "ms").runs.append(percentile(ttfts, 50))
    result.metric(variant, "TTFT p99", "ms").runs.append(percentile(ttfts, 99))
    result.metric(variant, "server CPU per token", "us").runs.append(cpu / load.tokens * 1e6)
    result.metric(variant, BACKGROUND, "cores").runs.append(background)
    ctx.log(
        NAME,
        f"{variant}: {rate:.0f} tokens/s, TTFT p50 {percentile(ttfts, 50):.1f} ms, "
        f"{cpu / load.tokens * 1e6:.0f} us CPU/token, other processes {background:.2f} cores",
    )


def _judge(result: ScenarioResult, p: Params, with_vllm: bool) -> None:
    def rates(server: str, concurrency: int) -> list[float]:
        metric = result.get(_variant(server, concurrency), "tokens/s")
        return metric.runs if metric is not None else []

    full = p.concurrency == Params.for_mode(False).concurrency
    for concurrency in p.concurrency:
        ratio = result.metric(f"ratio c={concurrency}", "realtime / vLLM (tokens/s)", "x")
        if with_vllm:
            ratio.runs = paired_ratios(rates(OURS, concurrency), rates(VLLM, concurrency))
        target = VLLM_GOALS.get(concurrency, 1.0)
        result.goals.append(
            Goal.judge(
                f"tokens/s at {concurrency} concurrent: realtime / vLLM",
                f">= {target}",
                ratio.median if with_vllm else math.nan,
                "x",
                ratio.median >= target,
                applicable=with_vllm,
                note="" if with_vllm else "vLLM not measured",
            )
        )
        ours_p99 = result.get(_variant(OURS, concurrency), "TTFT p99")
        theirs_p99 = result.get(_variant(VLLM, concurrency), "TTFT p99")
        if with_vllm and ours_p99 and theirs_p99 and ours_p99.runs and theirs_p99.runs:
            result.goals.append(
                Goal.judge(
                    f"TTFT p99 at {concurrency} concurrent: realtime / vLLM",
                    "<= 1.0",
                    ours_p99.median / theirs_p99.median,
                    "x",
                    ours_p99.median <= theirs_p99.median,
                )
            )
    for count in p.api_servers:
        if count == 1:
            continue
        for concurrency in p.concurrency:  # a plain figure: issue 28 sets no goal on it
            result.metric(
                f"ratio c={concurrency}", front_ends_ratio(count), "x"
            ).runs = paired_ratios(
                rates(front_ends_name(count), concurrency), rates(OURS, concurrency)
            )
    scale = result.metric("ratio", f"realtime {SCALE_AT} concurrent / 1", "x")
    if SCALE_AT in p.concurrency:
        scale.runs = paired_ratios(rates(OURS, SCALE_AT), rates(OURS, 1))
    result.goals.append(
        Goal.judge(
            f"realtime tokens/s at {SCALE_AT} concurrent / at 1",
            f">= {SCALE_GOAL}",
            scale.median if scale.runs else math.nan,
            "x",
            scale.median >= SCALE_GOAL,
            applicable=full,
        )
    )
    ours = list(our_servers(p.api_servers, p.one_process))
    servers = [*ours, VLLM] if with_vllm else ours
    for metric, unit, title in (
        ("tokens/s", "tokens/s", "aggregate tokens/s"),
        ("TTFT p50", "ms", "time to first token, p50"),
        ("server CPU per token", "us", "server CPU per token"),
    ):
        result.charts.append(
            Chart(
                title,
                unit,
                "lines",
                [
                    Series(server, _points(result, server, p.concurrency, metric))
                    for server in servers
                ],
                xlabel="concurrent requests",
            )
        )
    result.notes.append(
        "Model from `realtime.testing.tiny_model` (Llama, random weights, hidden size"
        f" {p.hidden_size}, 2 layers), float32. Our server runs with"
        f" `--threads {p.threads}` and `--api-servers N` for N in"
        f" {', '.join(map(str, p.api_servers))}; vLLM with its defaults for CPU (it binds"
        " its engine to one core and keeps the other for its API server). Each run: every"
        f" worker sends {p.rounds} request(s) back to back, {p.tokens} tokens each; tokens/s"
        " is all completion tokens over the time from the first request to the last answer. "
        f"Each run starts {SETTLE_SECONDS:g} s after the previous one ended, so the server "
        "that ran before is idle."
    )


def _points(
    result: ScenarioResult, server: str, levels: tuple[int, ...], metric: str
) -> list[tuple[float | str, float, float, float]]:
    points: list[tuple[float | str, float, float, float]] = []
    for concurrency in levels:
        found = result.get(_variant(server, concurrency), metric)
        if found is not None and found.runs:
            points.append((concurrency, found.median, found.low, found.high))
    return points


def table(
    result: ScenarioResult,
    levels: tuple[int, ...],
    servers: list[str],
    api_servers: tuple[int, ...],
) -> list[dict[str, Any]]:
    """Per concurrency: each server's medians and the ratios (keyed by the ratio's name
    for N front ends / 1), for the report."""
    rows = []
    for concurrency in levels:
        row: dict[str, Any] = {"concurrency": concurrency}
        for server in servers:
            for metric in ("tokens/s", "TTFT p50", "TTFT p99", "server CPU per token"):
                found = result.get(_variant(server, concurrency), metric)
                row[f"{server} {metric}"] = found.median if found and found.runs else None
        ratio = result.get(f"ratio c={concurrency}", "realtime / vLLM (tokens/s)")
        row["ratio"] = ratio.median if ratio and ratio.runs else None
        for count in api_servers:
            if count != 1:
                ratio = result.get(f"ratio c={concurrency}", front_ends_ratio(count))
                row[front_ends_ratio(count)] = ratio.median if ratio and ratio.runs else None
        rows.append(row)
    return rows
