"""The errors a client is told about, and how each one surfaces on every transport.

Everything that reaches a client is one of these. Code below the pipeline keeps
its own exceptions and the layer above translates them: engines raise
`realtime.engine.errors` (mapped in `realtime.pipeline.engine_errors`), the
model directory loader `ModelDirError` (a startup error, never a client's).

Each error class knows, once, how it surfaces on every transport:

* `status`      - the HTTP status of the OpenAI error response;
* `error_type`  - OpenAI's `error.type` string;
* `close_code`  - `None` when the error is recoverable on a WebSocket (it becomes
                  an `error` frame and the socket stays open), otherwise the close
                  code that ends the socket.

Transports never decide these themselves; they call `to_body()` and read the
attributes. Messages are written for clients: never put a traceback in one.
Unexpected exceptions are wrapped by `InternalError`, which hides their text.
"""

from __future__ import annotations

from typing import Any, ClassVar

from realtime.protocol.close_codes import CloseCode


class RealtimeError(Exception):
    """Base class: an error a client is told about."""

    status: ClassVar[int] = 500
    error_type: ClassVar[str] = "server_error"
    default_code: ClassVar[str | None] = None
    close_code: ClassVar[CloseCode | None] = None
    #: Whether sending the same request again may succeed (drives `x-should-retry`).
    retryable: ClassVar[bool] = False

    def __init__(self, message: str, *, param: str | None = None, code: str | None = None):
        super().__init__(message)
        self.message = message
        self.param = param
        self.code = code if code is not None else self.default_code

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickled by its attributes, not by re-running `__init__` (whose keyword-only
        arguments a pickled exception loses): a decode process's refusal (`json_worker`)
        comes back to the server as the error it raised."""
        return (_rebuilt, (type(self), self.args, self.__dict__))

    def to_body(self) -> dict[str, Any]:
        """The OpenAI error body: `{"error": {message, type, param, code}}`."""
        return {
            "error": {
                "message": self.message,
                "type": self.error_type,
                "param": self.param,
                "code": self.code,
            }
        }


def _rebuilt(cls: type[RealtimeError], args: tuple[Any, ...], state: dict[str, Any]) -> Any:
    """`RealtimeError.__reduce__`'s other half."""
    error = cls.__new__(cls)
    Exception.__init__(error, *args)
    error.__dict__.update(state)
    return error


# --- request errors: the client sent something we will not run (recoverable) ---


class InvalidRequestError(RealtimeError):
    status = 400
    error_type = "invalid_request_error"


class UnknownFieldError(InvalidRequestError):
    """A field the API does not define; rejected so typos never silently change behaviour."""

    default_code = "unknown_field"


class InvalidTypeError(InvalidRequestError):
    """A field of the wrong JSON type (`"stream": "yes"`); types are never guessed."""

    default_code = "invalid_type"


class UnsupportedFeatureError(InvalidRequestError):
    default_code = "unsupported"


class PromptTooLongError(InvalidRequestError):
    """The prompt alone fills the model's context: no room is left for an answer.

    Carries the two numbers, so an API that words this error its own way (Anthropic's
    `prompt is too long: N tokens > M maximum`, which Claude Code reads to start
    compacting) renders it from them instead of rewording the message."""

    default_code = "context_length_exceeded"

    def __init__(
        self, message: str, *, prompt_tokens: int, context_length: int, param: str | None = None
    ):
        super().__init__(message, param=param)
        self.prompt_tokens = prompt_tokens
        self.context_length = context_length

    @classmethod
    def at_least(
        cls, floor: int, characters: int, context_length: int, param: str | None
    ) -> PromptTooLongError:
        """A prompt of `characters` whose token count, not known, is at least `floor`."""
        return cls(
            f"the prompt is at least {floor} tokens ({characters} characters); the model's "
            f"context is {context_length} tokens",
            prompt_tokens=floor,
            context_length=context_length,
            param=param,
        )


class ModelNotFoundError(InvalidRequestError):
    status = 404
    default_code = "model_not_found"


class DuplicateRequestIdError(InvalidRequestError):
    status = 409
    default_code = "duplicate_request_id"


