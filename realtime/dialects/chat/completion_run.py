"""One text completion on the pipeline: its typed events rendered as `text_completion` chunks.

    CompletionRequest -> completion_generation() -> pipeline.prepare() -> CompletionRun
    CompletionRun.stream(): ChoiceEcho / ChoiceStep / ChoiceFinish -> CompletionChunks

The completions pipeline yields typed per-choice events, as the chat pipeline
does; the wire shape (OpenAI's `text_completion` chunk, its completions-style
logprobs, the usage chunk) is made here, as `ChatRun` makes chat chunks.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator
from contextlib import aclosing
from typing import Any

from realtime.chat.completion_chunks import CompletionChunks, fold_completion_chunks
from realtime.dialects.chat.build import completion_generation
from realtime.dialects.chat.completions import CompletionRequest
from realtime.pipeline.completions import (
    ChoiceEcho,
    ChoiceFinish,
    CompletionPipeline,
    PreparedCompletion,
)
from realtime.protocol.generation_request import owned_by


class CompletionRun:
    """A prepared text completion and the renderer of its chunks."""

    __slots__ = ("chunks", "pipeline", "prepared")

    def __init__(
        self,
        pipeline: CompletionPipeline,
        prepared: PreparedCompletion,
        *,
        stream: bool,
        include_usage: bool,
    ) -> None:
        self.pipeline = pipeline
        self.prepared = prepared
        chat = pipeline.chat
        self.chunks = CompletionChunks(
            model=chat.model_name,
            prompt_tokens=prepared.prompt_tokens,
            # a non-streamed answer always carries its usage
            include_usage=include_usage or not stream,
            logprobs=prepared.request.logprobs,
            system_fingerprint=chat.system_fingerprint,
            completion_id=prepared.id,
        )

    @classmethod
    def prepare(
        cls,
        pipeline: CompletionPipeline,
        request: CompletionRequest,
        *,
        stream: bool = True,
        session_id: str | None = None,
        cache_salt: str | None = None,
    ) -> CompletionRun:
        """Everything that can fail before the answer starts (RealtimeError), except the
        grammar's compile: `constrain()`. `session_id` and `cache_salt` as `ChatRun`'s."""
        generation = owned_by(completion_generation(request), cache_salt)
        prepared = pipeline.prepare(generation, echo=bool(request.echo), session_id=session_id)
        return cls(pipeline, prepared, stream=stream, include_usage=request.include_usage)

    @property
    def id(self) -> str:
        return self.prepared.id

    async def constrain(self) -> None:
        """Compile the `response_format` grammar, off the event loop, before the first chunk."""
        await self.pipeline.constrain(self.prepared)

    async def stream(self) -> AsyncGenerator[dict[str, Any], None]:
        """Every chunk of every choice, then the usage chunk when asked for; closing it
        closes every choice's engine iterator."""
        chunks = self.chunks
        tokenizer = self.pipeline.chat.engine.info.tokenizer
        async with aclosing(self.pipeline.events(self.prepared)) as events:
            async for event in events:
                if isinstance(event, ChoiceFinish):
                    yield chunks.finish_chunk(event.index, event.reason)
                elif isinstance(event, ChoiceEcho):
                    yield chunks.echo_chunk(event.index, event.text)
                else:
                    step = event.step
                    chunk = chunks.text_chunk(
                        event.index,
                        step.text,
                        token_ids=step.token_ids,
                        logprobs=step.logprobs,
                        tokenizer=tokenizer,
                    )
                    if chunk is not None:
                        yield chunk
        if chunks.include_usage:
            yield chunks.usage_chunk()

    async def complete(self) -> dict[str, Any]:
        """The non-streamed `text_completion`, folded from the same chunks."""
        collected: list[dict[str, Any]] = []
        async with aclosing(self.stream()) as chunks:
            async for chunk in chunks:
                collected.append(chunk)
        return fold_completion_chunks(collected)

    def usage(self) -> dict[str, Any]:
        return self.chunks.usage()
