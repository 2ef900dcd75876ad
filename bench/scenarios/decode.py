"""Decode speed: the CPU engine through the server vs the same model's bare transformers loop.

* `server` - `python -m realtime serve --engine cpu --model DIR --threads T` as its
  own process, one /v1/realtime socket (the `websockets` client), one request with
  `temperature: 0`, `ignore_eos` and `max_tokens: N`. Decode speed is timed on the
  client from the first token's frame to the last token's frame, so the prefill
  (and the request's way in) is left out; the tokens in between are counted from
  each chunk's continuous usage, since a chunk may carry several.
* `bare transformers` - the same model directory loaded with
  `AutoModelForCausalLM` in the benchmark process, with the same torch thread
  count, fed the same prompt ids (the chat template applied by the tokenizer), then
  a greedy loop over a `DynamicCache`, timed from the first token to the N-th.

The two alternate, the order rotating per repeat, so the ratio of each repeat
comes from runs seconds apart. Both are greedy, so they must produce the same
token ids; the server returns its ids through `nvext.extra_fields`.
"""

from __future__ import annotations

import asyncio
import time
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

NAME = "decode"
TITLE = "Decode speed (CPU engine vs bare transformers)"
SUMMARY = (
    "Tokens/s of greedy decoding after the first token: the CPU engine through the server "
    "(one /v1/realtime socket) against the same model's bare `transformers` loop with a "
    "`DynamicCache`, same prompt, same torch threads, alternating in the same run."
)

SERVER, BARE = "server", "bare transformers"
VARIANTS = (SERVER, BARE)
MODEL_NAME = "bench-model"
PROMPT = "Write a short note about streaming tokens over a socket."
#: Model sizes, as in bench/multiturn: the tiny test model, and one whose forward pass
#: dominates the Python overhead around it.
SIZES = {"tiny": {}, "small": {"hidden_size": 512, "num_layers": 4, "intermediate_size": 2048}}
GOAL = 0.9


@dataclass(frozen=True)
class Params:
    tokens: int
    model: str
    threads: int = 1
    warmup: int = 1

    @classmethod
    def for_mode(cls, quick: bool) -> Params:
        return cls(tokens=32, model="tiny") if quick else cls(tokens=256, model="small")


def _model_dir(ctx: RunContext, params: Params) -> Path:
    from realtime.testing.tiny_model import ModelSize, cached_tiny_model

    return cached_tiny_model(ctx.scratch / "models", size=ModelSize(**SIZES[params.model]))


class Bare:
    """The model in this process, decoding greedily with transformers alone."""

    def __init__(self, model_dir: Path, threads: int):
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        self.torch = torch
        torch.set_num_threads(threads)
        tokenizer = AutoTokenizer.from_pretrained(model_dir)
        # Typed as the union of every tokenize/return_dict combination; tokenize=True gives ids.
        ids: Any = tokenizer.apply_chat_template(
            [{"role": "user", "content": PROMPT}], add_generation_prompt=True, tokenize=True
        )
        if not isinstance(ids, list):  # newer transformers return a BatchEncoding
            ids = ids["input_ids"]
        self.prompt_ids: list[int] = [int(i) for i in ids]
        # Any, as in realtime's cpu engine: transformers leaves the model's eval() untyped.
        model: Any = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
        self.model = model.eval()

    def decode(self, tokens: int) -> tuple[float, list[int]]:
        """Greedy decode of `tokens` tokens: (seconds from first token to last, the ids)."""
        from transformers import DynamicCache

        torch = self.torch
        with torch.inference_mode():
            cache = DynamicCache(config=self.model.config)
            out = self.model(
                input_ids=torch.tensor([self.prompt_ids]),
                past_key_values=cache,
                use_cache=True,
                logits_to_keep=1,
            )
            token = int(out.logits[0, -1].argmax())
            generated = [token]
            first = time.perf_counter()
            while len(generated) < tokens:
                out = self.model(
                    input_ids=torch.tensor([[token]]),
                    past_key_values=cache,
                    use_cache=True,
                    logits_to_keep=1,
                )
                token = int(out.logits[0, -1].argmax())
                generated.append(token)
            return time.perf_counter() - first, generated


class Socket:
    """One /v1/realtime socket to the server, one greedy request at a time."""

    def __init__(self, port: int, tokens: int):
        self.loop = asyncio.new_event_loop()
        self.ws = self.loop.run_until_complete(
            connect(f"ws://127.0.0.1:{port}{WS_PATH}", compression=None, max_size=None)
        )
        self.tokens = tokens
        self.count = 0
        #: frames with choices in the last answer (one per token when none is held back)
        self.frames = 0

    def decode(self) -> tuple[float, list[int], int]:
        """(seconds per decoded token, between the first token's frame and the last's;
        the ids; prompt tokens)."""
        return self.loop.run_until_complete(self._decode())

    async def _decode(self) -> tuple[float, list[int], int]:
        self.count += 1
        request: dict[str, Any] = {
            "type": "response.create",
            "request_id": f"d{self.count}",
            "model": MODEL_NAME,
            "messages": [{"role": "user", "content": PROMPT}],
            "temperature": 0,
            "max_tokens": self.tokens,
            "ignore_eos": True,
            "nvext": {"extra_fields": ["completion_token_ids"]},
            # every chunk then says how many tokens are out so far: a chunk may carry
            # several (text held back until a UTF-8 character is complete)
            "stream_options": {"include_usage": True, "continuous_usage_stats": True},
        }
        await self.ws.send(orjson.dumps(request).decode())
        first = last = 0.0
        first_count = last_count = 0
        ids: list[int] = []
        self.frames = 0
        while True:
            frame = orjson.loads(await self.ws.recv())
            now = time.perf_counter()
            if frame.get("object") == "chat.completion.chunk":
                usage = frame.get("usage")
                if frame.get("choices") and usage and usage["completion_tokens"] > last_count:
                    if not first:
                        first, first_count = now, usage["completion_tokens"]
                    last, last_count = now, usage["completion_tokens"]
                    self.frames += 1
                nvext = frame.get("nvext") or {}
                ids = nvext.get("completion_token_ids", ids)
            elif frame.get("type") in ("response.done", "error"):
                break
        if frame.get("type") != "response.done" or frame.get("status") != "completed":
            raise RuntimeError(f"decode request failed: {frame}")
        if last_count != self.tokens or last_count <= first_count:
            raise RuntimeError(f"{last_count} tokens streamed, {self.tokens} asked for")
        per_token = (last - first) / (last_count - first_count)
        return per_token, ids, int(frame["usage"]["prompt_tokens"])

    def close(self) -> None:
        self.loop.run_until_complete(self.ws.close())
        self.loop.close()


