"""The Responses API's output shapes as pydantic models: for docs/openapi.json and tests.

Like `dialects/chat/response.py` for chat, these document and validate the wire shape;
the server builds plain dicts of exactly this shape (`objects.py`, `events.py`).
Models allow extra fields: OpenAI adds fields often, and a client must not break.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

ItemStatus = Literal["in_progress", "completed", "incomplete"]


class _Open(BaseModel):
    model_config = ConfigDict(extra="allow")


class OutputTopLogprob(_Open):
    token: str
    logprob: float
    bytes: list[int] | None = None


class OutputTokenLogprob(OutputTopLogprob):
    top_logprobs: list[OutputTopLogprob] = []


class OutputText(_Open):
    type: Literal["output_text"]
    text: str
    annotations: list[dict[str, Any]]
    #: Only with `include: ["message.output_text.logprobs"]`.
    logprobs: list[OutputTokenLogprob] | None = None


class OutputMessage(_Open):
    id: str
    type: Literal["message"]
    role: Literal["assistant"]
    status: ItemStatus
    content: list[OutputText]


class OutputFunctionCall(_Open):
    id: str
    type: Literal["function_call"]
    status: ItemStatus
    call_id: str
    name: str
    #: JSON text, as the model wrote it.
    arguments: str


class OutputReasoningText(_Open):
    type: Literal["reasoning_text"]
    text: str


class OutputReasoning(_Open):
    id: str
    type: Literal["reasoning"]
    #: Always empty: this server never summarizes; the model's reasoning is `content`.
    summary: list[dict[str, Any]]
    content: list[OutputReasoningText]
    status: ItemStatus


OutputItem = OutputMessage | OutputFunctionCall | OutputReasoning


class InputTokensDetails(_Open):
    cached_tokens: int
    #: Always 0: cache writes are not accounted separately here.
    cache_write_tokens: int


class OutputTokensDetails(_Open):
    reasoning_tokens: int


class ResponseUsage(_Open):
    input_tokens: int
    input_tokens_details: InputTokensDetails
    output_tokens: int
    output_tokens_details: OutputTokensDetails
    total_tokens: int


class ResponseError(_Open):
    code: str | None
    message: str
    param: str | None = None
    type: str | None = None


class IncompleteDetails(_Open):
    reason: Literal["max_output_tokens"]


class ResponseConversation(_Open):
    id: str


class Response(_Open):
    """The Response object: `POST /v1/responses`, `GET /v1/responses/{id}`, and the
    `response` of the lifecycle events."""

    id: str
    object: Literal["response"]
    created_at: int
    status: Literal["in_progress", "completed", "incomplete", "failed"]
    completed_at: int | None = None
    error: ResponseError | None = None
    incomplete_details: IncompleteDetails | None = None
    instructions: str | None = None
    max_output_tokens: int | None = None
    metadata: dict[str, str] | None = None
    model: str
    output: list[OutputItem]
    parallel_tool_calls: bool
    previous_response_id: str | None = None
    #: The conversation the response belongs to (only when created with `conversation`).
    conversation: ResponseConversation | None = None
    store: bool | None = None
    temperature: float | None = None
    top_p: float | None = None
    tool_choice: str | dict[str, Any]
    tools: list[dict[str, Any]]
    usage: ResponseUsage | None = None


class InputItemList(_Open):
    """`GET /v1/responses/{id}/input_items`: a page of the response's input items."""

    object: Literal["list"]
    #: Items in normal form: messages, function_call, function_call_output, reasoning.
    data: list[dict[str, Any]]
    first_id: str | None
    last_id: str | None
    has_more: bool


class DeletedResponse(_Open):
    id: str
    object: Literal["response"]
    deleted: Literal[True]


#: The Responses stream's event types (SSE and WebSocket mode alike), `error` aside.
StreamEventType = Literal[
    "response.created",
    "response.in_progress",
    "response.output_item.added",
    "response.output_item.done",
    "response.content_part.added",
    "response.content_part.done",
    "response.output_text.delta",
    "response.output_text.done",
    "response.reasoning_text.delta",
    "response.reasoning_text.done",
    "response.function_call_arguments.delta",
    "response.function_call_arguments.done",
    "response.completed",
    "response.incomplete",
    "response.failed",
]


