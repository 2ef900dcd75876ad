"""Exceptions of the client library: one base class, and each failure says where it came from.

Why a hierarchy rather than re-raising websockets' exceptions: a caller needs to
tell apart "the server refused this request" (send something else), "the socket
closed while my request ran" (it may have started; the client will not resend it)
and "I could not connect at all" (retry later), without knowing the transport.
"""

from __future__ import annotations

from typing import Any

from realtime.dialects.chat.response import ErrorDetail


class RealtimeClientError(Exception):
    """Base class of everything the client library raises on purpose."""


class ConnectError(RealtimeClientError):
    """The socket could not be opened: refused, unknown host, timeout, or an HTTP answer.

    `status` is the HTTP status when the server answered the handshake with one
    (401, 403, 404, 503...), else None; `error` is the OpenAI error object of
    that answer's body when it had one (e.g. `invalid_api_key`,
    `too_many_connections`).
    """

    def __init__(
        self,
        url: str,
        message: str,
        *,
        status: int | None = None,
        error: ErrorDetail | None = None,
    ):
        super().__init__(f"cannot connect to {url}: {message}")
        self.url = url
        self.message = message
        self.status = status
        self.error = error

    @property
    def body(self) -> dict[str, Any] | None:
        return {"error": self.error.model_dump()} if self.error is not None else None


class AuthenticationError(ConnectError):
    """The server refused the API key (HTTP 401 on the handshake); retrying will not help."""


class ProtocolError(RealtimeClientError):
    """The server sent a frame that does not match the protocol reference."""


class ConnectionClosedError(RealtimeClientError):
    """The socket is closed. `code` and `reason` are those of the Close frame (1006: none came)."""

    def __init__(self, code: int | None, reason: str = "", message: str | None = None):
        self.code = code
        self.reason = reason
        super().__init__(message or f"connection closed: {describe_close_code(code, reason)}")


class RequestInterruptedError(ConnectionClosedError):
    """The socket closed while this request was in flight.

    The request may have started (and spent tokens), so the client never sends it
    again on its own. `done` is the `response.done` (status `cancelled`, with the
    usage so far) when the server managed to send one before closing.
    """

    def __init__(
        self, request_id: str, code: int | None, reason: str = "", done: Any | None = None
    ):
        super().__init__(
            code,
            reason,
            f"request {request_id!r} interrupted: connection closed "
            f"({describe_close_code(code, reason)}); it was not resent",
        )
        self.request_id = request_id
        self.done = done


class APIError(RealtimeClientError):
    """The server ended a request with an `error` frame.

    `body` is the OpenAI error body `{"error": {...}}` exactly as the HTTP API
    would return it; `error` is its parsed `error` object. When the error also
    ended the session (`engine_unavailable`, `internal_error`), `close_code` and
    `close_reason` hold the Close frame that followed it.
    """

    def __init__(
        self,
        request_id: str | None,
        error: ErrorDetail,
        *,
        close_code: int | None = None,
        close_reason: str | None = None,
    ):
        super().__init__(error.message)
        self.request_id = request_id
        self.error = error
        self.close_code = close_code
        self.close_reason = close_reason

    @property
    def body(self) -> dict[str, Any]:
        return {"error": self.error.model_dump()}

    @property
    def message(self) -> str:
        return self.error.message

    @property
    def type(self) -> str:
        return self.error.type

    @property
    def code(self) -> str | None:
        return self.error.code

    @property
    def param(self) -> str | None:
        return self.error.param


class InvalidRequestError(APIError):
    """`invalid_request_error`: the request itself is wrong; sending it again fails again."""


class EngineError(APIError):
    """`engine_error`: the engine failed on this one request; the socket stays usable."""


class ServiceUnavailableError(APIError):
    """`service_unavailable`: the engine cannot serve now; the server closes the socket (1011)."""


class InternalServerError(APIError):
    """`server_error`: a fault in the server; the server closes the socket (1011)."""


class RateLimitError(APIError):
    """`rate_limit_error`: too many requests in flight on the socket; retry after one ends."""


class PermissionDeniedError(APIError):
    """`permission_error`: the server does not allow this (e.g. the page's origin)."""


_BY_TYPE: dict[str, type[APIError]] = {
    "invalid_request_error": InvalidRequestError,
    "engine_error": EngineError,
    "service_unavailable": ServiceUnavailableError,
    "server_error": InternalServerError,
    "rate_limit_error": RateLimitError,
    "permission_error": PermissionDeniedError,
}


def api_error(
    request_id: str | None,
    error: ErrorDetail,
    *,
    close_code: int | None = None,
    close_reason: str | None = None,
) -> APIError:
    """The `APIError` subclass for the error's `type` (plain `APIError` for unknown types)."""
    cls = _BY_TYPE.get(error.type, APIError)
    return cls(request_id, error, close_code=close_code, close_reason=close_reason)


#: The meaning of close codes the server uses, for messages when it gave no reason.
CLOSE_CODE_MEANINGS = {
    1000: "normal closure",
    1001: "going away",
    1003: "unsupported data",
    1006: "connection lost without a close frame",
    1007: "invalid frame payload",
    1008: "policy violation",
    1009: "message too big",
    1011: "internal error",
    1012: "service restart",
    1013: "try again later",
}


def describe_close_code(code: int | None, reason: str = "") -> str:
    """`1011 engine unavailable: ...`, or the code's meaning when the server gave no reason."""
    if code is None or code == 1006:
        return "connection lost without a close frame"
    if reason:
        return f"{code} {reason}"
    return f"{code} ({CLOSE_CODE_MEANINGS.get(code, 'no reason given')})"
