"""WebSocket mode's frames, without the socket: client events in, server events out.

The openai SDK (`client.responses.connect()`, `openai.lib.responses_websocket`)
defines two client events, and this is what each becomes:

* `response.create` -> `Create`: the `POST /v1/responses` body plus `stream_id`
  (the lane) and `generate`, validated exactly as over HTTP
  (`ResponseCreateEvent`). `stream` and `stream_options` are accepted and change
  nothing: on the socket every response streams.
* `response.steer` -> `Steer` (`steering.parse_steer`), or `SteerRefused` when
  its fields or input are bad (`invalid_input`); the dialect finds the running
  response it names and answers `response.steer.accepted` or
  `response.steer.failed`.
* anything else (another `type`, no `type`, not a JSON object, not JSON, a binary
  frame) -> `Refuse` with an error naming what was wrong. Frames are whole
  messages, so a bad one costs only itself: the socket carries on.

Lanes (`stream_id`): 1-256 ASCII letters, digits, `_`, `-` or `.`, as the SDK
checks them (`invalid_stream_id` otherwise), and at most `max_streams` distinct
named lanes per socket (`websocket_stream_limit_reached`; the default lane, no
`stream_id`, does not count). Every server event of a named lane carries its
`stream_id`, errors included (`socket_error_event`), so the SDK routes each event
to its lane.

The maximum connection age: once `expired` is set (by the transport's timer), a
new `response.create` is refused with `websocket_connection_limit_reached`, the
code OpenAI uses for its 60-minute limit, and the transport closes the socket
when what is in flight has ended.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import orjson

from realtime.dialects.responses.events import socket_error_event
from realtime.dialects.responses.request import ResponseCreateEvent, parse_responses_request
from realtime.dialects.responses.steering import Steer, SteerRefused, parse_steer
from realtime.pipeline.offload import OFF_LOOP_CHARS
from realtime.protocol.errors import (
    InvalidRequestError,
    ModelNotFoundError,
    RealtimeError,
)
from realtime.protocol.input_limits import DEFAULT_INPUT_LIMITS, InputLimits
from realtime.protocol.json_input import load_json

#: The SDK's pattern for a named lane (`_Router.register`).
STREAM_ID = re.compile(r"[A-Za-z0-9_.-]{1,256}")
#: Distinct named lanes per socket (OpenAI's: 32; the default lane does not count).
DEFAULT_MAX_STREAMS = 32
#: OpenAI's maximum connection age, in seconds.
DEFAULT_MAX_AGE_SECONDS = 3600.0
#: The client events the SDK defines (`ResponsesClientEvent`).
CLIENT_EVENTS = ("response.create", "response.steer")


class InvalidStreamIdError(InvalidRequestError):
    default_code = "invalid_stream_id"


class StreamLimitError(InvalidRequestError):
    default_code = "websocket_stream_limit_reached"


class ConnectionLimitError(InvalidRequestError):
    """The socket reached its maximum age: no new responses; open a new connection."""

    default_code = "websocket_connection_limit_reached"


@dataclass(frozen=True, slots=True)
class Create:
    """Run this response on lane `stream_id` (None: the default lane).

    `event` is the validated create; None for a large frame (`OFF_LOOP_CHARS` or more),
    whose decoded `data` is validated by its job, in a worker thread (validating tens
    of thousands of input items takes the event loop for a second)."""

    event: ResponseCreateEvent | None
    stream_id: str | None
    #: characters of the frame (large requests are prepared off the event loop)
    size: int
    data: dict[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class Refuse:
    """Answer with `frame` (an `error` event) and run nothing."""

    error: RealtimeError
    stream_id: str | None

    @property
    def frame(self) -> dict[str, Any]:
        return socket_error_event(self.error, stream_id=self.stream_id)


ClientCommand = Create | Refuse | Steer | SteerRefused


@dataclass(frozen=True, slots=True)
class LargeCreate:
    """A large `response.create`, decoded, to be validated off the event loop by its job."""

    data: dict[str, Any]
    limits: InputLimits

    def parse(self) -> ResponseCreateEvent:
        return parse_create(self.data, self.limits)


def model_refusal(event: ResponseCreateEvent, model_name: str) -> ModelNotFoundError | None:
    """The error for a create naming a model this server does not serve (None: it does)."""
    if event.model == model_name:
        return None
    return ModelNotFoundError(
        f"The model `{event.model}` does not exist. Available: {model_name}", param="model"
    )


def parse_create(data: dict[str, Any], limits: InputLimits) -> ResponseCreateEvent:
    """A decoded `response.create`, validated as an HTTP create is. Raises RealtimeError."""
    event = parse_responses_request(data, limits, ResponseCreateEvent)
    assert isinstance(event, ResponseCreateEvent)
    return event


class ResponsesSocketCodec:
    """One socket's parser and renderer (it remembers the socket's lanes)."""

    def __init__(
        self,
        limits: InputLimits = DEFAULT_INPUT_LIMITS,
        *,
        max_streams: int = DEFAULT_MAX_STREAMS,
    ) -> None:
        self.limits = limits
        self.max_streams = max_streams
        self.streams: set[str] = set()
        #: response id -> its lane, for steers naming a response that has ended
        self.lanes: dict[str, str | None] = {}
        #: the connection reached its maximum age (set by the transport)
        self.expired = False

    # --- client frames ---

    def parse(self, text: str) -> ClientCommand:
        """One text frame; never raises for bad input."""
        try:
            data = load_json(text, self.limits.max_json_depth, self.limits.max_json_values)
        except orjson.JSONDecodeError:
            return Refuse(
                InvalidRequestError(
                    "the frame is not valid JSON: send one JSON object per text frame",
                    code="invalid_json",
                ),
                None,
            )
        except RealtimeError as exc:
            return Refuse(exc, None)
        if not isinstance(data, dict):
            return Refuse(
                InvalidRequestError("a client event must be a JSON object", code="invalid_event"),
                None,
            )
        kind = data.get("type")
        if kind == "response.create":
            return self._create(data, len(text))
        if kind == "response.steer":
            return parse_steer(data)
        if kind is None:
            message = "the event has no 'type'; expected one of " + ", ".join(CLIENT_EVENTS)
        else:
            shown = kind[:64] if isinstance(kind, str) else type(kind).__name__
            message = f"unknown event type {shown!r}; expected one of " + ", ".join(CLIENT_EVENTS)
        return Refuse(InvalidRequestError(message, param="type", code="invalid_event"), None)

    def parse_binary(self) -> Refuse:
        return Refuse(
            InvalidRequestError(
                "binary frames are not part of this protocol: send JSON in text frames",
                code="binary_frame",
            ),
            None,
        )

    def _create(self, data: dict[str, Any], size: int) -> ClientCommand:
        stream_id = data.get("stream_id")
        if stream_id is not None:
            if not isinstance(stream_id, str) or STREAM_ID.fullmatch(stream_id) is None:
                return Refuse(
                    InvalidStreamIdError(
                        "stream_id must be 1-256 ASCII letters, digits, '_', '-' or '.'",
                        param="stream_id",
                    ),
                    None,  # not a lane the client can have registered
                )
            if stream_id not in self.streams:
                if len(self.streams) >= self.max_streams:
                    return Refuse(
                        StreamLimitError(
                            f"this connection already has {self.max_streams} named streams,"
                            " its limit; reuse one or open another connection",
                            param="stream_id",
                        ),
                        stream_id,
                    )
                self.streams.add(stream_id)
        if self.expired:
            return Refuse(
                ConnectionLimitError(
                    "this connection reached its maximum age and takes no new responses;"
                    " open a new connection (stored responses continue there)"
                ),
                stream_id,
            )
        if size >= OFF_LOOP_CHARS:  # validated by its job, off the event loop
            return Create(None, stream_id, size, data)
        try:
            event = parse_create(data, self.limits)
        except RealtimeError as exc:
            return Refuse(exc, stream_id)
        return Create(event, stream_id, size)

    # --- server events ---

    def started(self, response_id: str, stream_id: str | None) -> None:
        """A response of this lane was created (errors about it go to its lane)."""
        self.lanes[response_id] = stream_id
        if len(self.lanes) > 4 * self.max_streams:  # only the newest are ever steered
            del self.lanes[next(iter(self.lanes))]

    @staticmethod
    def render(event: dict[str, Any], stream_id: str | None) -> dict[str, Any]:
        """`event` as sent on the socket: with its lane's `stream_id` when it has one."""
        if stream_id is not None:
            event["stream_id"] = stream_id
        return event

    @staticmethod
    def error(error: RealtimeError, stream_id: str | None) -> dict[str, Any]:
        return socket_error_event(error, stream_id=stream_id)
