"""The Responses API's WebSocket mode at /v1/responses: a dialect of the session core.

What the openai SDK's `client.responses.connect()` (and its lanes,
`openai.lib.responses_websocket`) speak. Frames are parsed by
`realtime.responses.socket_codec`; this module ties them to the core:

* `response.create` -> `Submit` in the lane of its `stream_id` (creates without
  one share the default lane): a lane runs one response at a time, in order;
  lanes run concurrently, up to the socket's slots. The conversation of a
  `previous_response_id` is rebuilt while parsing (the socket's own `store: false`
  responses first, then the server's store, both read without awaiting) and the
  response is planned as a chat request the glue prepares and streams. A request
  that cannot be planned (an unknown previous response, a bad field) is accepted
  as rejected: it is answered with its `error` event in its lane's turn.
* every other frame: an `error` event, and the socket carries on.

Events: `response.created` and `response.in_progress` when the response starts,
then `ResponseEvents`' events for each chat chunk (the same generator as SSE),
then one terminal event (`response.completed`, `.incomplete`, `.failed`), each
with the lane's `stream_id`. The response is stored (the server's store, or the
socket's memory for `store: false`) before its terminal event goes out, so a
continuation sent the moment it arrives finds it. Errors found while the prompt
is built end the response `response.failed`, as errors while generating do.

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

import orjson

from realtime.protocol.errors import ModelNotFoundError, RealtimeError
from realtime.protocol.input_limits import DEFAULT_INPUT_LIMITS, InputLimits
from realtime.responses.events import ResponseEvents
from realtime.responses.request import ResponseCreateEvent
from realtime.responses.service import ResponsesService, input_only_usage, responses_error
from realtime.responses.socket_codec import (
    DEFAULT_MAX_AGE_SECONDS,
    DEFAULT_MAX_STREAMS,
    ConnectionLimitError,
    Create,
    ResponsesSocketCodec,
)
from realtime.responses.store import ImmediateStore, MemoryResponseStore, StoredResponse
from realtime.session.commands import Command, Frame, Reply, Submit
from realtime.session.dialect import DialectContext, DialectFactory, DoneStatus, SessionView
from realtime.session.record import RequestRecord

#: The lane of creates without `stream_id` (no valid `stream_id` has a space).
DEFAULT_LANE = "default lane"
#: Bytes of one socket's `store: false` responses, when the config does not say.
DEFAULT_MEMORY_BYTES = 64 * 1024 * 1024


class ResponseCancelledError(RealtimeError):
    """The response was stopped before its end (the socket is closing, or shutdown)."""

    status = 503
    error_type = "server_error"
    default_code = "response_cancelled"


@dataclass(slots=True)
class _Turn:
    """One response's state on the socket (`RequestRecord.context`)."""

    stream_id: str | None
    request: ResponseCreateEvent
    events: ResponseEvents | None
    generate: bool = True
    #: `response.created` went out: the response ends with a terminal response event
    started: bool = False


