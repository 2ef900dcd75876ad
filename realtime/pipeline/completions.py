"""The /v1/completions pipeline: prompts in, `text_completion` chunks out.

It shares everything below the response shape with chat: the engine, the path
to engine requests (`engine_requests.py`: model check, token budget with the
server's cap, stops, sampling and the model's defaults, the id checks), the
visible-text loop (`generation.py`) and the errors. Each prompt becomes one
choice; several prompts are generated concurrently and their chunks interleave,
each tagged with its choice index, as OpenAI does.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator
from contextlib import aclosing
from dataclasses import dataclass
from typing import Any

from realtime.chat.completion_chunks import (
    CompletionChunks,
    fold_completion_chunks,
    new_text_completion_id,
)
from realtime.chat.stops import StopMatcher
from realtime.engine.base import EngineRequest
from realtime.pipeline.budget import OutputAsk, PromptOverflow
from realtime.pipeline.chat import ChatPipeline
from realtime.pipeline.constraints import ConstraintPlan
from realtime.pipeline.generation import text_steps
from realtime.pipeline.sampling import check_token_ids
from realtime.protocol.completions import CompletionRequest
from realtime.protocol.errors import EngineError, InvalidRequestError, UnsupportedFeatureError


@dataclass(slots=True)
class PreparedCompletion:
    request: CompletionRequest
    engine_requests: list[EngineRequest]
    prompt_texts: list[str]
    chunks: CompletionChunks
    #: The `response_format` constraint still to compile (`constrain()`), shared by
    #: every choice: each starts its own matcher from it.
    constraint: ConstraintPlan | None = None


class CompletionPipeline:
    """Text completions on the chat pipeline's engine and model."""

    def __init__(self, chat: ChatPipeline):
        self.chat = chat

    def prepare(self, request: CompletionRequest, *, stream: bool = True) -> PreparedCompletion:
        """Validate against the model and build one engine request per prompt."""
        chat = self.chat
        requests = chat.requests
        requests.check_model(request)
        for name, value in (("n", request.n), ("best_of", request.best_of)):
            if value is not None and value > 1:
                raise UnsupportedFeatureError(
                    f"{name} > 1 is not supported; send one prompt per choice", param=name
                )
        if request.suffix is not None:
            raise UnsupportedFeatureError("suffix (insertion) is not supported", param="suffix")
        if request.echo and request.logprobs is not None:
            raise UnsupportedFeatureError(
                "echo with logprobs needs the prompt's logprobs, which the engines do not report",
                param="echo",
            )
        info = requests.check_ready()
        completion_id = new_text_completion_id()
        prompts: list[list[int]] = []
        texts: list[str] = []
        request_ids: list[str] = []
        counts: list[int] = []
        for index, prompt in enumerate(request.prompts):
            if isinstance(prompt, str):
                ids, text = info.tokenizer.encode(prompt), prompt
            else:
                check_token_ids(prompt, info.vocab_size, "prompt")
                ids, text = list(prompt), info.tokenizer.decode(prompt)
            prompts.append(ids)
            texts.append(text)
            request_ids.append(f"{completion_id}-{index}")
            counts.append(len(ids))
        engine_requests = requests.build(
            request,
            prompts,
            request_ids,
            ask=OutputAsk(
                request.max_tokens,
                explicit="max_tokens" in request.model_fields_set,
                field="max_tokens",
            ),
            overflow=_overflow,
            logprobs=request.logprobs,
        )
        chunks = CompletionChunks(
            model=chat.model_name,
            prompt_tokens=counts,
            include_usage=request.include_usage or not stream,
            logprobs=request.logprobs,
            system_fingerprint=chat.system_fingerprint,
            completion_id=completion_id,
        )
        response_format = request.response_format
        plan = chat.constraints.plan_completion(
            response_format.model_dump(by_alias=True, exclude_none=True)
            if response_format is not None
            else None
        )
        return PreparedCompletion(request, engine_requests, texts, chunks, plan)

    async def constrain(self, prepared: PreparedCompletion) -> None:
        """Compile the `response_format` constraint onto every choice's engine request
        (see `ChatPipeline.constrain`; `stream` calls it too)."""
        plan, prepared.constraint = prepared.constraint, None
        if plan is not None:
            compiled = await self.chat.constraints.compile(plan)
            for engine_request in prepared.engine_requests:
                engine_request.constraint = compiled

    async def stream(self, prepared: PreparedCompletion) -> AsyncGenerator[dict[str, Any], None]:
        """Chunks of every choice; closing this closes every choice's engine iterator."""
        await self.constrain(prepared)
        queue: asyncio.Queue[dict[str, Any] | BaseException | None] = asyncio.Queue()
        tasks = [
            asyncio.create_task(self._choice(prepared, index, queue))
            for index in range(len(prepared.engine_requests))
        ]
        try:
            remaining = len(tasks)
            while remaining:
                item = await queue.get()
                if item is None:
                    remaining -= 1
                elif isinstance(item, BaseException):
                    raise item
                else:
                    yield item
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
        if prepared.chunks.include_usage:
            yield prepared.chunks.usage_chunk()

    async def _choice(
        self,
        prepared: PreparedCompletion,
        index: int,
        queue: asyncio.Queue[dict[str, Any] | BaseException | None],
    ) -> None:
        request, chunks = prepared.request, prepared.chunks
        tokenizer = self.chat.engine.info.tokenizer
        try:
            if request.echo:
                queue.put_nowait(chunks.echo_chunk(index, prepared.prompt_texts[index]))
            stops = StopMatcher(
                request.stop_strings, include_stop=bool(request.include_stop_str_in_output)
            )
            steps = text_steps(
                self.chat.engine,
                prepared.engine_requests[index],
                tokenizer,
                stops,
                skip_special_tokens=request.skip_special_tokens is not False,
                meter=self.chat.meter,
            )
            async with aclosing(steps):
                async for step in steps:
                    chunk = chunks.text_chunk(
                        index,
                        step.text,
                        token_ids=step.token_ids,
                        logprobs=step.logprobs,
                        tokenizer=tokenizer,
                    )
                    if chunk is not None:
                        queue.put_nowait(chunk)
                    if step.finish is not None:
                        queue.put_nowait(chunks.finish_chunk(index, step.finish))
                        if step.error is not None or step.finish.value == "error":
                            raise EngineError(step.error or "the engine failed while generating")
            queue.put_nowait(None)
        except asyncio.CancelledError:
            raise
        except BaseException as exc:
            queue.put_nowait(exc)

    async def complete(self, prepared: PreparedCompletion) -> dict[str, Any]:
        collected: list[dict[str, Any]] = []
        async with aclosing(self.stream(prepared)) as chunks:
            async for chunk in chunks:
                collected.append(chunk)
        return fold_completion_chunks(collected)


def _overflow(overflow: PromptOverflow) -> InvalidRequestError:
    return InvalidRequestError(
        f"prompt {overflow.index} is {overflow.prompt_tokens} tokens and asks for "
        f"{overflow.asked} more; the model's context is {overflow.context_length} tokens",
        param="max_tokens" if overflow.room > 0 else "prompt",
        code="context_length_exceeded",
    )
