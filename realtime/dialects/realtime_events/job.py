"""One Realtime response, as its session job: the neutral request on the pipeline.

`prepare` builds the prompt (in a worker thread when the conversation is large,
`prepare_chat`) and compiles the constraint, so every error comes before any
output; `output` is the pipeline's own generator of typed events, handed to the
glue as it is, and the dialect renders each with the response's renderer: no layer
between the engine and the socket, and closing the output closes the pipeline's
generator (how a cancel reaches the engine).
"""

from __future__ import annotations

from collections.abc import AsyncGenerator
from typing import Any

from realtime.pipeline import ChatPipeline, PreparedChat
from realtime.pipeline.events import Usage
from realtime.pipeline.offload import prepare_chat
from realtime.protocol.generation_request import GenerationRequest
from realtime.session.job import Observe, Timer


class ResponseJob:
    """A response of a Realtime session (`session_id`: its cache key; `size`: characters
    of its conversation, `response_id`: the engine request's id, as the client got it)."""

    output_kind = "chunk"

    __slots__ = ("pipeline", "prepared", "request", "response_id", "session_id", "size")

    def __init__(
        self,
        pipeline: ChatPipeline,
        request: GenerationRequest,
        *,
        session_id: str,
        size: int,
        response_id: str,
    ) -> None:
        self.pipeline = pipeline
        self.request = request
        self.session_id = session_id
        self.size = size
        self.response_id = response_id
        #: The pipeline's prepared request (None until `prepare`).
        self.prepared: PreparedChat | None = None

    async def prepare(self) -> None:
        prepared = self.prepared = await prepare_chat(
            self.pipeline,
            self.request,
            stream=True,
            session_id=self.session_id,
            size=self.size,
            request_id=self.response_id,
        )
        await self.pipeline.constrain(prepared)  # before any output: errors are refusals

    def output(self) -> AsyncGenerator[Any, None]:
        prepared = self.prepared
        assert prepared is not None, "output() before prepare()"
        return self.pipeline.events(prepared)

    def observer(self, timer: Timer) -> Observe:
        return timer.step

    def tokens(self) -> Usage | None:
        return self.prepared.usage if self.prepared is not None else None

    def usage(self) -> dict[str, Any] | None:
        return self.prepared.usage.as_dict() if self.prepared is not None else None

    @property
    def answer_id(self) -> str | None:
        return self.response_id
