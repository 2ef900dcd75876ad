"""A chat completion of a socket session, as its job: chat frames' (and, for now, the
Realtime events', which still lower their responses to a chat request).

`prepare` turns the wire request into the neutral one (`chat_generation`), builds
the prompt (in a worker thread when the frame was large, `prepare_chat`) and
compiles the constraint, so every error comes before any output; the `ChatRun` it
makes holds the chunk renderer. `output` is the pipeline's own generator of typed
events (or the one completion of a request that did not stream), handed to the
glue as it is, and the dialect renders each event with `render` inline: no layer
between the engine and the socket, and closing the output closes the pipeline's
generator. This is the one place the socket dialects call the chat pipeline.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Callable
from typing import Any

from realtime.dialects.chat.build import chat_generation
from realtime.dialects.chat.render import Chunk
from realtime.dialects.chat.request import ChatCompletionRequest
from realtime.dialects.chat.run import ChatRun
from realtime.pipeline import ChatPipeline
from realtime.pipeline.offload import prepare_chat
from realtime.session.job import Observe, Timer


class ChatJob:
    """One `ChatCompletionRequest` of a socket session (`session_id`: its cache key);
    `size`: characters of the frame it came in."""

    __slots__ = (
        "output_kind",
        "pipeline",
        "render",
        "request",
        "run",
        "session_id",
        "size",
        "streams",
    )

    def __init__(
        self, pipeline: ChatPipeline, request: ChatCompletionRequest, *, session_id: str, size: int
    ) -> None:
        self.pipeline = pipeline
        self.request = request
        self.session_id = session_id
        self.size = size
        self.streams = request.stream is not False
        self.output_kind = "chunk" if self.streams else "completion"
        #: The prepared completion and its chunk renderer (None until `prepare`).
        self.run: ChatRun | None = None
        #: One output item as chunks: the run's renderer of a pipeline event once
        #: `prepare` made the run; for a request that did not stream (and before
        #: `prepare`), the item as it is.
        self.render: Callable[[Any], list[Chunk]] = _as_is

    async def prepare(self) -> None:
        pipeline, request, streams = self.pipeline, self.request, self.streams
        prepared = await prepare_chat(
            pipeline,
            chat_generation(request),
            stream=streams,
            session_id=self.session_id,
            size=self.size,
        )
        run = self.run = ChatRun(pipeline, request, prepared, stream=streams)
        await run.constrain()  # before the first chunk: errors are 400s
        if streams:
            self.render = run.chunks.render

    def output(self) -> AsyncGenerator[Any, None]:
        """The pipeline's events themselves, or the completion."""
        run = self.run
        assert run is not None, "output() before prepare()"
        if self.streams:
            return self.pipeline.events(run.prepared)
        return _completion(run)

    def observer(self, timer: Timer) -> Observe:
        return timer.step if self.streams else _ignore

    def usage(self) -> dict[str, Any] | None:
        return self.run.usage() if self.run is not None else None

    @property
    def answer_id(self) -> str | None:
        return self.run.id if self.run is not None else None


async def _completion(run: ChatRun) -> AsyncGenerator[dict[str, Any], None]:
    yield await run.complete()


def _as_is(completion: Chunk) -> list[Chunk]:
    return [completion]


def _ignore(item: Any) -> None:
    return None
