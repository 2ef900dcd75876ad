"""A 20-turn tool-calling agent on the CPU engine: Responses against chat completions.

Variants (run interleaved, the order rotating per repeat, each repeat a fresh
conversation that every variant replays; see `bench/agent/`):

* `chat completions (HTTP, whole history)`: the baseline, a plain chat client that
  resends the whole conversation every turn;
* `responses (HTTP, previous_response_id)`: `POST /v1/responses`, only the new items;
* `responses (WebSocket mode, previous_response_id)`: the same over one socket to
  `/v1/responses`. When the server refuses that socket (WebSocket mode not built
  yet) the variant is skipped and its goal is n/a, with the refusal in the notes.

The Responses variants ask the server to warm each next turn
(`nvext.agent_hints.speculative_prefill`); the chat baseline does not. Between turns
the client "runs the tool" (a fixed sleep, `tool_seconds`), the time a warm-up uses.
Chat runs on its own server process and the Responses variants on another, so no
variant finds another's prompts in the prefix cache (HTTP requests share the
cache key of requests without a session; a socket has its own).

End-to-end time: the turns' times from sending each request to its terminal
event, summed; the tool sleeps are left out (they are the same for every variant).
Goal (issue 15): WebSocket mode <= 0.6 of the chat baseline's end-to-end time.
"""

from __future__ import annotations

import asyncio
import statistics
from concurrent.futures import ThreadPoolExecutor, wait
from dataclasses import asdict, dataclass
from pathlib import Path

from bench.agent.script import AgentScript, script
from bench.agent.transports import (
    AgentTransport,
    ChatHttp,
    ResponsesHttp,
    ResponsesSocket,
    Settings,
    TurnTiming,
    socket_mode_available,
)
from bench.context import RunContext, rotated
from bench.machine_load import BACKGROUND, other_cores, snapshot
from bench.procs import ServerProcess, running, start_server
from bench.results import Chart, Goal, ScenarioResult, Series, paired_ratios

NAME = "agent_loop"
TITLE = "Tool-calling agent loop: Responses (previous_response_id) vs chat completions"
SUMMARY = (
    "A tool-calling agent (a ~2k-token task, then one tool call and a ~150-token tool "
    "result per turn) on the CPU engine: chat completions resending the whole history "
    "against the Responses API continuing with `previous_response_id` and only the new "
    "items, over HTTP and over WebSocket mode, side by side."
)

CHAT = ChatHttp.name
RESPONSES_HTTP = ResponsesHttp.name
RESPONSES_WS = ResponsesSocket.name
VARIANTS = (CHAT, RESPONSES_HTTP, RESPONSES_WS)
MODEL_NAME = "bench-model"
SIZES = {
    "tiny": {"context_length": 8192},
    "small": {
        "hidden_size": 512,
        "num_layers": 4,
        "intermediate_size": 2048,
        "context_length": 8192,
    },
}
GOAL = 0.6
#: The end-to-end time of the same loop on the echo engine (the APIs' own cost).
ECHO_METRIC = "end-to-end, echo engine"


@dataclass(frozen=True)
class Params:
    turns: int
    answer_tokens: int
    runbook_lines: int
    tool_seconds: float
    model: str
    threads: int = 1

    @classmethod
    def for_mode(cls, quick: bool) -> Params:
        if quick:
            return cls(turns=4, answer_tokens=8, runbook_lines=8, tool_seconds=0.1, model="tiny")
        return cls(turns=20, answer_tokens=32, runbook_lines=26, tool_seconds=0.5, model="small")


def _model_dir(ctx: RunContext, params: Params) -> Path:
    from realtime.testing.tiny_model import ModelSize, cached_tiny_model

    return cached_tiny_model(ctx.scratch / "models", size=ModelSize(**SIZES[params.model]))


def _server(ctx: RunContext, name: str, model_dir: Path, params: Params) -> ServerProcess:
    argv = [
        "-m", "realtime", "serve", "--host", "127.0.0.1", "--port", "0",
        "--engine", "cpu", "--model", str(model_dir), "--model-name", MODEL_NAME,
        "--threads", str(params.threads), "--log-level", "warning",
        "--shutdown-grace", "2", "--no-ui",
    ]  # fmt: skip
    return start_server(name, argv, ctx.scratch, timeout=120.0)


def _start_both(ctx: RunContext, model_dir: Path, params: Params) -> list[ServerProcess]:
    """The chat and the Responses server, loading the model at the same time; if one
    fails to start, the other is stopped."""
    with ThreadPoolExecutor(2) as pool:
        starting = [
            pool.submit(_server, ctx, name, model_dir, params)
            for name in ("agent-chat", "agent-responses")
        ]
        wait(starting)
    failed = [f.exception() for f in starting if f.exception() is not None]
    if failed:
        for future in starting:
            if future.exception() is None:
                future.result().stop()
        raise failed[0]  # type: ignore[misc]
    return [future.result() for future in starting]


