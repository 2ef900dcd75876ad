"""One Messages API request on the pipeline, as the HTTP route runs it.

    MessagesRequest -> messages_generation() -> pipeline.prepare() -> MessagesRun
    MessagesRun.stream(): Anthropic's events;  complete(): the `Message` they fold into

and `count_tokens`: the prompt the same request would render, counted.
"""

from __future__ import annotations

import secrets
from collections.abc import AsyncGenerator
from contextlib import aclosing
from typing import Any

from realtime.dialects.messages.build import (
    DEFAULT_OPTIONS,
    MessagesOptions,
    messages_generation,
)
from realtime.dialects.messages.models import CountTokensRequest, MessagesRequest
from realtime.dialects.messages.render import Event, MessageBlocks, usage_fields
from realtime.pipeline import ChatPipeline, PreparedChat
from realtime.protocol.generation_request import owned_by


def new_message_id() -> str:
    return "msg_" + secrets.token_hex(12)


class MessagesRun:
    """A prepared Messages request and the renderer of its events."""

    __slots__ = ("blocks", "pipeline", "prepared")

    def __init__(self, pipeline: ChatPipeline, prepared: PreparedChat, model: str) -> None:
        self.pipeline = pipeline
        self.prepared = prepared
        self.blocks = MessageBlocks(prepared.id, model, prepared.usage)

    @classmethod
    def prepare(
        cls,
        pipeline: ChatPipeline,
        request: MessagesRequest,
        *,
        stream: bool,
        session_id: str | None = None,
        cache_salt: str | None = None,
        options: MessagesOptions = DEFAULT_OPTIONS,
    ) -> MessagesRun:
        """Everything that can fail before the answer starts (RealtimeError), except the
        grammar's compile: `constrain()`. `session_id` and `cache_salt` are the cache
        scope the transport chose (never the client's own say)."""
        generation = owned_by(messages_generation(request, options), cache_salt)
        prepared = pipeline.prepare(
            generation, stream=stream, session_id=session_id, request_id=new_message_id()
        )
        return cls(pipeline, prepared, request.model)

    @property
    def id(self) -> str:
        return self.prepared.id

    async def constrain(self) -> None:
        await self.pipeline.constrain(self.prepared)

    async def stream(self) -> AsyncGenerator[Event, None]:
        """Every event of the answer; closing it closes the engine's iterator."""
        blocks, stops = self.blocks, self.prepared.stops
        async with aclosing(self.pipeline.events(self.prepared)) as events:
            async for event in events:
                for out in blocks.render(event, stops.matched):
                    yield out

    async def complete(self) -> dict[str, Any]:
        """The non-streamed `Message`: the fold of the same events."""
        async with aclosing(self.stream()) as events:
            async for _ in events:
                pass
        return self.blocks.message()

    def usage(self) -> dict[str, Any]:
        """The usage so far, in the chat API's names (the access log and metrics read them)."""
        usage = self.blocks.usage
        return {
            "prompt_tokens": usage.prompt_tokens,
            "completion_tokens": usage.completion_tokens,
            "total_tokens": usage.total_tokens,
            "prompt_tokens_details": {"cached_tokens": usage.cached_tokens},
        }


def count_tokens(
    pipeline: ChatPipeline,
    request: CountTokensRequest,
    options: MessagesOptions = DEFAULT_OPTIONS,
) -> dict[str, int]:
    """`{"input_tokens": N}`: the prompt generation would see for the same request."""
    generation = messages_generation(request, options)
    pipeline.requests.check_model(generation)
    pipeline.requests.check_ready()
    conversation = pipeline.template_input(generation)
    _, tokens = pipeline.render_prompt(generation, conversation)
    return {"input_tokens": len(tokens)}


__all__ = ["MessagesRun", "count_tokens", "new_message_id", "usage_fields"]
