"""The Responses API's WebSocket mode at /v1/responses: a dialect of the session core.

What the openai SDK's `client.responses.connect()` (and its lanes,
`openai.lib.responses_websocket`) speak. Frames are parsed by
`realtime.dialects.responses.socket_codec`; this module ties them to the core:

* `response.create` -> `Submit` in the lane of its `stream_id` (creates without
  one share the default lane): a lane runs one response at a time, in order;
  lanes run concurrently, up to the socket's slots. Parsing reads nothing: a
  create with a bad field is answered with its `error` event at once, one for
  another model in its lane's turn. A large create (a frame of `OFF_LOOP_CHARS`
  or more) is validated by its job in a worker thread, so its errors come in its
  lane's turn too.
* `response.steer` -> `Reply`: `response.steer.accepted` when the running response
  it names (on this socket, in the lane the steer names if it names one) queued
  it, else `response.steer.failed` with the SDK's code (`steering.py`); the run
  applies it at the next step boundary.
* every other frame: an `error` event, and the socket carries on.

When the core starts a response, its job (`socket_job.ResponseJob`) reads the
conversation of its `previous_response_id` (the socket's own `store: false`
responses first, then the server's store), awaited before anything is sent: a
previous response that is not found is an `error` event too. Then it runs the
one Responses run HTTP runs (`ResponsesService.events`): `response.created` and
`response.in_progress`, the events of each chat chunk, then the response stored
(the server's store, or the socket's memory for `store: false`) before its one
terminal event (`response.completed`, `.incomplete`, `.failed`), so a
continuation sent the moment it arrives finds it. Errors found while the prompt
is built end the response `response.failed`, as errors while generating do.
Every event goes out with the lane's `stream_id`, and the response's events are
numbered here, as they are sent (`_Turn.number`): steer events, answered while
the run is between two events, take their place in the same sequence.

The maximum connection age (`--responses-ws-max-age`): afterwards every
`response.create` is refused with `websocket_connection_limit_reached`; the
client opens a new connection (stored responses continue there). The server's
`--max-session` still closes every socket in the end, and `--max-connections`
refuses new ones before the upgrade.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from realtime.dialects.responses.events import fold_delta
from realtime.dialects.responses.service import ResponsesService
from realtime.dialects.responses.socket_codec import (
    DEFAULT_MAX_AGE_SECONDS,
    DEFAULT_MAX_STREAMS,
    ConnectionLimitError,
    Create,
    LargeCreate,
    ResponsesSocketCodec,
    model_refusal,
)
from realtime.dialects.responses.socket_job import TERMINAL_EVENTS, ResponseJob
from realtime.dialects.responses.steering import (
    Steer,
    SteerFailure,
    SteerRefused,
    accepted_event,
    failed_event,
)
from realtime.protocol.errors import InvalidRequestError, RealtimeError
from realtime.protocol.input_limits import DEFAULT_INPUT_LIMITS, InputLimits
from realtime.session.commands import Command, Frame, Reply, Submit
from realtime.session.dialect import DialectContext, DialectFactory, DoneStatus, SessionView
from realtime.session.record import RequestRecord
from realtime.store.memory import MemoryResponseStore

#: The lane of creates without `stream_id` (no valid `stream_id` has a space).
DEFAULT_LANE = "default lane"
#: Bytes of one socket's `store: false` responses (`--responses-ws-memory`'s default).
DEFAULT_MEMORY_BYTES = 64 * 1024 * 1024


class ResponseCancelledError(RealtimeError):
    """The response was stopped before its end (the socket is closing, or shutdown)."""

    status = 503
    error_type = "server_error"
    default_code = "response_cancelled"


@dataclass(frozen=True, slots=True)
class SocketLimits:
    """What bounds one WebSocket-mode socket (the server's flags, built by the app)."""

    #: Seconds after which every `response.create` is refused (0: never).
    max_age_seconds: float = DEFAULT_MAX_AGE_SECONDS
    #: Lanes (`stream_id`s) a socket may use.
    max_streams: int = DEFAULT_MAX_STREAMS
    #: Bytes of the socket's own `store: false` responses.
    memory_bytes: int = DEFAULT_MEMORY_BYTES


@dataclass(slots=True)
class _Turn:
    """One response's place on the socket (`RequestRecord.context`): its lane, its id
    once created, and the next `sequence_number` of its events."""

    stream_id: str | None
    response_id: str | None = None
    sequence: int = 0

    def number(self, event: dict[str, Any]) -> dict[str, Any]:
        event["sequence_number"] = self.sequence
        self.sequence += 1
        return event


class ResponsesDialect:
    """One socket's WebSocket-mode codec: its lanes, its `store: false` responses."""

    def __init__(
        self,
        service: ResponsesService,
        *,
        owner: str | None,
        model_name: str,
        session_id: str,
        limits: InputLimits = DEFAULT_INPUT_LIMITS,
        max_age_seconds: float = DEFAULT_MAX_AGE_SECONDS,
        max_streams: int = DEFAULT_MAX_STREAMS,
        memory_bytes: int = DEFAULT_MEMORY_BYTES,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.service = service
        self.owner = owner
        self.model_name = model_name
        self.session_id = session_id
        self.codec = ResponsesSocketCodec(limits, max_streams=max_streams)
        #: this socket's `store: false` responses: its continuations only, gone with it
        self.local = MemoryResponseStore(max_bytes=memory_bytes)
        self.max_age_seconds = max_age_seconds
        self._clock = clock
        self._opened_at = clock()
        #: the lane of the create parsed last (a refusal before acceptance names it)
        self._last_lane: str | None = None
        #: response id -> its request, from `response.created` to its end (steers)
        self._running: dict[str, RequestRecord] = {}

    @classmethod
    def factory(
        cls, service: ResponsesService, owner: str | None, limits: SocketLimits = SocketLimits()
    ) -> DialectFactory:
        """The `DialectFactory` for a caller (its owner fingerprint) of this server."""

        def make(context: DialectContext) -> ResponsesDialect:
            return cls(
                service,
                owner=owner,
                model_name=context.model_name,
                session_id=context.session_id,
                limits=context.limits,
                max_age_seconds=limits.max_age_seconds,
                max_streams=limits.max_streams,
                memory_bytes=limits.memory_bytes,
            )

        return make

    # --- client frames ---

    def opened(self) -> Sequence[Frame]:
        return ()

    def parse(self, text: str, view: SessionView) -> Command:
        age = self.max_age_seconds
        if age > 0 and not self.codec.expired and self._clock() - self._opened_at >= age:
            self.codec.expired = True
        command = self.codec.parse(text)
        if isinstance(command, Create):
            return self._submit(command)
        if isinstance(command, Steer):
            return Reply((self._steer(command),), "event", label="response.steer")
        if isinstance(command, SteerRefused):
            return Reply((self._steer_refused(command),), "event", label="response.steer")
        return Reply((command.frame,), "error", label="rejected")

    def parse_binary(self, data: bytes) -> Command:
        return Reply((self.codec.parse_binary().frame,), "error", label="binary")

    def _submit(self, create: Create) -> Submit:
        event, stream_id = create.event, create.stream_id
        self._last_lane = stream_id
        lane = stream_id if stream_id is not None else DEFAULT_LANE
        turn = _Turn(stream_id)
        if event is None:  # large: its job validates it, off the event loop
            assert create.data is not None
            large = LargeCreate(create.data, self.codec.limits)
            return Submit(None, large, None, lane, create.size, turn, label="response.create")
        error = model_refusal(event, self.model_name)
        if error is not None:
            return Submit(None, None, error, lane, create.size, turn, label="response.create")
        return Submit(None, event, None, lane, create.size, turn, label="response.create")

    # --- steering ---

    def _steer(self, steer: Steer) -> Frame:
        """`response.steer.accepted`, or `.failed` with the reason, for a parsed steer."""
        target = steer.previous_response_id
        record = self._running.get(target)
        if record is None:
            if target in self.codec.lanes:
                failure = SteerFailure(
                    "response_already_completed",
                    f"response '{target}' has ended; send the input with the next response.create",
                )
                lane = self.codec.lanes[target]
            else:
                failure = SteerFailure(
                    "response_not_found", f"no response '{target}' is running on this connection"
                )
                lane = steer.stream_id
            return self.codec.render(_refused(steer, failure), lane)
        turn: _Turn = record.context
        if steer.stream_id is not None and steer.stream_id != turn.stream_id:
            failure = SteerFailure(
                "response_not_found",
                f"response '{target}' does not run on lane {steer.stream_id!r}"
                " (a steer goes to the lane of the response it names)",
            )
            return self.codec.render(_refused(steer, failure), steer.stream_id)
        job = _job(record)
        assert job is not None  # it sent `response.created`
        refused = job.steer(steer)
        event = accepted_event(steer) if refused is None else _refused(steer, refused)
        return self.codec.render(turn.number(event), turn.stream_id)

    def _steer_refused(self, refused: SteerRefused) -> Frame:
        """A steer whose fields or input are bad: `response.steer.failed` when it named a
        response (on that response's lane), else an `error` event."""
        target = refused.previous_response_id
        if target is None:
            error = InvalidRequestError(
                refused.failure.message, param="previous_response_id", code="invalid_input"
            )
            return self.codec.error(error, None)
        event = failed_event(refused.failure, target, refused.input)
        record = self._running.get(target)
        if record is not None:
            turn: _Turn = record.context
            return self.codec.render(turn.number(event), turn.stream_id)
        return self.codec.render(event, self.codec.lanes.get(target))

    # --- the core's requests are this socket's responses ---

    def job(self, request: RequestRecord) -> ResponseJob:
        return ResponseJob(
            self.service,
            request.request,
            owner=self.owner,
            local=self.local,
            session_id=self.session_id,
            size=request.size,
        )

    def render_started(self, request: RequestRecord) -> Sequence[Frame]:
        return ()  # `response.created` is the run's first event

    def render_output(self, request: RequestRecord, item: dict[str, Any]) -> Sequence[Frame]:
        """One event of the run, with the lane's `stream_id`."""
        turn: _Turn = request.context
        kind = item["type"]
        if kind == "response.created":  # steers name it from now on
            turn.response_id = item["response"]["id"]
            self.codec.started(turn.response_id, turn.stream_id)
            self._running[turn.response_id] = request
        elif kind in TERMINAL_EVENTS:
            self._stopped(turn)
        return (self.codec.render(turn.number(item), turn.stream_id),)

    def _stopped(self, turn: _Turn) -> None:
        if turn.response_id is not None:
            self._running.pop(turn.response_id, None)

    def fold(self, held: Frame, frame: Frame) -> bool:
        """Two text deltas of one item fold (`events.fold_delta`)."""
        return fold_delta(held, frame)

    def render_done(self, request: RequestRecord, status: DoneStatus) -> Sequence[Frame]:
        turn: _Turn = request.context
        self._stopped(turn)
        job = _job(request)
        if job is None or not job.started:
            error = ResponseCancelledError("the response was cancelled before it started")
            return (self.codec.error(error, turn.stream_id),)
        if job.ended:
            return ()  # the run sent its terminal event
        error = ResponseCancelledError(
            "the response was cancelled: the connection is closing or the server is shutting down"
        )
        return self._fail(turn, job, error)

    def render_error(
        self, request_id: str | None, error: RealtimeError, request: RequestRecord | None
    ) -> Sequence[Frame]:
        if request is None:  # refused before it was accepted: the frame just parsed
            return (self.codec.error(error, self._last_lane if request_id else None),)
        turn: _Turn = request.context
        self._stopped(turn)
        job = _job(request)
        if job is None or not job.started:  # rejected, or its history could not be read
            return (self.codec.error(error, turn.stream_id),)
        if job.ended:
            return ()  # the run ended it `response.failed`
        return self._fail(turn, job, error)  # an unexpected failure: not stored

    def _fail(self, turn: _Turn, job: ResponseJob, error: RealtimeError) -> list[Frame]:
        """The events that end a started response the run could not end itself."""
        events = job.events
        assert events is not None
        render, stream_id = self.codec.render, turn.stream_id
        return [render(turn.number(e), stream_id) for e in events.fail(error, job.tokens())]

    def render_expiring(self, close_in_seconds: float) -> Sequence[Frame]:
        error = ConnectionLimitError(
            f"this connection reached the server's maximum session duration and closes in"
            f" {close_in_seconds:g} s; open a new connection"
        )
        return (self.codec.error(error, None),)

    def closes_socket(self, error: RealtimeError) -> bool:
        return error.close_code is not None

    def ended(self) -> None:
        self.local.clear()  # `store: false` responses die with their socket


def _refused(steer: Steer, failure: SteerFailure) -> dict[str, Any]:
    """A steer refused before it was accepted: its id was never given (the SDK's rule)."""
    return failed_event(failure, steer.previous_response_id, steer.input)


def _job(request: RequestRecord) -> ResponseJob | None:
    job: ResponseJob | None = request.job
    return job