class ResponsesDialect:
    """One socket's WebSocket-mode codec: its lanes, its `store: false` responses."""

    def __init__(
        self,
        service: ResponsesService,
        *,
        owner: str | None,
        model_name: str,
        limits: InputLimits = DEFAULT_INPUT_LIMITS,
        max_age_seconds: float = DEFAULT_MAX_AGE_SECONDS,
        max_streams: int = DEFAULT_MAX_STREAMS,
        memory_bytes: int = DEFAULT_MEMORY_BYTES,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.service = service
        self.owner = owner
        self.model_name = model_name
        self.codec = ResponsesSocketCodec(limits, max_streams=max_streams)
        #: this socket's `store: false` responses: its continuations only, gone with it
        self.local = MemoryResponseStore(max_bytes=memory_bytes)
        self.max_age_seconds = max_age_seconds
        self._clock = clock
        self._opened_at = clock()
        #: the lane of the create parsed last (a refusal before acceptance names it)
        self._last_lane: str | None = None

    @classmethod
    def factory(cls, service: ResponsesService, owner: str | None) -> DialectFactory:
        """The `DialectFactory` for a caller (its owner fingerprint) of this server."""

        def make(context: DialectContext) -> ResponsesDialect:
            config = context.config
            return cls(
                service,
                owner=owner,
                model_name=context.model_name,
                limits=context.limits,
                max_age_seconds=getattr(
                    config, "responses_ws_max_age_seconds", DEFAULT_MAX_AGE_SECONDS
                ),
                max_streams=getattr(config, "responses_ws_max_streams", DEFAULT_MAX_STREAMS),
                memory_bytes=getattr(config, "responses_ws_memory_bytes", DEFAULT_MEMORY_BYTES),
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
        if not isinstance(command, Create):
            return Reply((command.frame,), "error", label="rejected")
        return self._submit(command)

    def parse_binary(self, data: bytes) -> Command:
        return Reply((self.codec.parse_binary().frame,), "error", label="binary")

    def _submit(self, create: Create) -> Submit:
        event, stream_id = create.event, create.stream_id
        self._last_lane = stream_id
        lane = stream_id if stream_id is not None else DEFAULT_LANE
        size = create.size
        try:
            if event.model != self.model_name:
                raise ModelNotFoundError(
                    f"The model `{event.model}` does not exist. Available: {self.model_name}",
                    param="model",
                )
            history = self.service.history_now(event.previous_response_id, self.owner, self.local)
            plan = self.service.plan(event, history, stream=True)
        except RealtimeError as exc:
            turn = _Turn(stream_id, event, None)
            return Submit(None, None, exc, lane, size, turn, label="response.create")
        if history:  # a long conversation is prepared off the event loop (`prepare_chat`)
            size += len(orjson.dumps(history))
        turn = _Turn(stream_id, event, plan.events, plan.generate)
        response_id = plan.events.response["id"]  # what the client sees: the log line's id
        return Submit(None, plan.chat, None, lane, size, turn, "response.create", response_id)

    # --- server frames ---

    def _render(self, turn: _Turn, events: list[dict[str, Any]]) -> list[Frame]:
        render, stream_id = self.codec.render, turn.stream_id
        return [render(event, stream_id) for event in events]

    def render_started(self, request: RequestRecord) -> Sequence[Frame]:
        turn: _Turn = request.context
        assert turn.events is not None
        turn.started = True
        self.codec.started(turn.events.response["id"], turn.stream_id)
        return self._render(turn, turn.events.start())

    def render_chunk(self, request: RequestRecord, chunk: dict[str, Any]) -> Sequence[Frame]:
        turn: _Turn = request.context
        if not turn.generate:
            return ()  # a warm-up (`generate: false`): the prefill is the point
        assert turn.events is not None
        events = turn.events.feed(chunk)
        return self._render(turn, events) if events else ()

    def render_completion(
        self, request: RequestRecord, completion: dict[str, Any]
    ) -> Sequence[Frame]:  # pragma: no cover - every socket response streams
        return ()

    def render_done(self, request: RequestRecord, status: DoneStatus) -> Sequence[Frame]:
        turn: _Turn = request.context
        if turn.events is None or not turn.started:
            error = ResponseCancelledError("the response was cancelled before it started")
            return (self.codec.error(error, turn.stream_id),)
        usage = request.prepared.delta.usage() if request.prepared is not None else None
        if status == "cancelled":
            error = ResponseCancelledError(
                "the response was cancelled: the connection is closing or the server is"
                " shutting down"
            )
            return self._render(turn, turn.events.fail(error, usage))
        if not turn.generate:
            usage = input_only_usage(usage)
        events = turn.events.finish(usage)
        self._keep(turn)
        return self._render(turn, events)

    def render_error(
        self, request_id: str | None, error: RealtimeError, request: RequestRecord | None
    ) -> Sequence[Frame]:
        error = responses_error(error)
        if request is None:  # refused before it was accepted: the frame just parsed
            return (self.codec.error(error, self._last_lane if request_id else None),)
        turn: _Turn = request.context
        if turn.events is None or not turn.started:
            return (self.codec.error(error, turn.stream_id),)
        usage = request.prepared.delta.usage() if request.prepared is not None else None
        events = turn.events.fail(error, usage)
        self._keep(turn)
        return self._render(turn, events)

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

    # --- the store ---

    def _keep(self, turn: _Turn) -> None:
        """Store the finished response before its terminal event goes out."""
        assert turn.events is not None
        request, response = turn.request, turn.events.response
        store: ImmediateStore = (
            self.service.store if request.stores else self.local  # type: ignore[assignment]
        )
        store.put_now(
            StoredResponse(
                id=response["id"],
                owner=self.owner,
                created_at=float(response["created_at"]),
                previous_response_id=request.previous_response_id,
                response=response,
                input_items=request.items,
            )
        )
