"""A chat request run on the chat pipeline, as a session job: chat frames' and Realtime events'.

The one place these socket dialects call the pipeline: `prepare` builds the
prompt (in a worker thread when the frame was large, `prepare_chat`) and compiles
the request's constraint, so both fail before any output; `output` is the
pipeline's own chunk generator (or the one completion of a request that asked
not to stream), handed to the glue as it is: no layer between the engine's
chunks and the dialect's `render_output`, and closing it closes the pipeline's.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator
from typing import Any

from realtime.pipeline import ChatPipeline, PreparedChat
from realtime.pipeline.offload import prepare_chat
from realtime.protocol.request import ChatCompletionRequest
from realtime.session.job import Observe


class PipelineJob:
    """One `ChatCompletionRequest` of a socket session (`session_id`: its cache key);
    `size`: characters of the frame it came in."""

    __slots__ = ("output_kind", "pipeline", "prepared", "request", "session_id", "size", "streams")

    def __init__(
        self, pipeline: ChatPipeline, request: ChatCompletionRequest, *, session_id: str, size: int
    ) -> None:
        self.pipeline = pipeline
        self.request = request
        self.session_id = session_id
        self.size = size
        self.streams = request.stream is not False
        self.output_kind = "chunk" if self.streams else "completion"
        #: The pipeline's prepared request (None until `prepare` built it).
        self.prepared: PreparedChat | None = None

    async def prepare(self) -> None:
        pipeline = self.pipeline
        prepared = self.prepared = await prepare_chat(
            pipeline, self.request, stream=self.streams, session_id=self.session_id, size=self.size
        )
        await pipeline.constrain(prepared)  # before the first chunk: errors are 400s

    def output(self, observe: Observe) -> AsyncGenerator[dict[str, Any], None]:
        """The chunks themselves (the glue shows each to `observe`), or the completion."""
        prepared = self.prepared
        assert prepared is not None, "output() before prepare()"
        if self.streams:
            return self.pipeline.stream(prepared)
        return self._completion(prepared)

    async def _completion(self, prepared: PreparedChat) -> AsyncGenerator[dict[str, Any], None]:
        yield await self.pipeline.complete(prepared)

    def usage(self) -> dict[str, Any] | None:
        prepared = self.prepared
        return prepared.delta.usage() if prepared is not None else None

    @property
    def answer_id(self) -> str | None:
        prepared = self.prepared
        return prepared.delta.id if prepared is not None else None