class ResponseStreamEvent(_Open):
    """One server event (SSE `event: <type>`, `data: <this>`). Fields by type:

    * `response.created`, `response.in_progress`, `response.completed`,
      `response.incomplete`, `response.failed`: `response`;
    * `response.output_item.added` / `.done`: `output_index`, `item`;
    * `response.content_part.added` / `.done`: `item_id`, `output_index`,
      `content_index`, `part`;
    * `response.output_text.delta`: `item_id`, `output_index`, `content_index`,
      `delta`, `logprobs`; `.done`: the same with `text` instead of `delta`;
    * `response.reasoning_text.delta` / `.done`: as output text, without `logprobs`;
    * `response.function_call_arguments.delta`: `item_id`, `output_index`,
      `delta`; `.done`: `arguments`;
    * `error`: `code`, `message`, `param` (the shutdown grace ran out mid-stream).
    """

    type: Literal[StreamEventType, "error"]
    sequence_number: int
    response: Response | None = None
    output_index: int | None = None
    item_id: str | None = None
    content_index: int | None = None
    item: OutputItem | None = None
    part: OutputText | OutputReasoningText | None = None
    delta: str | None = None
    text: str | None = None
    arguments: str | None = None
    logprobs: list[OutputTokenLogprob] | None = None
    code: str | None = None
    message: str | None = None
    param: str | None = None


# --- WebSocket mode (docs/asyncapi.yaml's `responses` channel) ---

#: The SDK's pattern for a lane.
STREAM_ID_PATTERN = r"^[A-Za-z0-9_.-]{1,256}$"


class SocketResponseEvent(ResponseStreamEvent):
    """One WebSocket-mode server event: a stream event (as over SSE, never `error`), with
    its lane's `stream_id` when the `response.create` named one."""

    type: StreamEventType
    stream_id: str | None = Field(default=None, pattern=STREAM_ID_PATTERN)


class SocketErrorObject(BaseModel):
    message: str
    type: str
    param: str | None
    code: str | None


class SocketErrorEvent(BaseModel):
    """WebSocket mode's `error` event: a request that could not start, a frame that is not
    a client event, a limit. The socket stays open."""

    model_config = ConfigDict(extra="forbid")

    type: Literal["error"]
    #: The HTTP status the error would have had.
    status: int
    error: SocketErrorObject
    stream_id: str | None = Field(default=None, pattern=STREAM_ID_PATTERN)
    sequence_number: int | None = None


class SocketSteerEvent(BaseModel):
    """`response.steer`: user input that joins a running response of this socket (the
    answer so far is kept; the model continues with the input added)."""

    model_config = ConfigDict(extra="forbid")

    type: Literal["response.steer"]
    previous_response_id: str
    #: a string, or 1-16 user messages (text only)
    input: str | list[dict[str, Any]]
    #: not sent by the SDK (the target decides the lane); when sent, the target's lane
    stream_id: str | None = None


class SteerReference(BaseModel):
    id: str
    previous_response_id: str


class SocketSteerAcceptedEvent(BaseModel):
    """`response.steer.accepted`: the steer is queued for the response's next step."""

    model_config = ConfigDict(extra="forbid")

    type: Literal["response.steer.accepted"]
    steer: SteerReference
    sequence_number: int
    stream_id: str | None = Field(default=None, pattern=STREAM_ID_PATTERN)


class SteerErrorObject(BaseModel):
    type: Literal["invalid_request_error"]
    code: Literal[
        "response_not_found",
        "invalid_input",
        "steering_not_supported",
        "too_many_pending_steers",
        "response_already_completed",
        "response_not_active",
        "successor_creation_failed",
    ]
    message: str


class FailedSteer(BaseModel):
    previous_response_id: str
    #: the input returned (a string as sent, messages in normal form, or [] when invalid)
    input: str | list[dict[str, Any]]
    #: only for a steer that had been accepted
    id: str | None = None


class SocketSteerFailedEvent(BaseModel):
    """`response.steer.failed`: the steer did not (or could not) join the response."""

    model_config = ConfigDict(extra="forbid")

    type: Literal["response.steer.failed"]
    error: SteerErrorObject
    steer: FailedSteer
    sequence_number: int
    stream_id: str | None = Field(default=None, pattern=STREAM_ID_PATTERN)


class CompactedResponse(BaseModel):
    """`POST /v1/responses/compact`'s answer: the context's system and developer messages,
    then one `compaction` item (`{"id", "type": "compaction", "encrypted_content"}`)."""

    id: str
    object: Literal["response.compaction"]
    created_at: int
    output: list[dict[str, Any]]
    usage: ResponseUsage


# --- the Conversations API (`conversations.py`) ---


class Conversation(_Open):
    """`POST /v1/conversations`, `GET` / `POST /v1/conversations/{id}`, and an item's
    `DELETE` (which answers with the conversation)."""

    id: str
    object: Literal["conversation"]
    created_at: int
    metadata: dict[str, str]


class DeletedConversation(_Open):
    id: str
    object: Literal["conversation.deleted"]
    deleted: Literal[True]


class ConversationItemList(_Open):
    """`GET /v1/conversations/{id}/items` (a page) and `POST` (the items added)."""

    object: Literal["list"]
    #: Items in normal form, as `input_items` lists them.
    data: list[dict[str, Any]]
    first_id: str | None
    last_id: str | None
    has_more: bool
