"""Upper echo's job: its neutral request on the pipeline, the pipeline's typed events out.

A protocol needs no other protocol's code: it builds the `GenerationRequest`
itself, and here is the one place it calls the pipeline (prepare, constrain,
events). The events are handed to the glue as the pipeline yields them; the
dialect renders each.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator
from typing import Any

from realtime.pipeline import ChatPipeline, PreparedChat
from realtime.pipeline.offload import prepare_chat
from realtime.protocol.generation_request import GenerationRequest
from realtime.session.job import Observe, Timer


class UpperEchoJob:
    #: The frames-sent metric's label of its deltas.
    output_kind = "delta"

    def __init__(
        self, pipeline: ChatPipeline, request: GenerationRequest, *, session_id: str, size: int
    ) -> None:
        self.pipeline = pipeline
        self.request = request
        self.session_id = session_id
        self.size = size
        self.prepared: PreparedChat | None = None

    async def prepare(self) -> None:
        prepared = self.prepared = await prepare_chat(
            self.pipeline,
            self.request,
            stream=True,
            session_id=self.session_id,
            size=self.size,
        )
        await self.pipeline.constrain(prepared)

    def observer(self, timer: Timer) -> Observe:
        return timer.step

    def output(self) -> AsyncGenerator[Any, None]:
        assert self.prepared is not None, "output() before prepare()"
        return self.pipeline.events(self.prepared)

    def usage(self) -> dict[str, Any] | None:
        if self.prepared is None:
            return None
        usage = self.prepared.usage
        return {
            "prompt_tokens": usage.prompt_tokens,
            "completion_tokens": usage.completion_tokens,
            "total_tokens": usage.total_tokens,
        }

    @property
    def answer_id(self) -> str | None:
        return self.prepared.id if self.prepared is not None else None
