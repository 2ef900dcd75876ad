"""The Realtime event dialect of /v1/realtime: the OpenAI Realtime API's events, text only.

The socket speaks it when its handshake URL carries `model` (see
`realtime.dialects.realtime_events`); the session core runs its responses exactly as it
runs chat-frame requests (slots, cancel, backpressure, endings). Everything the
dialect decides is in `EventSession` (pure): here its answers become the core's
commands, and the core's requests its responses: each runs as its own job on the
pipeline (`job.py`: the neutral request the session built), and the response's
renderer turns the pipeline's typed output into events.
Unlike the chat frames, no client input closes the socket: malformed JSON, binary
frames and unknown events each get an `error` event and the session carries on
(OpenAI's rule).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from realtime.dialects.realtime_events.errors import error_event
from realtime.dialects.realtime_events.job import ResponseJob
from realtime.dialects.realtime_events.limits import DEFAULT_EVENT_LIMITS, EventLimits
from realtime.dialects.realtime_events.render import ResponseRenderer, fold_delta
from realtime.dialects.realtime_events.session_state import (
    CancelResponse,
    EventSession,
    StartResponse,
)
from realtime.pipeline import ChatPipeline
from realtime.pipeline.events import Finish, Step, Usage
from realtime.protocol.errors import InvalidRequestError, RealtimeError
from realtime.protocol.input_limits import DEFAULT_INPUT_LIMITS, InputLimits
from realtime.session.commands import Cancel, Command, Frame, Reply, Submit
from realtime.session.dialect import DialectContext, DialectFactory, DoneStatus, SessionView
from realtime.session.record import RequestRecord


class RealtimeEventDialect:
    """One socket's Realtime event codec; holds its session and conversation."""

    def __init__(
        self,
        pipeline: ChatPipeline,
        *,
        model_name: str,
        session_id: str,
        requested_model: str | None,
        limits: InputLimits = DEFAULT_INPUT_LIMITS,
        event_limits: EventLimits = DEFAULT_EVENT_LIMITS,
    ):
        self.pipeline = pipeline
        self.session = EventSession(
            session_id,
            model_name,
            requested_model,
            limits=event_limits,
            input_limits=limits,
        )
        #: Responses accepted and not yet answered, by id (their `response.create`).
        self._starts: dict[str, StartResponse] = {}

    @classmethod
    def factory(
        cls,
        pipeline: ChatPipeline,
        requested_model: str | None,
        event_limits: EventLimits = DEFAULT_EVENT_LIMITS,
    ) -> DialectFactory:
        """The `DialectFactory` of a socket whose handshake named `requested_model`."""

        def make(context: DialectContext) -> RealtimeEventDialect:
            return cls(
                pipeline,
                model_name=context.model_name,
                session_id=context.session_id,
                requested_model=requested_model,
                limits=context.limits,
                event_limits=event_limits,
            )

        return make

    # --- client events ---

    def opened(self) -> Sequence[Frame]:
        return self.session.open()

    def parse(self, text: str, view: SessionView) -> Command:
        reply = self.session.receive(text)
        action = reply.action
        if isinstance(action, StartResponse):
            self._starts[action.renderer.id] = action
            # What its prepare renders: the conversation, or the frame's own input (an
            # out-of-band response's); large, and it is prepared off the event loop.
            size = len(text) + self.session.conversation.bytes
            return Submit(
                action.renderer.id,
                action.request,
                size=size,
                context=action,
                label=reply.label,
                response_id=action.renderer.id,
            )
        if isinstance(action, CancelResponse):  # events (an item deleted) after the cancel
            return Cancel(action.response_id, label=reply.label, frames=tuple(reply.events))
        kind = "error" if reply.label == "rejected" else "event"
        return Reply(reply.events, kind, label=reply.label)

    def parse_binary(self, data: bytes) -> Command:
        error = InvalidRequestError(
            "binary frames are not part of the Realtime API; send events as text frames",
            code="binary_frame",
        )
        return Reply([error_event(self.session.event_id(), error, None)], "error", "binary")

    # --- the core's requests are this session's responses ---

    @staticmethod
    def _renderer(request: RequestRecord) -> ResponseRenderer:
        start: StartResponse = request.context
        return start.renderer

    def render_started(self, request: RequestRecord) -> Sequence[Frame]:
        return [self._renderer(request).created()]

    def job(self, request: RequestRecord) -> ResponseJob:
        return ResponseJob(
            self.pipeline,
            request.request,
            session_id=self.session.session_id,
            size=request.size,
            response_id=self._renderer(request).id,
        )

    def render_output(self, request: RequestRecord, item: Any) -> Sequence[Frame]:
        """One pipeline event of the response (Realtime responses always stream)."""
        renderer = self._renderer(request)
        if type(item) is Step:
            return renderer.step(item)
        assert isinstance(item, Finish)
        renderer.ended_with(item.reason)
        return ()

    def fold(self, held: Frame, frame: Frame) -> bool:
        """Two text deltas of one item fold (`render.fold_delta`)."""
        return fold_delta(held, frame)

    def render_done(self, request: RequestRecord, status: DoneStatus) -> Sequence[Frame]:
        renderer = self._renderer(request)
        usage = _usage(request)
        events = renderer.finish(usage, cancelled=status == "cancelled")
        self._end(renderer.id)
        return events

    def render_error(
        self, request_id: str | None, error: RealtimeError, request: RequestRecord | None
    ) -> Sequence[Frame]:
        """A response that failed or was refused: an `error` event naming the client's
        `response.create`, then its `response.done` (`failed`) if it had been announced."""
        start = self._starts.get(request_id) if request_id is not None else None
        client_event_id = start.client_event_id if start is not None else None
        events = [error_event(self.session.event_id(), error, client_event_id)]
        if start is not None:
            renderer = start.renderer
            if renderer.announced:
                usage = _usage(request) if request is not None else None
                events += renderer.finish(usage, error=error)
            self._end(renderer.id)
        return events

    def _end(self, response_id: str) -> None:
        self._starts.pop(response_id, None)
        self.session.response_ended(response_id)

    def render_expiring(self, close_in_seconds: float) -> Sequence[Frame]:
        error = InvalidRequestError(
            f"this session reached the server's --max-session; it closes in {close_in_seconds:g} s",
            code="session_expiring",
        )
        return [error_event(self.session.event_id(), error, None)]

    def closes_socket(self, error: RealtimeError) -> bool:
        return error.close_code is not None

    def ended(self) -> None:
        for response_id in list(self.session.active):
            self._end(response_id)


def _usage(request: RequestRecord) -> Usage | None:
    """The response's tokens so far (None if its prompt was never built)."""
    job: ResponseJob | None = request.job
    return job.tokens() if job is not None else None
