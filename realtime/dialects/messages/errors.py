"""Every error of the Messages API in Anthropic's body and wording.

    {"type": "error", "error": {"type": "invalid_request_error", "message": "..."}}

The error classes stay the server's own (`realtime.protocol.errors`, with their
HTTP status); this module only says how Anthropic names each status's type, so
the `anthropic` SDKs raise the exception they would raise against Anthropic's API
(`BadRequestError`, `AuthenticationError`, `NotFoundError`, `RateLimitError`...).
A prompt that fills the context is worded as Anthropic words it, `prompt is too
long: N tokens > M maximum`, because Claude Code reads that text to start
compacting its conversation. The field an error names (`param`) has no place in
Anthropic's body, so it leads the message, as Anthropic's own messages do
(`messages.1.content.0: ...`).
"""

from __future__ import annotations

from typing import Any

from realtime.protocol.errors import PromptTooLongError, RealtimeError

#: HTTP status -> Anthropic's `error.type`.
ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    408: "timeout_error",
    409: "invalid_request_error",
    413: "request_too_large",
    429: "rate_limit_error",
    431: "invalid_request_error",
    500: "api_error",
    503: "overloaded_error",
}


def error_type(status: int) -> str:
    if status in ERROR_TYPES:
        return ERROR_TYPES[status]
    return "invalid_request_error" if status < 500 else "api_error"


def error_message(error: RealtimeError) -> str:
    if isinstance(error, PromptTooLongError):
        return f"prompt is too long: {error.prompt_tokens} tokens > {error.context_length} maximum"
    param = error.param
    if param and not error.message.startswith(param):
        return f"{param}: {error.message}"
    return error.message


def error_body(error: RealtimeError) -> dict[str, Any]:
    """Anthropic's error body for `error` (the same in a JSON answer and an SSE `error`)."""
    return {
        "type": "error",
        "error": {"type": error_type(error.status), "message": error_message(error)},
    }
