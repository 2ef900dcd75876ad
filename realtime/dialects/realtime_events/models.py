"""The client events of the Realtime protocol (text mode), as strict pydantic models.

Shapes follow the `openai` SDK's `openai.types.realtime` (the specification we
serve). The unknown-field policy is the chat request's: a field the API does not
define is refused with `unknown_field`, a wrong JSON type with `invalid_type`,
each naming the field. Fields the API defines but this server does not have
(audio, MCP, prompts, reasoning, tracing) are accepted by the schema only so the
refusal can say exactly that (`decode.py`), never silently ignored.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr

#: Characters in a client-chosen id (item ids, call ids, event ids, response ids).
MAX_ID_CHARS = 64
#: OpenAI's metadata limits: 16 pairs, keys of 64 characters, values of 512.
MAX_METADATA_PAIRS = 16
MAX_METADATA_KEY_CHARS = 64
MAX_METADATA_VALUE_CHARS = 512

ClientId = Annotated[str, Field(min_length=1, max_length=MAX_ID_CHARS)]
#: In the Responses API's order (`realtime.dialects.responses.schemas.ItemStatus`): typing caches
#: `X | None` by equality, and Literals equal as sets, so whichever order is imported
#: first would be the generated docs' enum order for both.
ItemStatus = Literal["in_progress", "completed", "incomplete"]
MaxOutputTokens = Annotated[int, Field(ge=1)] | Literal["inf"]
Temperature = Annotated[float, Field(ge=0.0, le=2.0)]


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


# --- conversation items ---


class _Item(Strict):
    id: ClientId | None = None
    object: Literal["realtime.item"] | None = None
    status: ItemStatus | None = None


class UserContent(Strict):
    type: Literal["input_text", "input_audio", "input_image"] | None = None
    text: str | None = None
    audio: str | None = None
    transcript: str | None = None
    image_url: str | None = None
    detail: Literal["auto", "low", "high"] | None = None


class SystemContent(Strict):
    type: Literal["input_text"] | None = None
    text: str | None = None


class AssistantContent(Strict):
    type: Literal["output_text", "output_audio"] | None = None
    text: str | None = None
    audio: str | None = None
    transcript: str | None = None


class UserMessageItem(_Item):
    type: Literal["message"]
    role: Literal["user"]
    content: list[UserContent]


class SystemMessageItem(_Item):
    type: Literal["message"]
    role: Literal["system"]
    content: list[SystemContent]


class AssistantMessageItem(_Item):
    type: Literal["message"]
    role: Literal["assistant"]
    content: list[AssistantContent]


class FunctionCallItem(_Item):
    type: Literal["function_call"]
    name: str = Field(min_length=1)
    arguments: str
    call_id: ClientId | None = None


class FunctionCallOutputItem(_Item):
    type: Literal["function_call_output"]
    call_id: ClientId
    output: str


MessageItem = UserMessageItem | SystemMessageItem | AssistantMessageItem
Item = MessageItem | FunctionCallItem | FunctionCallOutputItem


class ItemReference(Strict):
    """`response.create`'s `input` may name an item already in the conversation."""

    type: Literal["item_reference"]
    id: ClientId


# --- tools ---


class FunctionTool(Strict):
    type: Literal["function"] | None = None
    name: str = Field(min_length=1)
    description: str | None = None
    parameters: dict[str, Any] | None = None


class ToolChoiceFunction(Strict):
    type: Literal["function"]
    name: str = Field(min_length=1)


ToolChoice = Literal["none", "auto", "required"] | ToolChoiceFunction


# --- session.update's session, response.create's response ---


class GenerationSettings(Strict):
    """What a session sets and a response may override."""

    instructions: str | None = None
    #: Decoded as dicts so that an MCP tool gets its own refusal (`decode.py`).
    tools: list[dict[str, Any]] | None = None
    tool_choice: Literal["none", "auto", "required"] | dict[str, Any] | None = None
    output_modalities: list[Literal["text", "audio"]] | None = None
    max_output_tokens: MaxOutputTokens | None = None
    #: Not in the GA schema (the beta had it); kept, since a text model needs it.
    temperature: Temperature | None = None
    parallel_tool_calls: bool | None = None
    # defined by the API, refused here (text only; no prompts, reasoning settings)
    audio: dict[str, Any] | None = None
    prompt: dict[str, Any] | None = None
    reasoning: dict[str, Any] | None = None


class SessionSettings(GenerationSettings):
    type: Literal["realtime", "transcription"]
    model: str | None = None
    include: list[str] | None = None
    tracing: Any = None
    truncation: Any = None


class ResponseSettings(GenerationSettings):
    conversation: str | None = None
    input: list[dict[str, Any]] | None = None
    metadata: dict[str, str] | None = None


# --- client events ---


class _Event(Strict):
    event_id: ClientId | None = None


class SessionUpdateEvent(_Event):
    type: Literal["session.update"]
    session: SessionSettings


class ItemCreateEvent(_Event):
    type: Literal["conversation.item.create"]
    previous_item_id: ClientId | None = None
    #: Decoded as a dict so each item type gets its own checks (`decode.parse_item`).
    item: dict[str, Any]
    #: The item, parsed once by `decode.py`.
    _parsed: Item | None = PrivateAttr(default=None)

    @property
    def parsed(self) -> Item:
        assert self._parsed is not None, "decode.decode_event parses the item"
        return self._parsed


class ItemDeleteEvent(_Event):
    type: Literal["conversation.item.delete"]
    item_id: ClientId


class ItemRetrieveEvent(_Event):
    type: Literal["conversation.item.retrieve"]
    item_id: ClientId


class ItemTruncateEvent(_Event):
    type: Literal["conversation.item.truncate"]
    item_id: ClientId
    content_index: int = Field(ge=0)
    audio_end_ms: int = Field(ge=0)


class ResponseCreateEvent(_Event):
    type: Literal["response.create"]
    response: ResponseSettings | None = None


class ResponseCancelEvent(_Event):
    type: Literal["response.cancel"]
    response_id: ClientId | None = None


ClientEvent = (
    SessionUpdateEvent
    | ItemCreateEvent
    | ItemDeleteEvent
    | ItemRetrieveEvent
    | ItemTruncateEvent
    | ResponseCreateEvent
    | ResponseCancelEvent
)

#: Every client event this server reads, by `type`.
CLIENT_EVENTS: dict[str, type[_Event]] = {
    "session.update": SessionUpdateEvent,
    "conversation.item.create": ItemCreateEvent,
    "conversation.item.delete": ItemDeleteEvent,
    "conversation.item.retrieve": ItemRetrieveEvent,
    "conversation.item.truncate": ItemTruncateEvent,
    "response.create": ResponseCreateEvent,
    "response.cancel": ResponseCancelEvent,
}

#: Client events of the API that carry audio: refused with `audio_not_supported`.
AUDIO_EVENTS = frozenset(
    {
        "input_audio_buffer.append",
        "input_audio_buffer.commit",
        "input_audio_buffer.clear",
        "output_audio_buffer.clear",
    }
)
