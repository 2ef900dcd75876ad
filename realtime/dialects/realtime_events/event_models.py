"""Pydantic models of the server events this dialect sends, for documents and tests.

The hot path builds events as plain dicts (`render.py`, `session_state.py`);
these describe the same shapes so that `realtime.docgen` can put them in the
AsyncAPI document, and tests can check live events against that document. The
client events are `models.py`'s own models.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from realtime.dialects.realtime_events.models import (
    ItemCreateEvent,
    ItemDeleteEvent,
    ItemRetrieveEvent,
    ItemStatus,
    ItemTruncateEvent,
    ResponseCancelEvent,
    ResponseCreateEvent,
    SessionUpdateEvent,
)


class _Closed(BaseModel):
    model_config = ConfigDict(extra="forbid")


class _Event(_Closed):
    event_id: str


class ItemTextPart(_Closed):
    type: Literal["input_text", "output_text"]
    text: str


class MessageItem(_Closed):
    id: str
    object: Literal["realtime.item"]
    type: Literal["message"]
    status: ItemStatus
    role: Literal["user", "system", "assistant"]
    content: list[ItemTextPart]


class FunctionCallItem(_Closed):
    id: str
    object: Literal["realtime.item"]
    type: Literal["function_call"]
    status: ItemStatus
    call_id: str
    name: str
    arguments: str


class FunctionCallOutputItem(_Closed):
    id: str
    object: Literal["realtime.item"]
    type: Literal["function_call_output"]
    status: ItemStatus
    call_id: str
    output: str


Item = MessageItem | FunctionCallItem | FunctionCallOutputItem


class FunctionToolShown(_Closed):
    type: Literal["function"]
    name: str
    description: str | None = None
    parameters: dict[str, Any] | None = None


class SessionObject(_Closed):
    type: Literal["realtime"]
    object: Literal["realtime.session"]
    id: str
    model: str | None
    output_modalities: list[Literal["text"]]
    instructions: str
    tools: list[FunctionToolShown]
    tool_choice: Literal["none", "auto", "required"] | dict[str, Any]
    max_output_tokens: int | Literal["inf"]
    temperature: float | None
    parallel_tool_calls: bool | None
    audio: None
    truncation: Literal["disabled"]


class SessionCreatedEvent(_Event):
    """First on the socket: the session and its settings."""

    type: Literal["session.created"]
    session: SessionObject


class SessionUpdatedEvent(_Event):
    """The answer to `session.update`: the whole effective session."""

    type: Literal["session.updated"]
    session: SessionObject


class ItemAddedEvent(_Event):
    """An item entered the conversation (the client's, or one the model begins)."""

    type: Literal["conversation.item.added"]
    previous_item_id: str | None
    item: Item


class ItemDoneEvent(_Event):
    """An item is final (at once for the client's; when the model finished it)."""

    type: Literal["conversation.item.done"]
    previous_item_id: str | None
    item: Item


class ItemDeletedEvent(_Event):
    """The answer to `conversation.item.delete`."""

    type: Literal["conversation.item.deleted"]
    item_id: str


class ItemRetrievedEvent(_Event):
    """The answer to `conversation.item.retrieve`: the item as it is now."""

    type: Literal["conversation.item.retrieved"]
    item: Item


class StatusError(_Closed):
    type: str
    code: str | None
    message: str


class StatusDetails(_Closed):
    type: Literal["cancelled", "incomplete", "failed"]
    reason: Literal["client_cancelled", "max_output_tokens"] | None = None
    error: StatusError | None = None


class CachedTokensDetails(_Closed):
    text_tokens: int
    audio_tokens: Literal[0]
    image_tokens: Literal[0]


class InputTokenDetails(_Closed):
    text_tokens: int
    audio_tokens: Literal[0]
    image_tokens: Literal[0]
    cached_tokens: int
    cached_tokens_details: CachedTokensDetails


class OutputTokenDetails(_Closed):
    text_tokens: int
    audio_tokens: Literal[0]


class ResponseUsage(_Closed):
    total_tokens: int
    input_tokens: int
    output_tokens: int
    input_token_details: InputTokenDetails
    output_token_details: OutputTokenDetails


class ResponseObject(_Closed):
    id: str
    object: Literal["realtime.response"]
    status: Literal["in_progress", "completed", "cancelled", "failed", "incomplete"]
    status_details: StatusDetails | None
    output: list[Item]
    #: null for an out-of-band response (`conversation: "none"`).
    conversation_id: str | None
    output_modalities: list[Literal["text"]]
    max_output_tokens: int | Literal["inf"]
    metadata: dict[str, str] | None
    usage: ResponseUsage | None


class ResponseCreatedEvent(_Event):
    """A response starts (after `response.create`)."""

    type: Literal["response.created"]
    response: ResponseObject


class ResponseDoneEvent(_Event):
    """A response's last event: completed, cancelled, failed or incomplete, with usage."""

    type: Literal["response.done"]
    response: ResponseObject


class OutputItemAddedEvent(_Event):
    """The model begins an output item (a message, or a function call)."""

    type: Literal["response.output_item.added"]
    response_id: str
    output_index: int
    item: Item


class OutputItemDoneEvent(_Event):
    """An output item is finished (status `incomplete` when the response was cut short)."""

    type: Literal["response.output_item.done"]
    response_id: str
    output_index: int
    item: Item


class TextPartShown(_Closed):
    type: Literal["text"]
    text: str


class ContentPartAddedEvent(_Event):
    """The message's text part begins."""

    type: Literal["response.content_part.added"]
    response_id: str
    item_id: str
    output_index: int
    content_index: int
    part: TextPartShown


class ContentPartDoneEvent(_Event):
    """The message's text part is finished."""

    type: Literal["response.content_part.done"]
    response_id: str
    item_id: str
    output_index: int
    content_index: int
    part: TextPartShown


class OutputTextDeltaEvent(_Event):
    """New text of the message."""

    type: Literal["response.output_text.delta"]
    response_id: str
    item_id: str
    output_index: int
    content_index: int
    delta: str


class OutputTextDoneEvent(_Event):
    """The message's whole text."""

    type: Literal["response.output_text.done"]
    response_id: str
    item_id: str
    output_index: int
    content_index: int
    text: str


class FunctionCallArgumentsDeltaEvent(_Event):
    """More of a function call's arguments (JSON text, as the model writes it)."""

    type: Literal["response.function_call_arguments.delta"]
    response_id: str
    item_id: str
    output_index: int
    call_id: str
    delta: str


class FunctionCallArgumentsDoneEvent(_Event):
    """A function call's name and whole arguments."""

    type: Literal["response.function_call_arguments.done"]
    response_id: str
    item_id: str
    output_index: int
    call_id: str
    name: str
    arguments: str


class ErrorBody(_Closed):
    type: str
    code: str | None
    message: str
    param: str | None
    #: The client event this error answers, when it had an `event_id`.
    event_id: str | None


class ErrorEvent(_Event):
    """A refused event or a failed response; the session carries on."""

    type: Literal["error"]
    error: ErrorBody


#: Client events, by AsyncAPI message name.
CLIENT_EVENTS_DOC: dict[str, type[BaseModel]] = {
    "SessionUpdateEvent": SessionUpdateEvent,
    "ConversationItemCreateEvent": ItemCreateEvent,
    "ConversationItemDeleteEvent": ItemDeleteEvent,
    "ConversationItemRetrieveEvent": ItemRetrieveEvent,
    "ConversationItemTruncateEvent": ItemTruncateEvent,
    "ResponseCreateEvent": ResponseCreateEvent,
    "ResponseCancelEvent": ResponseCancelEvent,
}

#: Server events, by AsyncAPI message name (the names differ from the chat frames').
SERVER_EVENTS_DOC: dict[str, type[BaseModel]] = {
    "SessionCreatedEvent": SessionCreatedEvent,
    "SessionUpdatedEvent": SessionUpdatedEvent,
    "ConversationItemAddedEvent": ItemAddedEvent,
    "ConversationItemDoneEvent": ItemDoneEvent,
    "ConversationItemDeletedEvent": ItemDeletedEvent,
    "ConversationItemRetrievedEvent": ItemRetrievedEvent,
    "ResponseCreatedEvent": ResponseCreatedEvent,
    "ResponseOutputItemAddedEvent": OutputItemAddedEvent,
    "ResponseContentPartAddedEvent": ContentPartAddedEvent,
    "ResponseOutputTextDeltaEvent": OutputTextDeltaEvent,
    "ResponseOutputTextDoneEvent": OutputTextDoneEvent,
    "ResponseContentPartDoneEvent": ContentPartDoneEvent,
    "ResponseFunctionCallArgumentsDeltaEvent": FunctionCallArgumentsDeltaEvent,
    "ResponseFunctionCallArgumentsDoneEvent": FunctionCallArgumentsDoneEvent,
    "ResponseOutputItemDoneEvent": OutputItemDoneEvent,
    "ResponseDoneEvent": ResponseDoneEvent,
    "RealtimeErrorEvent": ErrorEvent,
}

#: The message name of each server event `type` (tests classify live events with it).
SERVER_EVENT_NAMES: dict[str, str] = {
    model.model_fields["type"].annotation.__args__[0]: name  # type: ignore[union-attr]
    for name, model in SERVER_EVENTS_DOC.items()
}
