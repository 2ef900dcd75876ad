"""A small engine that computes in a task of its own, and copies of it with one defect each.

The correct `PushEngine` passes the conformance kit; each defect makes exactly one
check fail, which `test_conformance.py` proves with the kit's message. It pushes
tokens from a producer task into a queue (as engines with a model thread do), so
a cancel that is not passed on really leaves work running.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator
from dataclasses import dataclass

from realtime.engine.base import EngineOutput, EngineRequest
from realtime.engine.echo import EchoTokenizer
from realtime.engine.errors import EngineRequestError
from realtime.model.generation import FinishReason, TokenLogprob
from realtime.model.info import ModelInfo
from realtime.model.template import ChatTemplate

EOS = 999


class PushTokenizer(EchoTokenizer):
    """The echo tokenizer with an EOS id, so the EOS checks run."""

    eos_token_ids: frozenset[int] = frozenset({EOS})


@dataclass(frozen=True)
class Defects:
    ignores_cancel: bool = False
    ignores_max_tokens: bool = False
    ignores_stop_ids: bool = False
    ignores_eos: bool = False
    no_finish_reason: bool = False
    plain_errors: bool = False
    not_streaming: bool = False
    no_logprobs: bool = False
    shared_state: bool = False
    ready_after_close: bool = False


class PushEngine:
    def __init__(self, defects: Defects = Defects()):
        self.defects = defects
        self.computed = 0
        self._shared = 0
        self._started = False
        self._closed = False
        self._info = ModelInfo(
            name="push",
            context_length=4096,
            tokenizer=PushTokenizer(),
            chat_template=ChatTemplate("{{ messages[-1].content }}"),
        )

    @property
    def info(self) -> ModelInfo:
        return self._info

    @property
    def ready(self) -> bool:
        return self._started and (not self._closed or self.defects.ready_after_close)

    @property
    def unavailable_reason(self) -> str | None:
        return None if self.ready else "the push engine is not running"

    async def start(self) -> None:
        self._started = True

    async def close(self) -> None:
        self._closed = True

    async def generate(self, request: EngineRequest) -> AsyncGenerator[EngineOutput, None]:
        if len(request.prompt_token_ids) >= self._info.context_length:
            if self.defects.plain_errors:
                raise ValueError("prompt too long")
            raise EngineRequestError("the prompt does not fit the context")
        queue: asyncio.Queue[EngineOutput | None] = asyncio.Queue()
        producer = asyncio.create_task(self._produce(request, queue))
        finished = False
        try:
            while True:
                output = await queue.get()
                if output is None:  # the no_finish_reason defect
                    return
                finished = output.finish_reason is not None
                yield output
                if finished:
                    return
        finally:
            if not finished and not self.defects.ignores_cancel:
                producer.cancel()

    async def _produce(
        self, request: EngineRequest, queue: asyncio.Queue[EngineOutput | None]
    ) -> None:
        d = self.defects
        base = sum(request.prompt_token_ids) % 1000
        stop = request.stop
        eos_first = request.sampling.logit_bias.get(EOS, 0.0) > 0
        held: list[EngineOutput] = []
        n = 0
        while True:
            await asyncio.sleep(0)
            n += 1
            self.computed += 1
            if d.shared_state:
                self._shared += 1
            token = EOS if eos_first else 1 + (base + n + self._shared) % 200
            reason = None
            on_token = False
            if token == EOS and not stop.ignore_eos and not d.ignores_eos:
                reason, on_token = FinishReason.EOS, True
            elif token in stop.stop_token_ids and not d.ignores_stop_ids:
                reason, on_token = FinishReason.STOP, True
            elif stop.max_tokens is not None and n >= stop.max_tokens:
                if not d.ignores_max_tokens:
                    reason = FinishReason.LENGTH
            elif n >= 5000:
                reason = FinishReason.LENGTH
            logprobs = None
            if request.logprobs is not None and not d.no_logprobs:
                top = [(token, -0.1)][: request.logprobs]
                logprobs = [TokenLogprob(token, -0.1, top)]
            output = EngineOutput([token], logprobs, reason, stopped_on_token=on_token)
            if reason is not None and d.no_finish_reason:
                await queue.put(EngineOutput([token], logprobs))
                await queue.put(None)
                return
            if d.not_streaming:
                held.append(output)
                if reason is None:
                    continue
                for item in held:
                    await queue.put(item)
                return
            await queue.put(output)
            if reason is not None:
                return