async def _loop(transport: AgentTransport, turns: int, tool_seconds: float) -> list[TurnTiming]:
    timings = []
    try:
        for index in range(turns):
            if index:
                await asyncio.sleep(tool_seconds)  # the client runs the tool
            timings.append(await transport.turn(index))
    finally:
        await transport.aclose()
    return timings


async def _run_variant(
    variant: str, ports: dict[str, int], agent: AgentScript, params: Params
) -> list[TurnTiming]:
    """One conversation; `ports`: the chat server's and the Responses server's."""
    settings = Settings(MODEL_NAME, params.answer_tokens)
    if variant == CHAT:
        chat = ChatHttp(f"http://127.0.0.1:{ports['chat']}", agent, settings)
        return await _loop(chat, agent.turns, params.tool_seconds)
    port = ports["responses"]
    if variant == RESPONSES_HTTP:
        http = ResponsesHttp(f"http://127.0.0.1:{port}", agent, settings)
        return await _loop(http, agent.turns, params.tool_seconds)
    socket = await ResponsesSocket.open(f"ws://127.0.0.1:{port}", agent, settings)
    return await _loop(socket, agent.turns, params.tool_seconds)


def _echo_overhead(ctx: RunContext, result: ScenarioResult, p: Params, variants: list[str]) -> None:
    """The same loop on the echo engine (no model work, no cache): what is left is each
    API's own cost per turn, request and events, on both ends."""
    argv = [
        "-m", "realtime", "serve", "--host", "127.0.0.1", "--port", "0", "--engine", "echo",
        "--model-name", MODEL_NAME, "--log-level", "warning", "--shutdown-grace", "2",
        "--no-ui",
    ]  # fmt: skip
    with running(start_server("agent-echo", argv, ctx.scratch)) as echo:
        ports = {"chat": echo.port, "responses": echo.port}
        quick = Params(p.turns, p.answer_tokens, p.runbook_lines, 0.0, p.model)
        for repeat in range(ctx.repeats):
            agent = script(seed=1000 + repeat, turns=p.turns, runbook_lines=p.runbook_lines)
            for variant in rotated(variants, repeat):
                cpu = echo.cpu()
                timings = asyncio.run(_run_variant(variant, ports, agent, quick))
                cpu = echo.cpu() - cpu
                result.metric(variant, ECHO_METRIC, "s").runs.append(
                    sum(t.total_s for t in timings)
                )
                result.metric(variant, "server CPU per turn, echo engine", "ms").runs.append(
                    cpu / len(timings) * 1000
                )


def run(ctx: RunContext) -> ScenarioResult:
    p = Params.for_mode(ctx.quick)
    result = ScenarioResult(NAME, TITLE, SUMMARY, {**asdict(p), **SIZES[p.model]})
    model_dir = _model_dir(ctx, p)
    per_turn: dict[str, list[list[TurnTiming]]] = {v: [] for v in VARIANTS}
    started = _start_both(ctx, model_dir, p)
    with running(started[0]) as chat_server, running(started[1]) as responses_server:
        ports = {"chat": chat_server.port, "responses": responses_server.port}
        owner = {
            CHAT: chat_server,
            RESPONSES_HTTP: responses_server,
            RESPONSES_WS: responses_server,
        }
        refused = asyncio.run(socket_mode_available(f"ws://127.0.0.1:{responses_server.port}"))
        variants = [v for v in VARIANTS if v != RESPONSES_WS or refused is None]
        if refused is not None:
            result.notes.append(
                f"WebSocket mode was not measured: the server refused a WebSocket to "
                f"/v1/responses ({refused})."
            )
        # One short conversation per variant first: loads the model's code paths.
        warm = script(seed=10_000, turns=2, runbook_lines=2)
        for variant in variants:
            asyncio.run(_run_variant(variant, ports, warm, p))
        for repeat in range(ctx.repeats):
            agent = script(seed=repeat, turns=p.turns, runbook_lines=p.runbook_lines)
            before = snapshot()
            for variant in rotated(variants, repeat):
                cpu = owner[variant].cpu()
                timings = asyncio.run(_run_variant(variant, ports, agent, p))
                cpu = owner[variant].cpu() - cpu
                result.metric(variant, "server CPU per turn", "ms").runs.append(
                    cpu / len(timings) * 1000
                )
                per_turn[variant].append(timings)
                total = sum(t.total_s for t in timings)
                result.metric(variant, "end-to-end", "s").runs.append(total)
                result.metric(variant, "TTFT (median over turns)", "ms").runs.append(
                    statistics.median(t.ttft_s for t in timings) * 1000
                )
                result.metric(variant, "TTFT (last turn)", "ms").runs.append(
                    timings[-1].ttft_s * 1000
                )
                result.metric(variant, "cached / input tokens (last turn)", "").runs.append(
                    timings[-1].cached_tokens / max(timings[-1].input_tokens, 1)
                )
                ctx.log(
                    NAME,
                    f"run {repeat + 1}/{ctx.repeats} {variant}: {total:.2f} s, last turn "
                    f"{timings[-1].input_tokens} input tokens, {timings[-1].cached_tokens} cached",
                )
            result.metric("all", BACKGROUND, "cores").runs.append(other_cores(before, snapshot()))
    _echo_overhead(ctx, result, p, variants)
    _judge(result, p, per_turn, variants)
    return result


