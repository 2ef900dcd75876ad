"""Measurements through a running server, as its clients see them.

Three transports for one stream's decode rate (raw SSE with httpx, the socket
with `websockets`, the `openai` SDK), then time to first token and
`cached_tokens` over turns, cache_salt isolation, and concurrent streams (SSE).
Every request is greedy with `ignore_eos`, so answers run to `max_tokens` and a
turn's text is the same every time.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from dataclasses import asdict, dataclass, field
from typing import Any

import httpx
import openai
from websockets.asyncio.client import connect

#: Filler for long system prompts: prompt length is what TTFT and reuse are about.
FILLER = (
    "The service keeps a log of every request it answers, the time it took, and "
    "the pages of cache it reused. "
)


@dataclass
class Stream:
    """One streamed answer as the client saw it."""

    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int | None
    ttft_s: float
    #: (tokens - 1) / (last content - first content): the decode rate
    tokens_per_s: float
    #: tokens / (last content - request sent): what a client waits for, prefill included
    end_to_end_tokens_per_s: float
    text: str = field(repr=False, default="")


@dataclass
class Turns:
    prompt_tokens_cold: int
    ttft_cold_ms: float
    cached_tokens_cold: int | None
    prompt_tokens_warm: int
    ttft_warm_ms: float
    cached_tokens_warm: int | None


def _rate(tokens: int, first: float | None, last: float | None) -> float:
    if first is None or last is None or last <= first or tokens < 2:
        return 0.0
    return (tokens - 1) / (last - first)


class ServedClient:
    """Requests to one server (`base` like http://127.0.0.1:PORT)."""

    def __init__(self, base: str, model: str):
        self.base = base
        self.model = model
        self.http = httpx.AsyncClient(
            base_url=base, timeout=120, limits=httpx.Limits(max_connections=256)
        )

    async def aclose(self) -> None:
        await self.http.aclose()

    def body(self, messages: list[dict[str, Any]], max_tokens: int, **extra: Any) -> dict[str, Any]:
        return {
            "model": self.model,
            "messages": messages,
            "max_tokens": max_tokens,
            "temperature": 0,
            "ignore_eos": True,
            **extra,
        }

    async def sse(self, body: dict[str, Any]) -> Stream:
        """POST /v1/chat/completions with stream: true; reads the raw event stream."""
        payload = {**body, "stream": True, "stream_options": {"include_usage": True}}
        start = time.perf_counter()
        first = last = None
        usage: dict[str, Any] = {}
        text = []
        async with self.http.stream("POST", "/v1/chat/completions", json=payload) as response:
            response.raise_for_status()
            async for line in response.aiter_lines():
                if not line.startswith("data: ") or line == "data: [DONE]":
                    continue
                chunk = json.loads(line[6:])
                if chunk.get("usage"):
                    usage = chunk["usage"]
                for choice in chunk.get("choices") or ():
                    content = (choice.get("delta") or {}).get("content")
                    if content:
                        last = time.perf_counter()
                        first = first if first is not None else last
                        text.append(content)
        return _stream(usage, start, first, last, "".join(text))

    async def socket(self, body: dict[str, Any]) -> Stream:
        """One request over /v1/realtime; usage comes with `response.done`."""
        url = self.base.replace("http://", "ws://") + "/v1/realtime"
        async with connect(url, max_size=None) as ws:
            start = time.perf_counter()
            await ws.send(json.dumps({**body, "request_id": "proof"}))
            first = last = None
            text = []
            while True:
                frame = json.loads(await ws.recv())
                if frame.get("object") == "chat.completion.chunk":
                    for choice in frame.get("choices") or ():
                        content = (choice.get("delta") or {}).get("content")
                        if content:
                            last = time.perf_counter()
                            first = first if first is not None else last
                            text.append(content)
                elif frame.get("type") == "response.done":
                    return _stream(frame.get("usage") or {}, start, first, last, "".join(text))
                elif frame.get("type") == "error":
                    raise RuntimeError(f"the socket answered an error: {frame}")

    async def sdk(self, body: dict[str, Any]) -> Stream:
        """The same request through the `openai` SDK's streaming call."""
        extra = {k: v for k, v in body.items() if k not in ("model", "messages", "max_tokens")}
        extra.pop("temperature", None)
        async with openai.AsyncOpenAI(
            base_url=self.base + "/v1", api_key="proof", max_retries=0
        ) as client:
            start = time.perf_counter()
            first = last = None
            usage: dict[str, Any] = {}
            text = []
            stream = await client.chat.completions.create(
                model=body["model"],
                messages=body["messages"],
                max_tokens=body["max_tokens"],
                temperature=0,
                stream=True,
                stream_options={"include_usage": True},
                extra_body=extra,
            )
            async for chunk in stream:
                if chunk.usage is not None:
                    usage = chunk.usage.model_dump()
                for choice in chunk.choices:
                    if choice.delta.content:
                        last = time.perf_counter()
                        first = first if first is not None else last
                        text.append(choice.delta.content)
        return _stream(usage, start, first, last, "".join(text))


def _stream(
    usage: dict[str, Any], start: float, first: float | None, last: float | None, text: str
) -> Stream:
    tokens = int(usage.get("completion_tokens") or 0)
    details = usage.get("prompt_tokens_details") or {}
    cached = details.get("cached_tokens")
    ttft = (first - start) if first is not None else float("nan")
    prompt = int(usage.get("prompt_tokens") or 0)
    whole = tokens / (last - start) if last is not None and last > start else 0.0
    return Stream(prompt, tokens, cached, ttft, _rate(tokens, first, last), whole, text)


def system_prompt(words: int, nonce: str) -> str:
    """A system message of about `words` words that no earlier request had (the report
    gives the prompt's length in tokens, which depends on the tokenizer)."""
    repeats = max(1, words // len(FILLER.split()))
    return f"Session {nonce}. " + FILLER * repeats


async def decode_rates(
    client: ServedClient, tokens: int
) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
    """One stream per transport, after a full-length warm-up request over SSE (the first
    pass over each sequence length pays for kernel setup), which is returned on its own."""
    messages = [{"role": "user", "content": "Write a long story about a lighthouse."}]
    body = client.body(messages, tokens)
    warm_up = await client.sse(body)
    first = {k: v for k, v in asdict(warm_up).items() if k != "text"}
    out = {}
    for name, call in (("sse", client.sse), ("socket", client.socket), ("openai_sdk", client.sdk)):
        stream = await call(body)
        out[name] = {k: v for k, v in asdict(stream).items() if k != "text"}
    return first, out


async def turns(client: ServedClient, system_words: int, *, speculative: bool = False) -> Turns:
    """Turn 1 on a prompt never seen (cold), then turn 2 continuing it (warm)."""
    system = {"role": "system", "content": system_prompt(system_words, uuid.uuid4().hex)}
    first_user = {"role": "user", "content": "Summarize the log rules."}
    extra: dict[str, Any] = {}
    if speculative:
        extra["nvext"] = {"agent_hints": {"speculative_prefill": True}}
    one = await client.sse(client.body([system, first_user], 8, **extra))
    if speculative:
        await asyncio.sleep(1.0)  # the warm-up runs while the "client thinks"
    messages = [
        system,
        first_user,
        {"role": "assistant", "content": one.text},
        {"role": "user", "content": "And how long are they kept?"},
    ]
    two = await client.sse(client.body(messages, 8))
    return Turns(
        one.prompt_tokens,
        one.ttft_s * 1000,
        one.cached_tokens,
        two.prompt_tokens,
        two.ttft_s * 1000,
        two.cached_tokens,
    )


async def salt_isolation(client: ServedClient, system_words: int) -> dict[str, Any]:
    """The same prompt under salt a twice, then under salt b: b must reuse nothing of a's."""
    system = {"role": "system", "content": system_prompt(system_words, uuid.uuid4().hex)}
    messages = [system, {"role": "user", "content": "Which tenant am I?"}]
    first = await client.sse(client.body(messages, 4, cache_salt="tenant-a"))
    same = await client.sse(client.body(messages, 4, cache_salt="tenant-a"))
    other = await client.sse(client.body(messages, 4, cache_salt="tenant-b"))
    return {
        "first_cached_tokens": first.cached_tokens,
        "same_salt_cached_tokens": same.cached_tokens,
        "other_salt_cached_tokens": other.cached_tokens,
        "isolated": other.cached_tokens == 0 and bool(same.cached_tokens),
    }


async def aggregate(client: ServedClient, streams: int, tokens: int) -> dict[str, Any]:
    """`streams` SSE requests at once; total completion tokens over the wall time."""
    messages = [{"role": "user", "content": "Write a long story about a lighthouse."}]
    body = client.body(messages, tokens)
    start = time.perf_counter()
    results = await asyncio.gather(*(client.sse(body) for _ in range(streams)))
    seconds = time.perf_counter() - start
    total = sum(r.completion_tokens for r in results)
    return {
        "streams": streams,
        "tokens": total,
        "seconds": seconds,
        "tokens_per_s": total / seconds if seconds > 0 else 0.0,
    }


#: A schema with an enum, a boolean and a bounded integer (issue 17's check).
PICK_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "color": {"enum": ["red", "green", "blue"]},
        "ok": {"type": "boolean"},
        "n": {"type": "integer", "minimum": 1, "maximum": 9},
    },
    "required": ["color", "ok", "n"],
    "additionalProperties": False,
}
PICK_TOOL: dict[str, Any] = {
    "type": "function",
    "function": {"name": "pick", "description": "Pick one.", "parameters": PICK_SCHEMA},
}


