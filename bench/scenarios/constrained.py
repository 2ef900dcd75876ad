"""Constrained decoding: what the grammar mask costs per token, through the server and alone.

Through the server (the goal's measure): `python -m realtime serve --engine cpu` as its
own process, one /v1/realtime socket, sampled requests (temperature 1, a new seed each):

* `server unconstrained` - `ignore_eos`, `max_tokens: N`;
* `server json_schema` - `response_format` with a schema (an enum, a boolean, a
  bounded integer and a bounded string);
* `server tool_call` - `tool_choice: "required"` over five coding-agent tools, in
  hermes markup, each call's arguments constrained.

Decode speed is timed on the client from the first token's frame to the last (the
prefill, and the compile of a new grammar, are left out), tokens counted from each
chunk's continuous usage; a constrained answer ends when its grammar is complete, so
requests follow each other until N decode tokens are in. The same socket also
measures the time to the first token of an unconstrained request, of a constrained
one whose grammar the server has compiled before, and of one with a grammar it has
never seen (a new description in its schemas), each right after an unconstrained
request with the same prompt, so that the prompt is in the prefix cache: the last two
differ by the compile and the new grammar's first lexer states.

Alone (why the server's figure is what it is): the bench model in this process, a bare
`transformers` loop over a `DynamicCache`, sampling with and without the mask path
the cpu engine runs (`allowed()`, `apply_allowed`, `advance`); a constrained answer
that ends starts a new one on the same cache. Also measured: each grammar's compile
time on an empty cache, and building the tokenizer binding (once per engine, at load).

All variants alternate, the order rotating per repeat.
"""

from __future__ import annotations

import asyncio
import functools
import itertools
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import orjson
from websockets.asyncio.client import connect

from bench.context import RunContext, rotated
from bench.machine_load import BACKGROUND, other_cores, snapshot
from bench.payloads import WS_PATH
from bench.procs import running, start_server
from bench.results import Chart, Goal, ScenarioResult, Series, paired_ratios

NAME = "constrained"
TITLE = "Constrained decoding (grammar mask cost)"
SUMMARY = (
    "Tokens/s of sampled decoding with and without a grammar constraint on the same model: "
    "through the server (the cpu engine, one /v1/realtime socket) and in a bare "
    "`transformers` loop with the same mask path; the time to first token with a new and "
    "a known grammar, and the one-off compile time of a realistic tool schema."
)

UNCONSTRAINED, SCHEMA, TOOLS = "unconstrained", "json_schema", "tool_call"
VARIANTS = (UNCONSTRAINED, SCHEMA, TOOLS)
CONSTRAINED = (SCHEMA, TOOLS)
SERVER = "server "
LOOP = "loop "
MODEL_NAME = "bench-model"
#: The seed of the time-to-first-token requests.
FIRST_TOKEN_SEED = 7
PROMPT = "Answer with a JSON object or a tool call."
SIZES = {"tiny": {}, "small": {"hidden_size": 512, "num_layers": 4, "intermediate_size": 2048}}
GOAL = 0.8

TICKET: dict[str, Any] = {
    "type": "object",
    "properties": {
        "color": {"type": "string", "enum": ["red", "green", "blue"]},
        "urgent": {"type": "boolean"},
        "priority": {"type": "integer", "minimum": 1, "maximum": 5},
        "note": {"type": "string", "maxLength": 80},
    },
    "required": ["color", "urgent", "priority", "note"],
    "additionalProperties": False,
}


def _object(properties: dict[str, Any], required: list[str]) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": properties,
        "required": required,
        "additionalProperties": False,
    }