def _judge(
    result: ScenarioResult,
    p: Params,
    per_turn: dict[str, list[list[TurnTiming]]],
    variants: list[str],
) -> None:
    chat = result.metric(CHAT, "end-to-end", "s").runs
    echo_chat = result.metric(CHAT, ECHO_METRIC, "s").runs
    for variant, label in ((RESPONSES_HTTP, "HTTP"), (RESPONSES_WS, "WebSocket")):
        if variant in variants:
            ratio = result.metric("ratio", f"responses {label} / chat (end-to-end)", "x")
            ratio.runs = paired_ratios(result.metric(variant, "end-to-end", "s").runs, chat)
            echo = result.metric("ratio", f"responses {label} / chat (echo engine)", "x")
            echo.runs = paired_ratios(result.metric(variant, ECHO_METRIC, "s").runs, echo_chat)
    ws = result.get("ratio", "responses WebSocket / chat (end-to-end)")
    result.goals.append(
        Goal.judge(
            "end-to-end: WebSocket mode vs chat completions resending the history",
            f"<= {GOAL}",
            ws.median if ws is not None else float("nan"),
            "x",
            ws is not None and ws.median <= GOAL,
            applicable=ws is not None,
            note="" if ws is not None else "WebSocket mode not available on this server",
        )
    )
    http = result.get("ratio", "responses HTTP / chat (end-to-end)")
    result.goals.append(
        Goal.judge(
            "end-to-end: Responses over HTTP vs chat completions (informational)",
            "< 1",
            http.median if http is not None else float("nan"),
            "x",
            http is not None and http.median < 1,
        )
    )
    # per-turn TTFT (median over repeats), for the report's chart and the JSON
    curves = []
    for variant in variants:
        runs = per_turn[variant]
        if not runs:
            continue
        points: list[tuple[float | str, float, float, float]] = []
        for turn in range(p.turns):
            values = [run[turn].ttft_s * 1000 for run in runs]
            points.append((turn + 1, statistics.median(values), min(values), max(values)))
        curves.append(Series(variant, points))
        result.detail[f"ttft_ms_per_turn[{variant}]"] = [point[1] for point in points]
        result.detail[f"input_tokens_per_turn[{variant}]"] = [t.input_tokens for t in runs[-1]]
        result.detail[f"cached_tokens_per_turn[{variant}]"] = [t.cached_tokens for t in runs[-1]]
    result.charts.append(
        Chart("time to first token per turn", "ms", "lines", curves, xlabel="turn")
    )
    size = SIZES[p.model]
    result.notes.append(
        f"Model `{p.model}` from `realtime.testing.tiny_model` (Llama, random weights, ChatML, "
        + ", ".join(f"{k} {v}" for k, v in size.items())
        + f"), float32, torch with {p.threads} thread(s); {p.turns} turns of "
        f"{p.answer_tokens}-token answers (`max_output_tokens`, sampled at temperature 1), "
        f"{p.tool_seconds} s of tool time between turns (not counted)."
    )
    result.notes.append(
        "`server CPU per turn`: the serving process's CPU time (all threads) over the "
        "conversation, per turn; for the Responses variants it includes the next-turn "
        "warm-ups they ask for."
    )
    result.notes.append(
        "`end-to-end, echo engine`: the same conversations against the echo engine (no "
        "model work, no cache; the answer is the first user message cut to the answer "
        "length), without tool time: what remains is each API's own per-turn cost, the "
        "request, its parsing and the events, on both ends."
    )
    result.notes.append(
        "The model cannot choose tools (random weights), so the client attaches each "
        "turn's function call to the model's answer and sends the tool's output, the same "
        "in every variant; the prompts the server renders are the same in all of them. "
        "The Responses variants send `nvext.agent_hints.speculative_prefill` (warm the "
        "next turn); a chat client could send the same hint, this baseline does not."
    )
