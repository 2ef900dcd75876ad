"""One `response.create` of a WebSocket-mode socket, as a session job: HTTP's run, framed.

`prepare` validates a large create (`LargeCreate`, in a worker thread), then reads
the response's stored history (`ResponsesService.begin`: the
socket's own `store: false` responses, then the server's store, awaited) before
anything is sent, so a `previous_response_id` that is not found is answered with
an `error` event, as a create that could not be parsed is. `output` is the run
HTTP streams too (`ResponsesService.events`: `response.created`, the prompt, the
events, the response stored, then its terminal event); a response that failed
ends with `response.failed` there, then raises its error, so the session counts
it as failed.

A running response takes steers (`steer`): the job gives the run its `Steering`
queue once the response is planned; a warm-up (`generate: false`) has nothing to
steer and refuses them (`steering_not_supported`).
"""

from __future__ import annotations

from collections.abc import AsyncGenerator
from contextlib import aclosing
from typing import Any

from realtime.dialects.responses.events import ResponseEvents
from realtime.dialects.responses.request import ResponseCreateEvent
from realtime.dialects.responses.service import PreparedResponse, ResponsesService
from realtime.dialects.responses.socket_codec import LargeCreate, model_refusal
from realtime.dialects.responses.steering import Steer, SteerFailure, Steering
from realtime.pipeline.events import Usage
from realtime.pipeline.offload import off_loop
from realtime.session.job import Observe, Timer
from realtime.store.base import ResponseStore

#: The events that end a response (each run sends exactly one, last).
TERMINAL_EVENTS = frozenset({"response.completed", "response.incomplete", "response.failed"})


class ResponseJob:
    """A socket's response: `started` once `response.created` was yielded, `ended` once
    its terminal event was (the dialect renders what a cancel or a failure adds)."""

    output_kind = "chunk"

    def __init__(
        self,
        service: ResponsesService,
        event: ResponseCreateEvent | LargeCreate,
        *,
        owner: str | None,
        local: ResponseStore,
        session_id: str,
        size: int,
    ) -> None:
        self.service = service
        self.event = event
        self.owner = owner
        self.local = local
        self.session_id = session_id
        self.size = size
        self.prepared: PreparedResponse | None = None
        self.started = False
        self.ended = False
        #: Shown each pipeline step under the events (the request's latency timer).
        self._on_step: Observe | None = None

    async def prepare(self) -> None:
        event = self.event
        if isinstance(event, LargeCreate):  # validated here, off the event loop
            event = self.event = await off_loop(event.parse, self.size)
            error = model_refusal(event, self.service.pipeline.model_name)
            if error is not None:
                raise error
        self.prepared = await self.service.begin(
            event,
            stream=True,
            owner=self.owner,
            local=self.local,
            session_id=self.session_id,
            size=self.size,
        )
        self.prepared.steering = Steering(unsupported=_steering_unsupported(self.prepared))

    def steer(self, steer: Steer) -> SteerFailure | None:
        """Queue `steer` for the response's next step boundary (None: accepted)."""
        prepared = self.prepared
        if prepared is None or prepared.steering is None:
            return SteerFailure("response_not_active", "the response has not started")
        return prepared.steering.offer(steer)

    def observer(self, timer: Timer) -> Observe:
        """The run shows `timer` the pipeline's steps; the events themselves are not tokens."""
        self._on_step = timer.step
        return _ignore

    async def output(self) -> AsyncGenerator[dict[str, Any], None]:
        prepared = self.prepared
        assert prepared is not None, "output() before prepare()"
        run = self.service.events(prepared, on_step=self._on_step)
        async with aclosing(run) as events:
            async for event in events:
                self.started = True
                if event["type"] in TERMINAL_EVENTS:
                    self.ended = True
                yield event
        if prepared.events.error is not None:
            raise prepared.events.error  # its `response.failed` went out above

    @property
    def events(self) -> ResponseEvents | None:
        """The response's event builder (None before `prepare`)."""
        return self.prepared.events if self.prepared is not None else None

    def usage(self) -> dict[str, Any] | None:
        return self.prepared.usage() if self.prepared is not None else None

    def tokens(self) -> Usage | None:
        """The response's tokens so far, typed (None before its prompt was built)."""
        return self.prepared.tokens() if self.prepared is not None else None

    @property
    def answer_id(self) -> str | None:
        """The response's id (`resp_...`: what the client was given)."""
        return self.prepared.id if self.prepared is not None else None


def _ignore(event: Any) -> None:
    return None


def _steering_unsupported(prepared: PreparedResponse) -> str | None:
    """Why a response takes no steers (None: it takes them)."""
    if not prepared.generate:
        return "a warm-up (generate: false) generates nothing to steer"
    if prepared.request.compact_threshold is not None:
        return "a response with automatic compaction (context_management) takes no steers"
    if prepared.generation.format is not None:
        return "a structured answer (text.format) cannot be resumed mid-value by a steer"
    return None
