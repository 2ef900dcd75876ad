"""Closed-loop streaming load: N workers, each sending chat requests back to back.

Both servers get the same bytes: `POST /v1/chat/completions` with `stream: true`,
greedy, `max_tokens` tokens, `ignore_eos` (so every answer has exactly that many
tokens), and `stream_options.include_usage` (the token count comes from the server's
own usage). Each worker keeps one keep-alive connection (`bench.wire.SseClient`: a
minimal parser, so the client's CPU stays small next to the servers'). A request's
time to first token is taken when the first event with content arrives.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass

import orjson

from bench.wire import SseClient

PATH = "/v1/chat/completions"


@dataclass(frozen=True)
class Answer:
    ttft: float
    tokens: int


@dataclass(frozen=True)
class LoadRun:
    answers: list[Answer]
    #: from the first request sent to the last answer completed
    seconds: float

    @property
    def tokens(self) -> int:
        return sum(answer.tokens for answer in self.answers)


def request_body(model: str, prompt: str, max_tokens: int) -> bytes:
    return orjson.dumps(
        {
            "model": model,
            "messages": [{"role": "user", "content": prompt}],
            "max_tokens": max_tokens,
            "temperature": 0,
            "ignore_eos": True,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
    )


class _Answer:
    """Watches one streamed answer's events."""

    def __init__(self, sent: float):
        self.sent = sent
        self.first: float | None = None
        self.usage: bytes | None = None

    def on_event(self, payload: bytes, now: float) -> None:
        if payload.startswith(b"[DONE]"):
            return
        if self.first is None:
            choices = orjson.loads(payload).get("choices") or []
            if choices and (choices[0].get("delta") or {}).get("content"):
                self.first = now
        if b'"completion_tokens"' in payload:
            self.usage = payload

    def result(self) -> Answer:
        if self.first is None or self.usage is None:
            raise RuntimeError("an answer had no content or no usage")
        tokens = int(orjson.loads(self.usage)["usage"]["completion_tokens"])
        return Answer(self.first - self.sent, tokens)


async def _worker(
    port: int, model: str, prompts: list[str], max_tokens: int, answers: list[Answer]
) -> None:
    client = await SseClient.connect("127.0.0.1", port)
    try:
        for prompt in prompts:
            watch = _Answer(time.perf_counter())
            status = await client.post_stream(
                PATH, request_body(model, prompt, max_tokens), watch.on_event, timeout=300
            )
            if status != 200:
                raise RuntimeError(f"the server answered {status}")
            answers.append(watch.result())
    finally:
        client.close()


async def closed_loop(
    port: int, model: str, *, concurrency: int, rounds: int, max_tokens: int, first: int = 0
) -> LoadRun:
    """`concurrency` workers, `rounds` requests each; prompts differ per request."""
    answers: list[Answer] = []
    started = time.perf_counter()
    await asyncio.gather(
        *(
            _worker(
                port,
                model,
                [prompt(first + worker * rounds + r) for r in range(rounds)],
                max_tokens,
                answers,
            )
            for worker in range(concurrency)
        )
    )
    return LoadRun(answers, time.perf_counter() - started)


def prompt(n: int) -> str:
    """A different short prompt per request, so no two answers start from the same state."""
    return f"Request {n}: write a short story about lighthouse number {n * 7919 % 1000}."