#: A coding agent's tools: strings, bounded integers and numbers, enums, arrays, maps.
AGENT_TOOLS: list[tuple[str, dict[str, Any]]] = [
    (
        "read_file",
        _object(
            {
                "path": {"type": "string", "description": "Absolute path"},
                "offset": {"type": "integer", "minimum": 0},
                "limit": {"type": "integer", "minimum": 1, "maximum": 2000},
            },
            ["path"],
        ),
    ),
    (
        "write_file",
        _object(
            {
                "path": {"type": "string"},
                "content": {"type": "string"},
                "mode": {"type": "string", "enum": ["overwrite", "append"]},
            },
            ["path", "content"],
        ),
    ),
    (
        "search_code",
        _object(
            {
                "query": {"type": "string", "minLength": 1, "maxLength": 120},
                "max_results": {"type": "integer", "minimum": 1, "maximum": 50},
                "file_types": {
                    "type": "array",
                    "items": {"type": "string", "enum": ["py", "js", "ts", "go", "rs", "md"]},
                    "maxItems": 6,
                },
                "case_sensitive": {"type": "boolean"},
            },
            ["query"],
        ),
    ),
    (
        "run_command",
        _object(
            {
                "command": {"type": "string", "maxLength": 200},
                "timeout_s": {"type": "number", "minimum": 0, "maximum": 600},
                "env": {"type": "object", "additionalProperties": {"type": "string"}},
                "cwd": {"type": ["string", "null"]},
            },
            ["command"],
        ),
    ),
    (
        "get_weather",
        _object(
            {
                "city": {"type": "string", "maxLength": 60},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
                "days": {"type": "integer", "minimum": 1, "maximum": 14},
            },
            ["city", "unit"],
        ),
    ),
]


@dataclass(frozen=True)
class Params:
    tokens: int
    model: str
    threads: int = 1
    warmup: int = 1

    @classmethod
    def for_mode(cls, quick: bool) -> Params:
        if quick:
            return cls(tokens=32, model="tiny")
        return cls(tokens=256, model="small")


class Loop:
    """The bench model in this process, sampling with or without a constraint."""

    def __init__(self, model_dir: Path, threads: int) -> None:
        import torch
        from transformers import AutoModelForCausalLM

        from realtime.constrain.tokenizer import TokenizerBinding
        from realtime.model.model_dir import load_model_dir

        self.torch = torch
        torch.set_num_threads(threads)
        files = load_model_dir(model_dir)
        self.tokenizer = files.tokenizer
        # Any, as in realtime's cpu engine: transformers leaves the model's eval() untyped.
        model: Any = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
        self.model = model.eval()
        width = int(self.model.config.vocab_size)
        self.binding = TokenizerBinding(
            files.tokenizer.backend, eos_token_ids=files.tokenizer.eos_token_ids, logits_width=width
        )
        rendered = files.chat_template.render(
            [{"role": "user", "content": PROMPT}], add_generation_prompt=True
        )
        self.prompt_ids = self.tokenizer.encode(rendered)

    def decode(
        self, tokens: int, seed: int, start: Callable[[], Any] | None
    ) -> tuple[float, float, int]:
        """Sample `tokens` tokens: (seconds from the first token to the last, seconds spent
        in the mask path, answers completed)."""
        from transformers import DynamicCache

        from realtime.constrain.logits import apply_allowed

        torch = self.torch
        generator = torch.Generator().manual_seed(seed)
        matcher = start() if start is not None else None
        mask_seconds = 0.0
        answers = 0
        with torch.inference_mode():
            cache = DynamicCache(config=self.model.config)
            ids = list(self.prompt_ids)
            first = 0.0
            for step in range(tokens):
                out = self.model(
                    input_ids=torch.tensor([ids]), cache=cache, use_cache=True, logits_to_keep=1
                )
                logits = out.logits[0, -1]
                if step == 1:
                    first = time.perf_counter()  # the first token's time is prefill
                if matcher is not None:
                    t0 = time.perf_counter()
                    logits = apply_allowed(logits, matcher.allowed())
                    mask_seconds += time.perf_counter() - t0
                probs = torch.softmax(logits, dim=-1)
                token = int(torch.multinomial(probs, 1, generator=generator))
                if matcher is not None and start is not None:
                    t0 = time.perf_counter()
                    if not matcher.advance(token):
                        raise RuntimeError(f"the mask allowed a refused token: {matcher.error}")
                    if matcher.done:
                        answers += 1
                        matcher = start()
                    mask_seconds += time.perf_counter() - t0
                ids = [token]
            return time.perf_counter() - first, mask_seconds, answers