def _valid_pick(value: Any) -> bool:
    return (
        isinstance(value, dict)
        and set(value) == {"color", "ok", "n"}
        and value["color"] in ("red", "green", "blue")
        and isinstance(value["ok"], bool)
        and type(value["n"]) is int
        and 1 <= value["n"] <= 9
    )


async def structured(client: ServedClient, samples: int) -> dict[str, Any]:
    """Constrained decoding on the real engine: sampled answers (temperature 1, one seed
    each) under a json_schema, and under tool_choice "required", must all validate."""
    messages = [{"role": "user", "content": "Pick a color, a flag and a number."}]
    counts = {"json_schema_valid": 0, "tool_required_valid": 0, "samples": samples}
    failures: list[str] = []
    for seed in range(samples):
        for kind in ("json_schema", "tool_required"):
            body = client.body(messages, 300)
            body.pop("ignore_eos")
            # The built model's template thinks unless told not to, and a random model may
            # think until max_tokens: the answer alone is what is checked here.
            body.update(temperature=1.0, seed=seed, chat_template_kwargs={"enable_thinking": False})
            if kind == "json_schema":
                body["response_format"] = {
                    "type": "json_schema",
                    "json_schema": {"name": "pick", "schema": PICK_SCHEMA, "strict": True},
                }
            else:
                body.update(tools=[PICK_TOOL], tool_choice="required")
            response = await client.http.post("/v1/chat/completions", json=body)
            answer = response.json()
            try:
                message = answer["choices"][0]["message"]
                if kind == "json_schema":
                    ok = _valid_pick(json.loads(message["content"]))
                else:  # parallel calls are allowed: every one must validate
                    calls = message["tool_calls"]
                    ok = bool(calls) and all(
                        call["function"]["name"] == "pick"
                        and _valid_pick(json.loads(call["function"]["arguments"]))
                        for call in calls
                    )
            except (KeyError, IndexError, TypeError, ValueError):
                ok = False
            if ok:
                counts[f"{kind}_valid"] += 1
            else:
                failures.append(f"{kind} seed {seed}: {json.dumps(answer)[:300]}")
    return {**counts, "failures": failures[:4]}