def run(ctx: RunContext) -> ScenarioResult:
    p = Params.for_mode(ctx.quick)
    result = ScenarioResult(NAME, TITLE, SUMMARY, {**asdict(p), **SIZES[p.model]})
    model_dir = _model_dir(ctx, p)
    argv = [
        "-m", "realtime", "serve", "--host", "127.0.0.1", "--port", "0",
        "--engine", "cpu", "--model", str(model_dir), "--model-name", MODEL_NAME,
        "--threads", str(p.threads), "--log-level", "warning", "--shutdown-grace", "2",
        "--no-ui",
    ]  # fmt: skip
    bare = Bare(model_dir, p.threads)
    matches: list[float] = []
    with running(start_server("realtime-cpu", argv, ctx.scratch, timeout=120.0)) as server:
        socket = Socket(server.port, p.tokens)
        try:
            for _ in range(p.warmup):
                _, server_ids, prompt_tokens = socket.decode()
                _, bare_ids = bare.decode(p.tokens)
            if prompt_tokens != len(bare.prompt_ids):
                raise RuntimeError(
                    f"prompt differs: server {prompt_tokens} tokens, bare {len(bare.prompt_ids)}"
                )
            for repeat in range(ctx.repeats):
                before = snapshot()
                seconds: dict[str, float] = {}
                for variant in rotated(VARIANTS, repeat):
                    if variant == SERVER:
                        seconds[SERVER], server_ids, _ = socket.decode()
                    else:
                        span, bare_ids = bare.decode(p.tokens)
                        seconds[BARE] = span / (p.tokens - 1)
                result.metric("all", BACKGROUND, "cores").runs.append(
                    other_cores(before, snapshot())
                )
                for variant in VARIANTS:
                    rate = 1.0 / seconds[variant]
                    result.metric(variant, "decode", "tokens/s").runs.append(rate)
                same = server_ids == bare_ids and len(bare_ids) == p.tokens
                matches.append(1.0 if same else 0.0)
                result.metric("check", "same token ids", "1 = yes").runs.append(matches[-1])
                ctx.log(
                    NAME,
                    f"run {repeat + 1}/{ctx.repeats}: "
                    + ", ".join(
                        f"{v} {result.metric(v, 'decode', 'tokens/s').runs[-1]:.1f} tok/s"
                        for v in VARIANTS
                    )
                    + f", same ids: {same}",
                )
            result.detail["token_ids"] = {SERVER: server_ids, BARE: bare_ids}
            result.detail["server_token_frames"] = socket.frames
        finally:
            socket.close()
    _judge(result, p, all(m == 1.0 for m in matches))
    return result


def _judge(result: ScenarioResult, p: Params, same: bool) -> None:
    ratio = result.metric("ratio", "server / bare (decode tokens/s)", "x")
    ratio.runs = paired_ratios(
        result.metric(SERVER, "decode", "tokens/s").runs,
        result.metric(BARE, "decode", "tokens/s").runs,
    )
    result.goals.append(
        Goal.judge(
            "decode tokens/s: server vs bare transformers",
            f">= {GOAL}",
            ratio.median,
            "x",
            ratio.median >= GOAL,
        )
    )
    result.goals.append(
        Goal.judge(
            "greedy token ids identical to the bare loop",
            "every run",
            min(result.metric("check", "same token ids", "1 = yes").runs, default=float("nan")),
            "",
            same,
        )
    )
    size = SIZES[p.model]
    result.notes.append(
        f"Model `{p.model}` from `realtime.testing.tiny_model` (Llama, random weights"
        + (
            f", hidden size {size['hidden_size']}, {size['num_layers']} layers, "
            f"intermediate size {size['intermediate_size']}"
            if size
            else ", the default 64-wide test model"
        )
        + f"), float32, torch with {p.threads} thread(s) in both. {p.tokens} tokens per "
        f"request; the rate is tokens over the time from the first token to the last, "
        "prefill excluded. On the server side the tokens are counted from each chunk's "
        "continuous usage (`stream_options.continuous_usage_stats`), since a chunk can carry "
        "more than one token."
    )
    result.notes.append(
        "The server's time is taken on the client, so it includes serialising each chunk, "
        "the socket and the client's parsing; the bare loop's is the forward passes and "
        "argmax only."
    )
    result.charts.append(
        Chart(
            "decode speed",
            "tokens/s",
            "bars",
            [
                Series(
                    "decode",
                    [
                        (v, m.median, m.low, m.high)
                        for v in VARIANTS
                        for m in [result.metric(v, "decode", "tokens/s")]
                    ],
                )
            ],
        )
    )