def _model_dir(ctx: RunContext, params: Params) -> Path:
    from realtime.testing.tiny_model import ModelSize, cached_tiny_model

    return cached_tiny_model(ctx.scratch / "models", size=ModelSize(**SIZES[params.model]))


def _specs(loop: Loop) -> dict[str, Any]:
    from realtime.chat.tools import ToolSpec
    from realtime.chat.tools.grammar import tool_call_grammar
    from realtime.constrain import json_schema_grammar

    tools = [ToolSpec(name, schema) for name, schema in AGENT_TOOLS]
    return {
        SCHEMA: json_schema_grammar(TICKET, name="ticket"),
        TOOLS: tool_call_grammar(
            "hermes", tools, parallel=True, added_tokens=loop.binding.added_tokens
        ),
    }


class ServerSocket:
    """One /v1/realtime socket to the server, one sampled request at a time."""

    def __init__(self, port: int, tokens: int) -> None:
        self.loop = asyncio.new_event_loop()
        self.ws = self.loop.run_until_complete(
            connect(f"ws://127.0.0.1:{port}{WS_PATH}", compression=None, max_size=None)
        )
        self.tokens = tokens
        self.count = itertools.count()
        #: a new description per request that must compile a new grammar
        self.fresh = itertools.count()

    def body(self, variant: str, *, seed: int | None = None, fresh: bool = False) -> dict[str, Any]:
        """A request; `fresh` changes a description in its schemas: a grammar the server
        has never compiled, which allows the same answers."""
        n = next(self.count)
        body: dict[str, Any] = {
            "request_id": f"c{n}",
            "model": MODEL_NAME,
            "messages": [{"role": "user", "content": PROMPT}],
            "temperature": 1.0,
            "seed": n if seed is None else seed,
            "max_tokens": self.tokens,
            "stream_options": {"include_usage": True, "continuous_usage_stats": True},
        }
        # Tools are rendered into the prompt, so a new description changes the prompt
        # too: `first_token` puts it in the prefix cache before it measures.
        described = {"description": f"version {next(self.fresh)}"} if fresh else {}
        if variant == UNCONSTRAINED:
            body["ignore_eos"] = True
        elif variant == SCHEMA:
            body["response_format"] = {
                "type": "json_schema",
                "json_schema": {"name": "ticket", "schema": {**TICKET, **described}},
            }
        else:
            body["tools"] = [
                {
                    "type": "function",
                    "function": {"name": name, "parameters": {**params, **described}},
                }
                for name, params in AGENT_TOOLS
            ]
            body["tool_choice"] = "required"
        return body

    def request(self, body: dict[str, Any]) -> tuple[float, int, float, int]:
        """(seconds to the first token's frame, tokens then, seconds to the last, tokens)."""
        return self.loop.run_until_complete(self._request(body))

    async def _request(self, body: dict[str, Any]) -> tuple[float, int, float, int]:
        sent = time.perf_counter()
        await self.ws.send(orjson.dumps(body).decode())
        first = last = 0.0
        first_count = last_count = 0
        while True:
            frame = orjson.loads(await self.ws.recv())
            now = time.perf_counter()
            if frame.get("object") == "chat.completion.chunk":
                usage = frame.get("usage")
                if frame.get("choices") and usage and usage["completion_tokens"] > last_count:
                    if not first:
                        first, first_count = now, usage["completion_tokens"]
                    last, last_count = now, usage["completion_tokens"]
            elif frame.get("type") in ("response.done", "error"):
                break
        if frame.get("type") != "response.done" or frame.get("status") != "completed":
            raise RuntimeError(f"a {body.get('response_format') or 'tool'} request failed: {frame}")
        return first - sent, first_count, last - sent, last_count

    def decode(self, variant: str) -> tuple[float, int]:
        """(decode tokens/s, answers) over requests until `tokens` decode tokens are in."""
        seconds, tokens, answers = 0.0, 0, 0
        while tokens < self.tokens - 1 and answers < 200:
            first, first_count, last, last_count = self.request(self.body(variant))
            seconds += last - first
            tokens += last_count - first_count
            answers += 1
        return tokens / seconds, answers

    def first_token(self, variant: str, *, fresh: bool) -> float:
        """Seconds to the first token's frame of a request whose prompt is already in the
        server's prefix cache: an unconstrained request with the same prompt (tools
        included, which the chat template renders) goes first, so a known and a new
        grammar differ only by the compile and the new grammar's first lexer states.
        The seed is fixed: both give the same tokens."""
        body = self.body(variant, seed=FIRST_TOKEN_SEED, fresh=fresh)
        warm = {k: v for k, v in body.items() if k not in ("response_format", "tool_choice")}
        self.request({**warm, "request_id": f"{body['request_id']}-warm", "max_tokens": 1})
        return self.request(body)[0]

    def close(self) -> None:
        self.loop.run_until_complete(self.ws.close())
        self.loop.close()


