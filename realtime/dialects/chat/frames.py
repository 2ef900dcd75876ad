"""/v1/realtime frames: decoding what a client sends, building what the server sends.

Client -> server (text frames, JSON objects):

* a chat-completion request - the `/v1/chat/completions` body, optionally with
  `"request_id"` (a client-chosen string echoed on every server frame for it) and
  `"type": "response.create"`. A frame without `type` is a request, so clients
  written for the plain wire shape work unchanged;
* `{"type": "response.cancel", "request_id": "..."}` - stop one request;
* `{"type": "session.close"}` - finish what is in flight, then close with 1000;
* `{"type": "session.setup", "model", "defaults"}` - optional, before the first
  request: the session's model and request defaults (see `merge_defaults`).

Server -> client (text frames):

* a `chat.completion.chunk` object plus `"request_id"`;
* `{"type": "response.done", "request_id", "id", "status", "finish_reason", "usage"}`
  - the terminal frame of a request that ended without error (status `completed`
  or `cancelled`);
* `{"type": "error", "request_id", "error": {message, type, param, code}}` - the
  terminal frame of a failed request, or (request_id null) a frame that could not
  be tied to a request;
* `{"type": "session.ready", "request_id": null, "session_id", "model", "defaults"}`
  - the answer to an accepted `session.setup`, and only to that.

Decoding is pure: it raises `MalformedFrameError` (the socket closes with 1007)
for text that is not JSON, and `FrameRejected` (an error frame, the socket stays)
for JSON that is not a valid frame, including JSON nested deeper than
`--max-json-depth` (`json_too_deep`) or with more than `--max-json-values` values
(`too_many_json_values`), with the frame's `request_id` when it has one.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

import orjson

from realtime.chat.prompt_fit import PromptFit
from realtime.dialects.chat.build import chat_generation
from realtime.dialects.chat.request import ChatCompletionRequest, parse_chat_request
from realtime.protocol.errors import InvalidRequestError, MalformedFrameError, RealtimeError
from realtime.protocol.input_limits import DEFAULT_INPUT_LIMITS, InputLimits
from realtime.protocol.json_input import (
    JsonTooDeepError,
    check_shape,
    parse_json,
)

MAX_REQUEST_ID_CHARS = 128

REQUEST_TYPE = "response.create"
CANCEL_TYPE = "response.cancel"
CLOSE_TYPE = "session.close"
SETUP_TYPE = "session.setup"
READY_TYPE = "session.ready"
DONE_TYPE = "response.done"
ERROR_TYPE = "error"

#: Envelope keys: they belong to the frame, not to the chat request inside it.
_ENVELOPE_KEYS = ("type", "request_id")


@dataclass(frozen=True, slots=True)
class RequestFrame:
    request_id: str | None
    request: ChatCompletionRequest


@dataclass(frozen=True, slots=True)
class CancelFrame:
    request_id: str


@dataclass(frozen=True, slots=True)
class CloseSessionFrame:
    pass


@dataclass(frozen=True, slots=True)
class SessionSetupFrame:
    """A valid `session.setup`: the model is not checked here (decoding knows no models)."""

    model: str
    #: Request fields every request of the session inherits, as the client sent them.
    defaults: dict[str, Any] = field(default_factory=dict)


ClientFrame = RequestFrame | CancelFrame | CloseSessionFrame | SessionSetupFrame

#: Request fields a session default may not set: each request brings its own
#: messages, and the model is the setup frame's own key.
_NO_DEFAULT = {
    "messages": "each request sends its own messages",
    "model": "set the session's model with the frame's `model` key",
}
#: Stands in for a request's messages while defaults are validated on their own.
_PLACEHOLDER_MESSAGES = [{"role": "user", "content": "."}]


class SessionAlreadySetUpError(InvalidRequestError):
    """A `session.setup` after the session's settings were fixed (by a setup or a request).

    Socket only; it changes nothing, so the earlier settings stay in force."""

    status = 409
    default_code = "session_already_set_up"


class FrameRejected(Exception):
    """A well-formed JSON frame that cannot be accepted; answered by an error frame.

    `is_request` tells a rejected chat request from a broken control frame: the
    session answers a rejected request in its place in the request order.
    `is_setup` marks a refused `session.setup`: once the session's settings are fixed
    the session answers any setup with `session_already_set_up` instead.
    """

    def __init__(
        self,
        error: RealtimeError,
        request_id: str | None,
        *,
        is_request: bool = False,
        is_setup: bool = False,
    ):
        super().__init__(error.message)
        self.error = error
        self.request_id = request_id
        self.is_request = is_request
        self.is_setup = is_setup


def decode_client_frame(
    text: str,
    defaults: dict[str, Any] | None = None,
    limits: InputLimits = DEFAULT_INPUT_LIMITS,
) -> ClientFrame:
    """Decode one client frame; `defaults` (the session's, model included) fill requests."""
    try:
        data = parse_json(text, limits.max_json_depth)
    except orjson.JSONDecodeError as exc:
        raise MalformedFrameError(f"malformed JSON frame: {exc}") from None
    except JsonTooDeepError as exc:
        raise FrameRejected(exc, None) from None  # nothing decoded: no request_id to name
    if not isinstance(data, dict):
        raise FrameRejected(InvalidRequestError("a frame must be a JSON object"), None)

    request_id = data.get("request_id")
    if request_id is not None and (
        not isinstance(request_id, str) or not 0 < len(request_id) <= MAX_REQUEST_ID_CHARS
    ):
        raise FrameRejected(
            InvalidRequestError(
                f"request_id must be a string of 1 to {MAX_REQUEST_ID_CHARS} characters",
                param="request_id",
            ),
            None,
        )

    frame_type = data.get("type", REQUEST_TYPE)
    try:
        check_shape(data, limits.max_json_depth, limits.max_json_values)
    except InvalidRequestError as exc:  # its shape, or the decode process's refusal of it
        # (`check_request_frame`, only ever of a request frame's body)
        if frame_type == SETUP_TYPE:
            raise _setup_rejected(exc) from None
        raise FrameRejected(exc, request_id, is_request=frame_type == REQUEST_TYPE) from None
    if frame_type == REQUEST_TYPE:
        try:
            return RequestFrame(request_id, _parse_request(data, defaults, limits))
        except RealtimeError as exc:
            raise FrameRejected(exc, request_id, is_request=True) from None
    if frame_type == CANCEL_TYPE:
        if request_id is None:
            raise FrameRejected(
                InvalidRequestError("response.cancel needs a request_id", param="request_id"), None
            )
        _reject_extra_keys(data, request_id)
        return CancelFrame(request_id)
    if frame_type == CLOSE_TYPE:
        _reject_extra_keys(data, request_id)
        return CloseSessionFrame()
    if frame_type == SETUP_TYPE:
        return _decode_setup(data, limits)
    raise FrameRejected(
        InvalidRequestError(
            f"unknown frame type {frame_type!r}; expected one of "
            f"{REQUEST_TYPE!r}, {CANCEL_TYPE!r}, {CLOSE_TYPE!r}, {SETUP_TYPE!r}",
            param="type",
        ),
        request_id,
    )


def _parse_request(
    data: dict[str, Any], defaults: dict[str, Any] | None, limits: InputLimits
) -> ChatCompletionRequest:
    """A request frame's body (the frame less its envelope), parsed under the defaults."""
    body = {k: v for k, v in data.items() if k not in _ENVELOPE_KEYS}
    if defaults:
        body = merge_defaults(defaults, body)
    # On the socket every answer streams unless the client asks otherwise.
    body.setdefault("stream", True)
    return parse_chat_request(body, limits)


def check_request_frame(
    data: Any,
    *,
    defaults: dict[str, Any] | None,
    limits: InputLimits,
    fit: PromptFit | None = None,
) -> None:
    """Raise what `decode_client_frame` raises for a request frame's body, for a decode
    process (`ws/large_frames.py`): a large frame refused there comes back as its
    envelope and error. Anything `decode_client_frame` checks before the body (not a
    request, a bad `request_id`) passes here, so it is answered as it always is.
    With `fit`, a request whose prompt cannot fit the context is refused there too,
    with the error preparing it would raise (`realtime.chat.prompt_fit`)."""
    if not isinstance(data, dict) or data.get("type", REQUEST_TYPE) != REQUEST_TYPE:
        return
    request_id = data.get("request_id")
    if request_id is not None and (
        not isinstance(request_id, str) or not 0 < len(request_id) <= MAX_REQUEST_ID_CHARS
    ):
        return
    request = _parse_request(data, defaults, limits)
    if fit is not None:
        fit.refuse(chat_generation(request))


def merge_defaults(defaults: dict[str, Any], body: dict[str, Any]) -> dict[str, Any]:
    """A request body over the session's defaults: the request's fields win, and `nvext`
    merges one level deep (a request adding `cache_salt` keeps the default `extra_fields`)."""
    merged = {**defaults, **body}
    base, own = defaults.get("nvext"), body.get("nvext")
    if isinstance(base, dict) and isinstance(own, dict):
        merged["nvext"] = {**base, **own}
    return merged


def _decode_setup(data: dict[str, Any], limits: InputLimits) -> SessionSetupFrame:
    """Check a `session.setup` frame's shape and validate its defaults as a request would be.

    The defaults go through the request validation with placeholder messages, so an
    unknown or invalid field is refused by name exactly as in a request, before any
    request inherits it; `param` is prefixed with `defaults.`.
    """
    try:
        _reject_extra_keys(data, None, allowed=("model", "defaults"))
    except FrameRejected as rejected:
        raise _setup_rejected(rejected.error) from None
    model = data.get("model")
    if not isinstance(model, str) or not model:
        raise _setup_rejected(
            InvalidRequestError("session.setup needs a model (a string)", param="model")
        )
    defaults = data.get("defaults")
    if defaults is None:
        defaults = {}
    if not isinstance(defaults, dict):
        raise _setup_rejected(
            InvalidRequestError("defaults must be an object of request fields", param="defaults")
        )
    for key, why in _NO_DEFAULT.items():
        if key in defaults:
            raise _setup_rejected(
                InvalidRequestError(f"defaults may not set {key!r}: {why}", param=f"defaults.{key}")
            )
    probe = {**defaults, "model": model, "messages": _PLACEHOLDER_MESSAGES}
    probe.setdefault("stream", True)  # as for a request on the socket
    try:
        parse_chat_request(probe, limits)
    except RealtimeError as exc:
        raise _setup_rejected(_under_defaults(exc)) from None
    return SessionSetupFrame(model, defaults)


def _setup_rejected(error: RealtimeError) -> FrameRejected:
    # request_id null: a setup is no request, so its error ends none.
    return FrameRejected(error, None, is_setup=True)


def _under_defaults(error: RealtimeError) -> RealtimeError:
    """The same error, its `param` located inside the setup frame's `defaults`."""
    if error.param is not None:
        error.param = f"defaults.{error.param}"
    return error


def _reject_extra_keys(
    data: dict[str, Any], request_id: str | None, allowed: tuple[str, ...] = ()
) -> None:
    extra = sorted(set(data) - set(_ENVELOPE_KEYS) - set(allowed))
    if extra:
        raise FrameRejected(
            InvalidRequestError(
                f"unexpected field {extra[0]!r} in {data['type']} frame", param=extra[0]
            ),
            request_id,
        )


# --- server frames ---

DoneFrameStatus = Literal["completed", "cancelled"]


def done_frame(
    request_id: str,
    completion_id: str | None,
    status: DoneFrameStatus,
    finish_reason: str | None,
    usage: dict[str, Any] | None,
) -> dict[str, Any]:
    return {
        "type": DONE_TYPE,
        "request_id": request_id,
        "id": completion_id,
        "status": status,
        "finish_reason": finish_reason,
        "usage": usage,
    }


def error_frame(request_id: str | None, error: RealtimeError) -> dict[str, Any]:
    return {"type": ERROR_TYPE, "request_id": request_id, **error.to_body()}


def ready_frame(session_id: str, model: str, defaults: dict[str, Any]) -> dict[str, Any]:
    """The answer to an accepted `session.setup` (never sent unasked)."""
    return {
        "type": READY_TYPE,
        "request_id": None,
        "session_id": session_id,
        "model": model,
        "defaults": defaults,
    }


EXPIRING_TYPE = "session.expiring"


def expiring_frame(close_in_seconds: float) -> dict[str, Any]:
    """The warning a socket gets when it reaches its maximum duration."""
    return {
        "type": EXPIRING_TYPE,
        "request_id": None,
        "close_in_seconds": close_in_seconds,
        "message": "the session reached its maximum duration; open a new socket",
    }
