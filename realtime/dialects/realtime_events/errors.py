"""The errors this dialect adds, and the `error` server event every refusal becomes.

A refused event never ends the socket: the client gets an `error` event naming
its own `event_id` (when it sent one) and the session carries on, as OpenAI's
Realtime API does. The error classes below carry their OpenAI `code`; the rest
come from `realtime.protocol.errors` and keep the codes they have everywhere.
"""

from __future__ import annotations

from typing import Any

from realtime.protocol.errors import InvalidRequestError, RealtimeError, UnsupportedFeatureError


class UnknownEventError(InvalidRequestError):
    """An event `type` this server does not know (a typo, or an API it does not have)."""

    default_code = "unknown_event_type"


class AudioNotSupportedError(UnsupportedFeatureError):
    """Audio in or out: this server speaks the protocol in text mode only."""

    default_code = "audio_not_supported"


class ItemNotFoundError(InvalidRequestError):
    default_code = "item_not_found"


class DuplicateItemIdError(InvalidRequestError):
    default_code = "item_id_already_exists"


class ConversationFullError(InvalidRequestError):
    """The conversation is at `--realtime-max-items` or `--realtime-max-conversation-chars`."""

    default_code = "conversation_full"


class ActiveResponseError(InvalidRequestError):
    """A second response for the default conversation while one is still running."""

    default_code = "conversation_already_has_active_response"


class NoActiveResponseError(InvalidRequestError):
    """`response.cancel` with nothing to cancel."""

    default_code = "response_cancel_not_active"


class TooManyResponsesError(InvalidRequestError):
    """More responses running at once on one socket than `--max-concurrent`."""

    default_code = "too_many_active_responses"


class EventError(Exception):
    """A refused client event: the client-facing error and the event's own `event_id`."""

    def __init__(self, error: RealtimeError, client_event_id: str | None):
        super().__init__(error.message)
        self.error = error
        self.client_event_id = client_event_id


def error_event(event_id: str, error: RealtimeError, client_event_id: str | None) -> dict[str, Any]:
    """The `error` server event (the SDK's `RealtimeErrorEvent`)."""
    return {
        "type": "error",
        "event_id": event_id,
        "error": {
            "type": error.error_type,
            "code": error.code,
            "message": error.message,
            "param": error.param,
            "event_id": client_event_id,
        },
    }
