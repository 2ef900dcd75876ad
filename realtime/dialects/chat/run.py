"""One chat completion on the pipeline, as both chat transports run it.

    ChatCompletionRequest -> chat_generation() -> pipeline.prepare() -> ChatRun
    ChatRun.stream(): the pipeline's typed output rendered as chunks (`ChatChunks`)

The HTTP route and the chat frames of the socket both go through a `ChatRun`, so
they prepare, constrain and render a request the same way: what the chat API adds
to the pipeline is in `build.py` (in) and `render.py` (out), and only here are
they put together.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator
from typing import Any

from realtime.chat.delta import DeltaGenerator
from realtime.dialects.chat.build import chat_generation
from realtime.dialects.chat.render import ChatChunks, Chunk
from realtime.dialects.chat.request import ChatCompletionRequest
from realtime.engine.base import EngineRequest
from realtime.pipeline import ChatPipeline, PreparedChat
from realtime.protocol.generation_request import owned_by


class ChatRun:
    """A prepared chat completion and the renderer of its chunks."""

    __slots__ = ("chunks", "pipeline", "prepared", "request")

    def __init__(
        self,
        pipeline: ChatPipeline,
        request: ChatCompletionRequest,
        prepared: PreparedChat,
        *,
        stream: bool,
    ) -> None:
        self.pipeline = pipeline
        self.request = request
        self.prepared = prepared
        self.chunks = ChatChunks(request, prepared, pipeline, stream=stream)

    @classmethod
    def prepare(
        cls,
        pipeline: ChatPipeline,
        request: ChatCompletionRequest,
        *,
        stream: bool = True,
        session_id: str | None = None,
        cache_salt: str | None = None,
    ) -> ChatRun:
        """Everything that can fail before the answer starts (RealtimeError), except the
        grammar's compile: `constrain()`. `session_id` and `cache_salt` are the cache
        scope the transport chose (`cache_salt` the caller's, ahead of the client's)."""
        generation = owned_by(chat_generation(request), cache_salt)
        prepared = pipeline.prepare(generation, stream=stream, session_id=session_id)
        return cls(pipeline, request, prepared, stream=stream)

    @property
    def id(self) -> str:
        return self.prepared.id

    @property
    def engine_request(self) -> EngineRequest:
        return self.prepared.engine_request

    @property
    def delta(self) -> DeltaGenerator:
        """The chunk builder: the completion's id, usage and finish reason as sent."""
        return self.chunks.delta

    async def constrain(self) -> None:
        """Compile the request's grammar, off the event loop, before the first chunk."""
        await self.pipeline.constrain(self.prepared)

    def stream(self) -> AsyncGenerator[Chunk, None]:
        """Every chunk of the answer; closing it closes the engine's iterator."""
        return self.chunks.stream(self.pipeline, self.prepared)

    async def complete(self) -> dict[str, Any]:
        """The non-streaming `chat.completion`, folded from the same chunks."""
        return await self.chunks.complete(self.pipeline, self.prepared)

    def usage(self) -> dict[str, Any]:
        return self.chunks.usage()
