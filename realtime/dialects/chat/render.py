"""The pipeline's typed output as `chat.completion.chunk`s: one renderer for SSE and the socket.

`ChatChunks` holds the request's `DeltaGenerator`, configured from the wire
request's output options (`stream_options`, `logprobs`, `nvext.extra_fields`),
and renders each `Step` and the `Finish` the pipeline yields. Both transports
send exactly what it returns, so a socket client and an SSE client see identical
chunks; a non-streamed answer is the fold of the same chunks (`complete`).
"""

from __future__ import annotations

from collections.abc import AsyncGenerator
from contextlib import aclosing
from typing import Any

from realtime.chat.aggregate import ChunkAggregator
from realtime.chat.delta import DeltaGenerator
from realtime.dialects.chat.request import ChatCompletionRequest
from realtime.pipeline import ChatPipeline, PreparedChat
from realtime.pipeline.events import Finish, Step

Chunk = dict[str, Any]


class ChatChunks:
    """The chunks of one chat completion."""

    __slots__ = ("delta",)

    def __init__(
        self,
        request: ChatCompletionRequest,
        prepared: PreparedChat,
        pipeline: ChatPipeline,
        *,
        stream: bool,
    ) -> None:
        options = request.stream_options
        self.delta = DeltaGenerator(
            model=pipeline.model_name,
            prompt_tokens=prepared.usage.prompt_tokens,
            # A non-streamed answer is folded from chunks; it always needs the usage.
            include_usage=request.include_usage or not stream,
            continuous_usage=bool(options and options.continuous_usage_stats),
            logprobs=bool(request.logprobs),
            extra_fields=request.extra_fields,
            system_fingerprint=pipeline.system_fingerprint,
            completion_id=prepared.id,
        )

    def render(self, event: Step | Finish) -> list[Chunk]:
        """The chunks for one step (often one; none while text is held back), or the
        final chunks for the finish."""
        delta = self.delta
        if type(event) is Step:
            if event.cached_tokens is not None:
                delta.set_cached_tokens(event.cached_tokens)
            delta.add_tokens(event.token_ids)
            if event.events is None:
                chunk = delta.content_chunk(event.text, event.logprobs)
                return [chunk] if chunk is not None else []
            return delta.event_chunks(event.events, event.logprobs)
        assert isinstance(event, Finish)
        return delta.finish_chunks(event.reason)

    async def stream(
        self, pipeline: ChatPipeline, prepared: PreparedChat
    ) -> AsyncGenerator[Chunk, None]:
        """Every chunk of the answer (SSE's iterator); closing it closes the engine's."""
        render = self.render
        async with aclosing(pipeline.events(prepared)) as events:
            async for event in events:
                for chunk in render(event):
                    yield chunk

    async def complete(self, pipeline: ChatPipeline, prepared: PreparedChat) -> Chunk:
        """The non-streaming `chat.completion`, folded from the same chunks."""
        aggregator = ChunkAggregator()
        async with aclosing(self.stream(pipeline, prepared)) as chunks:
            async for chunk in chunks:
                aggregator.add(chunk)
        return aggregator.result()

    def usage(self) -> dict[str, Any]:
        """The usage so far, as chat chunks report it (the access log reads it)."""
        return self.delta.usage()