def run(ctx: RunContext) -> ScenarioResult:
    from realtime.constrain.matcher import ConstraintCompiler

    p = Params.for_mode(ctx.quick)
    result = ScenarioResult(NAME, TITLE, SUMMARY, {**asdict(p), **SIZES[p.model]})
    model_dir = _model_dir(ctx, p)
    loop = Loop(model_dir, p.threads)
    specs = _specs(loop)
    compiler = ConstraintCompiler(loop.binding)
    starts: dict[str, Callable[[], Any] | None] = {UNCONSTRAINED: None}
    for variant, spec in specs.items():
        compiler.check(spec)
        starts[variant] = functools.partial(compiler.start, spec)
    argv = [
        "-m", "realtime", "serve", "--host", "127.0.0.1", "--port", "0",
        "--engine", "cpu", "--model", str(model_dir), "--model-name", MODEL_NAME,
        "--threads", str(p.threads), "--tool-parser", "hermes", "--reasoning-parser", "none",
        "--log-level", "warning", "--shutdown-grace", "2", "--no-ui",
    ]  # fmt: skip
    with running(start_server("realtime-cpu", argv, ctx.scratch, timeout=120.0)) as server:
        socket = ServerSocket(server.port, p.tokens)
        try:
            for _ in range(p.warmup):
                for variant in VARIANTS:
                    loop.decode(p.tokens, 0, starts[variant])
                    socket.decode(variant)
            for repeat in range(ctx.repeats):
                before = snapshot()
                _time_setup(result, loop, specs)
                for variant in rotated(VARIANTS, repeat):
                    rate, answers = socket.decode(variant)
                    result.metric(SERVER + variant, "decode", "tokens/s").runs.append(rate)
                    if variant in CONSTRAINED:
                        result.metric(SERVER + variant, "answers", "count").runs.append(answers)
                    seconds, mask_seconds, done = loop.decode(p.tokens, repeat, starts[variant])
                    result.metric(LOOP + variant, "decode", "tokens/s").runs.append(
                        (p.tokens - 1) / seconds
                    )
                    if variant in CONSTRAINED:
                        result.metric(LOOP + variant, "mask path per token", "us").runs.append(
                            mask_seconds / p.tokens * 1e6
                        )
                        result.metric(LOOP + variant, "answers", "count").runs.append(done)
                for variant in VARIANTS:
                    known = socket.first_token(variant, fresh=False)
                    result.metric(SERVER + variant, "first token, known grammar", "ms").runs.append(
                        known * 1e3
                    )
                    if variant in CONSTRAINED:
                        new = socket.first_token(variant, fresh=True)
                        result.metric(
                            SERVER + variant, "first token, new grammar", "ms"
                        ).runs.append(new * 1e3)
                result.metric("all", BACKGROUND, "cores").runs.append(
                    other_cores(before, snapshot())
                )
                ctx.log(
                    NAME,
                    f"run {repeat + 1}/{ctx.repeats}: "
                    + ", ".join(
                        f"{v} {result.metric(SERVER + v, 'decode', 'tokens/s').runs[-1]:.1f}"
                        for v in VARIANTS
                    )
                    + " tok/s through the server",
                )
        finally:
            socket.close()
    _judge(result, p, loop)
    return result