class OutputLimitError(InvalidRequestError):
    """max_tokens above the server's cap (`--max-tokens-cap`)."""

    default_code = "max_tokens_exceeded"


class CredentialsInQueryError(InvalidRequestError):
    """An API key in the query string: refused, since URLs end up in logs and histories."""

    default_code = "credentials_in_query"


class RequestHeadersTooLargeError(InvalidRequestError):
    """The request line and headers exceed `--max-header-bytes` or `--max-headers`."""

    status = 431
    default_code = "request_headers_too_large"


class RequestTooLargeError(InvalidRequestError):
    """A request body over `--max-body-bytes`: refused before it is buffered."""

    status = 413
    default_code = "request_too_large"


class RequestTimeoutError(InvalidRequestError):
    """Headers slower than `--header-timeout`, or a body stalled for `--body-timeout`."""

    status = 408
    default_code = "request_timeout"


# --- access: who may connect (answered before any work, on HTTP and at the handshake) ---


class AuthenticationError(RealtimeError):
    """No API key, or a wrong one. The key itself is never echoed."""

    status = 401
    error_type = "invalid_request_error"
    default_code = "invalid_api_key"


class OriginNotAllowedError(RealtimeError):
    """A browser Origin that the server does not allow (cross-site WebSocket hijacking)."""

    status = 403
    error_type = "permission_error"
    default_code = "origin_not_allowed"


class TooManyConnectionsError(RealtimeError):
    """`--max-connections` sockets are open; the handshake is refused with 503."""

    status = 503
    error_type = "service_unavailable"
    default_code = "too_many_connections"
    retryable = True


class TooManyRequestsInFlightError(RealtimeError):
    """A socket already has `--max-in-flight` requests unanswered; this one is refused."""

    status = 429
    error_type = "rate_limit_error"
    default_code = "too_many_requests_in_flight"
    retryable = True


# --- engine errors ---


class EngineError(RealtimeError):
    """One request failed inside the engine; other requests carry on."""

    status = 500
    error_type = "engine_error"
    default_code = "engine_error"


class ToolChoiceNotSatisfiedError(EngineError):
    """The model answered without the tool call `tool_choice` demanded.

    Engines that cannot constrain generation (echo, scripted) are checked on the
    output (on the others this is a safety net behind the grammar); sampling again
    may comply, hence retryable. Only this request fails.
    """

    default_code = "tool_choice_not_satisfied"
    retryable = True


class EngineUnavailableError(RealtimeError):
    """The engine cannot serve at all (not loaded, crashed): the socket is closed."""

    status = 503
    error_type = "service_unavailable"
    default_code = "engine_unavailable"
    close_code = CloseCode.INTERNAL_ERROR
    retryable = True


class InternalError(RealtimeError):
    """A bug or unexpected condition; its detail stays in the server log."""

    status = 500
    error_type = "server_error"
    default_code = "internal_error"
    close_code = CloseCode.INTERNAL_ERROR

    def __init__(self, message: str = "internal server error", **kwargs: Any):
        super().__init__(message, **kwargs)


class ServerShuttingDownError(RealtimeError):
    status = 503
    error_type = "service_unavailable"
    default_code = "shutting_down"
    close_code = CloseCode.GOING_AWAY
    retryable = True


# --- WebSocket protocol faults: the frame stream itself is broken, the socket is closed ---


class ProtocolFault(RealtimeError):
    status = 400
    error_type = "invalid_request_error"
    close_code: ClassVar[CloseCode | None] = CloseCode.POLICY_VIOLATION


class MalformedFrameError(ProtocolFault):
    default_code = "malformed_json"
    close_code = CloseCode.INVALID_PAYLOAD


class BinaryFrameError(ProtocolFault):
    default_code = "binary_frame"
    close_code = CloseCode.UNSUPPORTED_DATA


class SlowConsumerError(ProtocolFault):
    """The client stopped reading: a frame waited longer than `--slow-consumer-timeout`."""

    default_code = "slow_consumer"
    close_code = CloseCode.POLICY_VIOLATION


def as_realtime_error(exc: BaseException) -> RealtimeError:
    """Return `exc` if it is already client-facing, else a detail-free `InternalError`."""
    if isinstance(exc, RealtimeError):
        return exc
    return InternalError()
