"""A 20-turn Claude-Code-shaped agent over the Messages API, beside chat completions.

Claude Code resends its whole history every turn after a long system prompt (its
instructions and 24 tools: over 10k tokens), and each turn adds a tool call, its
result and an answer: a few hundred tokens. So what decides its speed on a local
server is whether every turn finds the history already computed in the prefix
cache. Variants (interleaved, the order rotating per repeat, each repeat a new
conversation and a new session):

* `messages (HTTP, Claude Code's shape)`: `POST /v1/messages?beta=true` (SSE) with
  everything Claude Code sends (`bench/agent/claude_code.py`), its session named
  by `x-claude-code-session-id`;
* `chat completions (HTTP, the same conversation)`: the same conversation over
  `/v1/chat/completions`, which renders the same prompt.

Each runs on a server process of its own (the cpu engine, a tiny random-weight
model with Llama 3's template, which renders a system message wherever it is
sent), so neither finds the other's prompts in the cache.

Goal (issue 25): on every turn after the first, at least 0.95 of the Messages
variant's input tokens come from the cache (`cache_read_input_tokens`). TTFT per
turn is reported side by side with chat's.
"""

from __future__ import annotations

import asyncio
import statistics
from concurrent.futures import ThreadPoolExecutor, wait
from dataclasses import asdict, dataclass
from pathlib import Path

from bench.agent.claude_code import ClaudeCodeChat, ClaudeCodeMessages, shape
from bench.agent.script import AgentScript, script
from bench.agent.transports import Settings, TurnTiming
from bench.context import RunContext, rotated
from bench.machine_load import BACKGROUND, other_cores, snapshot
from bench.procs import ServerProcess, running, start_server
from bench.results import Chart, Goal, ScenarioResult, Series, paired_ratios

NAME = "agent_messages"
TITLE = "Claude-Code-shaped agent loop: the Messages API vs chat completions"
SUMMARY = (
    "A Claude-Code-shaped agent (a long system prompt, tools, a system turn, one tool call "
    "and result per turn, the whole history resent) over `/v1/messages` on the CPU engine, "
    "beside the same conversation over chat completions: the cached fraction of every "
    "turn's input, and the time to first token per turn."
)

MESSAGES = ClaudeCodeMessages.name
CHAT = ClaudeCodeChat.name
VARIANTS = (MESSAGES, CHAT)
MODEL_NAME = "bench-model"
SIZES = {
    "tiny": {"context_length": 8192},
    "small": {
        "hidden_size": 512,
        "num_layers": 4,
        "intermediate_size": 2048,
        "context_length": 16384,
    },
}
GOAL = 0.95


@dataclass(frozen=True)
class Params:
    turns: int
    answer_tokens: int
    #: lines of the long system prompt (Claude Code's instructions' stand-in)
    system_lines: int
    tool_seconds: float
    model: str
    #: the chat template's flavour: Llama 3's renders a system turn where it is sent
    template: str = "llama3"
    #: Claude Code's system turn after the first user turn (ChatML's template refuses it)
    system_turn: bool = True
    threads: int = 1

    @classmethod
    def for_mode(cls, quick: bool) -> Params:
        if quick:
            # agent_loop's tiny model (built once per run) and no system turn: its ChatML
            # template refuses one there
            return cls(
                turns=3,
                answer_tokens=4,
                system_lines=30,
                tool_seconds=0.1,
                model="tiny",
                template="chatml",
                system_turn=False,
            )
        return cls(turns=20, answer_tokens=32, system_lines=90, tool_seconds=0.5, model="small")


def _model_dir(ctx: RunContext, params: Params) -> Path:
    from realtime.testing.tiny_model import ModelSize, cached_tiny_model

    size = ModelSize(**SIZES[params.model])
    return cached_tiny_model(ctx.scratch / "models", size=size, template=params.template)


def _server(ctx: RunContext, name: str, model_dir: Path, params: Params) -> ServerProcess:
    argv = [
        "-m", "realtime", "serve", "--host", "127.0.0.1", "--port", "0",
        "--engine", "cpu", "--model", str(model_dir), "--model-name", MODEL_NAME,
        "--threads", str(params.threads), "--log-level", "warning",
        "--shutdown-grace", "2", "--no-ui",
    ]  # fmt: skip
    return start_server(name, argv, ctx.scratch, timeout=120.0)


def _start_both(ctx: RunContext, model_dir: Path, params: Params) -> list[ServerProcess]:
    with ThreadPoolExecutor(2) as pool:
        starting = [
            pool.submit(_server, ctx, name, model_dir, params)
            for name in ("cc-messages", "cc-chat")
        ]
        wait(starting)
    failed = [f.exception() for f in starting if f.exception() is not None]
    if failed:
        for future in starting:
            if future.exception() is None:
                future.result().stop()
        raise failed[0]  # type: ignore[misc]
    return [future.result() for future in starting]