def _time_setup(result: ScenarioResult, loop: Loop, specs: dict[str, Any]) -> None:
    """The one-off costs: binding the tokenizer (once per engine) and compiling each
    grammar on an empty cache (once per new schema or tool set)."""
    from realtime.constrain.matcher import ConstraintCompiler
    from realtime.constrain.tokenizer import TokenizerBinding

    started = time.perf_counter()
    binding = TokenizerBinding(
        loop.tokenizer.backend,
        eos_token_ids=loop.binding.eos_token_ids,
        logits_width=loop.binding.width,
    )
    result.metric("setup", "tokenizer binding (once per engine)", "ms").runs.append(
        (time.perf_counter() - started) * 1e3
    )
    for variant, spec in specs.items():
        compiler = ConstraintCompiler(binding)
        started = time.perf_counter()
        compiler.check(spec)
        result.metric(variant, "compile (cache miss)", "ms").runs.append(
            (time.perf_counter() - started) * 1e3
        )


def _judge(result: ScenarioResult, p: Params, loop: Loop) -> None:
    for where in (SERVER, LOOP):
        base = result.metric(where + UNCONSTRAINED, "decode", "tokens/s").runs
        for variant in CONSTRAINED:
            ratio = result.metric(
                "ratio", f"{where}{variant} / {where}unconstrained (tokens/s)", "x"
            )
            ratio.runs = paired_ratios(
                result.metric(where + variant, "decode", "tokens/s").runs, base
            )
            if where == SERVER:
                result.goals.append(
                    Goal.judge(
                        f"constrained decode ({variant}) vs unconstrained, through the server",
                        f">= {GOAL}",
                        ratio.median,
                        "x",
                        ratio.median >= GOAL,
                    )
                )
    size = SIZES[p.model]
    result.notes.append(
        f"Model `{p.model}` from `realtime.testing.tiny_model` (Llama, random weights"
        + (
            f", hidden size {size['hidden_size']}, {size['num_layers']} layers"
            if size
            else ", the default 64-wide test model"
        )
        + f"; its tokenizer has {loop.binding.width} ids), float32, torch with {p.threads} "
        f"thread(s), temperature 1. {p.tokens} decode tokens per run and variant; the rate "
        "is taken from each answer's first token to its last (prefill and compile excluded). "
        "The server runs `--tool-parser hermes --reasoning-parser none`."
    )
    result.notes.append(
        "The time to the first token with a new grammar includes compiling it (on a worker "
        "thread, before the first chunk); with a known one the compiled grammar is reused."
    )
    result.notes.append(
        "The mask's cost grows with the vocabulary; this model's is small. Measured apart "
        "from this benchmark on BPE vocabularies trained locally, llguidance's mask took "
        "about 30 us per token (median) at 32k ids and about 110 us at 128k for the same "
        "kinds of schema."
    )
    result.charts.append(
        Chart(
            "decode speed with and without a grammar constraint",
            "tokens/s",
            "bars",
            [
                Series(
                    where.strip(),
                    [
                        (v, m.median, m.low, m.high)
                        for v in VARIANTS
                        for m in [result.metric(where + v, "decode", "tokens/s")]
                    ],
                )
                for where in (SERVER, LOOP)
            ],
        )
    )
