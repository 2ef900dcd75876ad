"""The Responses API's own errors: unknown ids, broken conversation chains, a failed store.

Each is a `RealtimeError`, so both transports show it the way they show every
other error (an HTTP error body, or an `error` event on the socket).
"""

from __future__ import annotations

from realtime.protocol.errors import InvalidRequestError, RealtimeError


class ResponseNotFoundError(InvalidRequestError):
    """GET, DELETE or cancel of an id that is not stored (or not visible to this key)."""

    status = 404
    default_code = "response_not_found"

    def __init__(self, response_id: str):
        super().__init__(f"Response with id '{response_id}' not found.", param="response_id")


class PreviousResponseNotFoundError(InvalidRequestError):
    """`previous_response_id` names a response whose conversation cannot be rebuilt.

    OpenAI's shape: 400, code `previous_response_not_found`, param `previous_response_id`.
    `missing` is the id that could not be found: the one asked for, or an older
    response in its chain that was deleted or expired.
    """

    default_code = "previous_response_not_found"

    def __init__(self, previous_response_id: str, missing: str | None = None):
        message = f"Previous response with id '{previous_response_id}' not found."
        if missing is not None and missing != previous_response_id:
            message = (
                f"Previous response with id '{previous_response_id}' cannot be continued:"
                f" the earlier response '{missing}' in its conversation was deleted or expired."
            )
        super().__init__(message, param="previous_response_id")


class NotCancellableError(InvalidRequestError):
    """Cancel of a response that was not created with `background: true`."""

    default_code = "response_not_cancellable"

    def __init__(self, response_id: str):
        super().__init__(
            f"Response '{response_id}' cannot be cancelled: only responses created with"
            " background=true can be cancelled. Close the stream (or the connection) to stop"
            " a response that is not.",
            param="response_id",
        )


class StoreUnavailableError(RealtimeError):
    """The response store could not keep or read a record (its disk, its database).

    A response that could not be stored is not acknowledged: it ends
    `response.failed` (a 503 over HTTP) instead of `response.completed`, and the
    client may send it again."""

    status = 503
    error_type = "service_unavailable"
    default_code = "store_unavailable"
    retryable = True


class TooManyBackgroundResponsesError(RealtimeError):
    """`--max-background` (or `--max-background-per-key`) background responses are queued
    or running; this one is refused before any work, and a retry later may succeed."""

    status = 429
    error_type = "rate_limit_error"
    default_code = "too_many_background_responses"
    retryable = True

    def __init__(self, message: str):
        super().__init__(message, param="background")


class StartingAfterError(InvalidRequestError):
    """A resume `starting_after` a number the stream cannot start from."""

    default_code = "invalid_value"

    def __init__(self, message: str):
        super().__init__(message, param="starting_after")


class EventsNotKeptError(InvalidRequestError):
    """The events a resume asks for are not kept (any more, or on this server): the
    response itself is still retrieved without `stream`."""

    default_code = "events_not_kept"


class BackgroundElsewhereError(InvalidRequestError):
    """Cancel of a background response another server runs (a replica sharing the store)."""

    status = 409
    default_code = "response_running_elsewhere"

    def __init__(self, response_id: str):
        super().__init__(
            f"Response '{response_id}' runs on another server sharing this store; only that"
            " server can cancel it (send the cancel there, or wait for it to end)",
            param="response_id",
        )


class ServerRestartedError(RealtimeError):
    """What a background response left unfinished by a server that stopped is failed with,
    when that server starts again."""

    status = 500
    error_type = "server_error"
    default_code = "server_restarted"
    retryable = True


class BackgroundShutdownError(RealtimeError):
    """What a background response still running when the server's shutdown grace ran out
    is failed with."""

    status = 503
    error_type = "service_unavailable"
    default_code = "shutting_down"
    retryable = True


class ConversationNotFoundError(InvalidRequestError):
    """A conversation id that is not stored (or not visible to this key: the same answer)."""

    status = 404
    default_code = "conversation_not_found"

    def __init__(self, conversation_id: str, param: str = "conversation_id"):
        super().__init__(f"Conversation with id '{conversation_id}' not found.", param=param)


class ConversationItemNotFoundError(InvalidRequestError):
    """An item id that is not in the conversation."""

    status = 404
    default_code = "item_not_found"

    def __init__(self, conversation_id: str, item_id: str):
        super().__init__(
            f"Item with id '{item_id}' not found in conversation '{conversation_id}'.",
            param="item_id",
        )