async def _run_variant(
    variant: str, ports: dict[str, int], agent: AgentScript, params: Params
) -> list[TurnTiming]:
    settings = Settings(MODEL_NAME, params.answer_tokens, warm=False)
    form = shape(agent, system_turn=params.system_turn)
    kind = ClaudeCodeMessages if variant == MESSAGES else ClaudeCodeChat
    transport = kind(f"http://127.0.0.1:{ports[variant]}", agent, settings, form)
    timings = []
    try:
        for index in range(agent.turns):
            if index:
                await asyncio.sleep(params.tool_seconds)  # the client runs the tool
            timings.append(await transport.turn(index))
    finally:
        await transport.aclose()
    return timings


def run(ctx: RunContext) -> ScenarioResult:
    p = Params.for_mode(ctx.quick)
    result = ScenarioResult(NAME, TITLE, SUMMARY, {**asdict(p), **SIZES[p.model]})
    model_dir = _model_dir(ctx, p)
    per_turn: dict[str, list[list[TurnTiming]]] = {v: [] for v in VARIANTS}
    started = _start_both(ctx, model_dir, p)
    with running(started[0]) as messages_server, running(started[1]) as chat_server:
        owner = {MESSAGES: messages_server, CHAT: chat_server}
        ports = {MESSAGES: messages_server.port, CHAT: chat_server.port}
        warm = script(seed=10_000, turns=2, runbook_lines=2)
        for variant in VARIANTS:  # loads the model's code paths
            asyncio.run(_run_variant(variant, ports, warm, p))
        for repeat in range(ctx.repeats):
            agent = script(seed=repeat, turns=p.turns, runbook_lines=p.system_lines)
            before = snapshot()
            for variant in rotated(VARIANTS, repeat):
                cpu = owner[variant].cpu()
                timings = asyncio.run(_run_variant(variant, ports, agent, p))
                cpu = owner[variant].cpu() - cpu
                per_turn[variant].append(timings)
                later = timings[1:]
                result.metric(variant, "server CPU per turn", "ms").runs.append(
                    cpu / len(timings) * 1000
                )
                result.metric(variant, "end-to-end", "s").runs.append(
                    sum(t.total_s for t in timings)
                )
                result.metric(variant, "TTFT (first turn)", "ms").runs.append(
                    timings[0].ttft_s * 1000
                )
                result.metric(variant, "TTFT (median, turns after the first)", "ms").runs.append(
                    statistics.median(t.ttft_s for t in later) * 1000
                )
                result.metric(
                    variant, "cached / input (lowest turn after the first)", ""
                ).runs.append(min(t.cached_tokens / max(t.input_tokens, 1) for t in later))
                result.metric(variant, "input tokens (last turn)", "tokens").runs.append(
                    timings[-1].input_tokens
                )
                ctx.log(
                    NAME,
                    f"run {repeat + 1}/{ctx.repeats} {variant}: first turn "
                    f"{timings[0].input_tokens} input tokens, last {timings[-1].input_tokens} "
                    f"({timings[-1].cached_tokens} cached)",
                )
            result.metric("all", BACKGROUND, "cores").runs.append(other_cores(before, snapshot()))
    _judge(result, p, per_turn)
    return result


def _judge(result: ScenarioResult, p: Params, per_turn: dict[str, list[list[TurnTiming]]]) -> None:
    cached = result.metric(MESSAGES, "cached / input (lowest turn after the first)", "")
    lowest = min(cached.runs) if cached.runs else float("nan")
    result.goals.append(
        Goal.judge(
            "cached fraction of the input on every turn after the first (Messages)",
            f">= {GOAL}",
            lowest,
            "",
            lowest >= GOAL,
        )
    )
    ttft = result.metric("ratio", "TTFT messages / chat (median, turns after the first)", "x")
    ttft.runs = paired_ratios(
        result.metric(MESSAGES, "TTFT (median, turns after the first)", "ms").runs,
        result.metric(CHAT, "TTFT (median, turns after the first)", "ms").runs,
    )
    result.goals.append(
        Goal.judge(
            "TTFT after the first turn: Messages vs chat completions (informational)",
            "~ 1",
            ttft.median,
            "x",
            ttft.median <= 1.1,
        )
    )
    curves = []
    for variant in VARIANTS:
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
        f"Model `{p.model}` from `realtime.testing.tiny_model` (Llama, random weights, Llama 3's "
        "template, "
        + ", ".join(f"{k} {v}" for k, v in size.items())
        + f"), float32, torch with {p.threads} thread(s); {p.turns} turns of "
        f"{p.answer_tokens}-token answers (`max_tokens`: Claude Code's 32000 would run a "
        f"random-weight model to the end of its context), {p.tool_seconds} s of tool time "
        "between turns (not counted)."
    )
    result.notes.append(
        "The Messages variant sends Claude Code's billing line, which the server leaves out "
        "of the prompt, and the session header; both variants render the same prompt (their "
        "input tokens per turn are in the JSON). The model cannot choose tools (random "
        "weights), so the client attaches each turn's call to the answer it received."
    )
