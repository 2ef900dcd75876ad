"""The `POST /v1/responses` body (and, later, the socket's `response.create`), strict.

Unknown-field policy, as for chat: a field the SDK does not define is a 400
`unknown_field` naming it, at any depth we model; a wrong JSON type is a 400
`invalid_type`. Every field of the SDK's `responses.create()` is known, and falls
in one of three groups:

* honoured: `model`, `input`, `instructions`, `previous_response_id`, `store`,
  `stream`, `metadata`, `temperature`, `top_p`, `max_output_tokens`, `tools`
  (function tools), `tool_choice`, `parallel_tool_calls`, `text.format` (`text`;
  `json_schema` and `json_object` enforced on the engines that constrain generation,
  refused on the others),
  `include` (`message.output_text.logprobs`, `reasoning.encrypted_content`),
  `top_logprobs`, `prompt_cache_key` (the request's cache scope over HTTP),
  `reasoning.effort` (`none` / `minimal` turn the template's thinking switch off,
  the others on), `conversation` (a stored conversation, `conversations.py`: its
  items come before the input, and the response's items are added to it), and
  this server's extension `nvext.agent_hints.speculative_prefill` (warm the next
  turn, as chat);
* accepted, no effect on a self-hosted text model (kept so SDK defaults and agent
  frameworks work unchanged): `user`, `safety_identifier`,
  `prompt_cache_retention`, `prompt_cache_options` (without `prewarm`),
  `service_tier`, the other `reasoning` fields (`summary`...), `text.verbosity`,
  `max_tool_calls` (it counts built-in tools, which this server has none of),
  `background: false`, `background_options`, `image`, `access_programs`,
  `stream_options`, `moderation`, hosted tools in `tools` (never offered to the
  model), the other `include` values (they name output this server never
  produces), and Codex's `client_metadata` (not in the SDK: string pairs about the
  client);
* `context_management: [{"type": "compaction", "compact_threshold": N}]`: the
  context is compacted (`compaction.py`) when its prompt passes N tokens;
* `truncation: "auto"`: a context too long for the model loses its oldest turns
  (`truncation.py`); `"disabled"` (the default) refuses it;
* `background: true` over HTTP (it needs `store`; `background.py`): the response
  runs detached from its request;
* refused with a 400 saying so (`unsupported`), because serving them needs state
  this server does not keep: `background: true` in WebSocket mode,
  `prompt` (a stored prompt template),
  `prompt_cache_options.prewarm`, tool choices of hosted tools.

`tests/dialects/responses/test_request.py` derives the field list from the
installed SDK's `ResponseCreateParams`, so a field a newer SDK adds fails it.
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, ValidationError

from realtime.dialects.responses.context_management import parse_context_management
from realtime.dialects.responses.items import normalize_input
from realtime.dialects.responses.tools import FunctionTools, parse_tool_choice, parse_tools
from realtime.dialects.responses.validation import client_error
from realtime.protocol.errors import InvalidRequestError, UnsupportedFeatureError
from realtime.protocol.input_limits import DEFAULT_INPUT_LIMITS, InputLimits

#: OpenAI's limits on `metadata`: pairs, key length, value length.
MAX_METADATA_PAIRS = 16
MAX_METADATA_KEY_CHARS = 64
MAX_METADATA_VALUE_CHARS = 512

LOGPROBS_INCLUDE = "message.output_text.logprobs"
ENCRYPTED_REASONING_INCLUDE = "reasoning.encrypted_content"

Includable = Literal[
    "file_search_call.results",
    "web_search_call.results",
    "web_search_call.action.sources",
    "message.input_image.image_url",
    "computer_call_output.output.image_url",
    "code_interpreter_call.outputs",
    "reasoning.encrypted_content",
    "message.output_text.logprobs",
]


#: Every field of the SDK's `ResponseCreateParams` (and Codex's `client_metadata`) by
#: what it does here; docs/protocol.md lists each, and a test checks these against the
#: installed SDK.
SERVED_FIELDS = frozenset(
    {
        "model",
        "input",
        "instructions",
        "previous_response_id",
        "store",
        "stream",
        "metadata",
        "temperature",
        "top_p",
        "max_output_tokens",
        "tools",
        "tool_choice",
        "parallel_tool_calls",
        "text",
        "include",
        "top_logprobs",
        "prompt_cache_key",
        "context_management",
        "reasoning",
        "conversation",
    }
)
NO_EFFECT_FIELDS = frozenset(
    {
        "user",
        "safety_identifier",
        "prompt_cache_retention",
        "prompt_cache_options",
        "service_tier",
        "max_tool_calls",
        "truncation",
        "background",
        "background_options",
        "image",
        "access_programs",
        "stream_options",
        "moderation",
        "client_metadata",
    }
)
#: Accepted when null; any value is a 400 `unsupported` (it names state this server
#: does not keep).
REFUSED_FIELDS = frozenset({"prompt"})


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class TextFormat(_Strict):
    type: Literal["text", "json_schema", "json_object"]
    # json_schema's fields (flat, unlike the chat API's nested `json_schema`)
    name: str | None = None
    schema_: dict[str, Any] | None = Field(default=None, alias="schema")
    description: str | None = None
    strict: bool | None = None


class TextConfig(_Strict):
    format: TextFormat | None = None
    verbosity: Literal["low", "medium", "high"] | None = None


class ReasoningConfig(_Strict):
    effort: str | None = None
    summary: Literal["auto", "concise", "detailed"] | None = None
    generate_summary: Literal["auto", "concise", "detailed"] | None = None
    context: Literal["auto", "current_turn", "all_turns"] | None = None
    mode: str | None = None


class ConversationParam(_Strict):
    """`conversation: {"id": ...}` (the SDK's `ResponseConversationParam`)."""

    id: str


class ResponsesStreamOptions(_Strict):
    #: OpenAI pads delta events against length side channels; this server never pads.
    include_obfuscation: bool | None = None


class PromptCacheOptions(_Strict):
    comparison_response_id: str | None = None
    mode: Literal["implicit", "explicit"] | None = None
    prewarm: bool | None = None
    ttl: Literal["30m", "12h"] | None = None


class ImageOptions(_Strict):
    context_compression: Literal["auto", "enabled", "disabled"] | None = None


class AccessPrograms(_Strict):
    cyber: Literal["standard", "daybreak_blue", "daybreak_red"] | None = None


class ResponsesAgentHints(_Strict):
    """The chat API's `nvext.agent_hints`, as a response takes them."""

    #: After the answer, warm the KV cache with the conversation so far (see docs).
    speculative_prefill: bool | None = None


class ResponsesNvExt(_Strict):
    """The chat API's `nvext`, as far as a response uses it: the agent hints."""

    #: `speculative_prefill: true`: once the answer is out, warm the prefix every next
    #: turn starts with (the conversation so far), at background priority.
    agent_hints: ResponsesAgentHints | None = None


class ResponsesRequest(_Strict):
    """`POST /v1/responses`. Items and tools are validated by `parse_responses_request`."""

    #: Every response streams whatever `stream` says (the socket's events).
    always_streams: ClassVar[bool] = False

    model: str
    input: str | list[Any] | None = None
    instructions: str | None = None
    previous_response_id: str | None = None
    store: bool | None = None
    stream: bool | None = None
    stream_options: ResponsesStreamOptions | None = None
    metadata: dict[str, str] | None = None

    temperature: float | None = Field(default=None, ge=0.0, le=2.0)
    top_p: float | None = Field(default=None, gt=0.0, le=1.0)
    top_logprobs: int | None = Field(default=None, ge=0, le=20)
    max_output_tokens: int | None = Field(default=None, ge=1)
    max_tool_calls: int | None = Field(default=None, ge=0)

    tools: list[Any] | None = None
    tool_choice: str | dict[str, Any] | None = None
    parallel_tool_calls: bool | None = None

    text: TextConfig | None = None
    include: list[Includable] | None = None
    reasoning: ReasoningConfig | None = None
    truncation: Literal["auto", "disabled"] | None = None
    background: bool | None = None

    # accepted, no effect here
    user: str | None = None
    safety_identifier: str | None = None
    prompt_cache_key: str | None = None
    prompt_cache_retention: Literal["in_memory", "24h"] | None = None
    prompt_cache_options: PromptCacheOptions | None = None
    service_tier: str | None = None
    image: ImageOptions | None = None
    access_programs: AccessPrograms | None = None

    background_options: dict[str, Any] | None = None
    context_management: list[Any] | None = None
    moderation: dict[str, Any] | None = None
    #: Codex CLI's (not the SDK's): string pairs about the client and its turn
    client_metadata: dict[str, str] | None = None

    # this server's extension (the chat API's `nvext`); the SDK sends it as extra_body
    nvext: ResponsesNvExt | None = None

    #: the stored conversation the response belongs to: an id, or `{"id": ...}`
    conversation: str | ConversationParam | None = None

    # refused when set
    prompt: dict[str, Any] | None = None

    _items: list[dict[str, Any]] = PrivateAttr(default_factory=list)
    _tools: FunctionTools = PrivateAttr(default_factory=FunctionTools)
    _tool_choice: Any = PrivateAttr(default=None)
    _compact_threshold: int | None = PrivateAttr(default=None)

    @property
    def items(self) -> list[dict[str, Any]]:
        """The input items in normal form (ids assigned), as stored and listed."""
        return self._items

    @property
    def function_tools(self) -> FunctionTools:
        return self._tools

    @property
    def chat_tool_choice(self) -> Any:
        """`tool_choice` as the chat API spells it (None when not given)."""
        return self._tool_choice

    @property
    def compact_threshold(self) -> int | None:
        """`context_management`'s compaction threshold in tokens; 0: the default (80% of
        the model's context); None: no automatic compaction."""
        return self._compact_threshold

    @property
    def conversation_id(self) -> str | None:
        """The id of the conversation the response belongs to (None: none)."""
        conversation = self.conversation
        if isinstance(conversation, ConversationParam):
            return conversation.id
        return conversation

    @property
    def wants_logprobs(self) -> bool:
        return bool(self.include and LOGPROBS_INCLUDE in self.include)

    @property
    def warms_next_turn(self) -> bool:
        """`nvext.agent_hints.speculative_prefill` (see `pipeline/speculative.py`)."""
        hints = self.nvext.agent_hints if self.nvext is not None else None
        return bool(hints is not None and hints.speculative_prefill)

    @property
    def wants_encrypted_reasoning(self) -> bool:
        return bool(self.include and ENCRYPTED_REASONING_INCLUDE in self.include)

    @property
    def stores(self) -> bool:
        """`store` defaults to true, as OpenAI's."""
        return self.store is not False


class ResponseCreateEvent(ResponsesRequest):
    """The WebSocket mode's `response.create` event: the same body, plus the event's own
    fields (the SDK's `ResponseCreate`). Parse it with
    `parse_responses_request(data, limits, ResponseCreateEvent)`."""

    always_streams: ClassVar[bool] = True

    type: Literal["response.create"]
    #: The lane (`AsyncResponsesWebSocketSession.lane`) the response's events carry.
    stream_id: str | None = None
    #: false: prepare the cache with the input and generate nothing (OpenAI's prewarm).
    #: The socket dialect decides whether it serves it; `ResponsesService` generates.
    generate: bool | None = None


def parse_responses_request(
    data: Any,
    limits: InputLimits = DEFAULT_INPUT_LIMITS,
    model: type[ResponsesRequest] = ResponsesRequest,
) -> ResponsesRequest:
    """Validate a decoded JSON body; every failure is one specific 400 naming the field.

    `model` lets the socket dialect add its own fields (`stream_id`, `generate`) to
    the same request. The body's depth and size were checked when it was decoded
    (`limits`, `protocol/json_input.py`)."""
    if not isinstance(data, dict):
        raise InvalidRequestError("the request body must be a JSON object")
    try:
        request = model.model_validate(data)
    except ValidationError as exc:
        raise client_error(exc) from None
    _refuse_unsupported(request)
    check_metadata(request.metadata)
    request._items = normalize_input(request.input)
    request._tools = parse_tools(request.tools)
    request._tool_choice = parse_tool_choice(request.tool_choice, request._tools)
    request._compact_threshold = parse_context_management(request.context_management)
    return request


def _refuse_unsupported(request: ResponsesRequest) -> None:
    if request.stream_options is not None and not (request.stream or request.always_streams):
        raise InvalidRequestError(
            "stream_options is only allowed when stream is true", param="stream_options"
        )
    if request.background and request.always_streams:
        raise UnsupportedFeatureError(
            "background responses are not supported in WebSocket mode: a response runs"
            " while its socket is open; create it with background over HTTP",
            param="background",
        )
    if request.background and not request.stores:
        raise InvalidRequestError(
            "background: true needs store: true (a background response is polled and"
            " resumed from the store)",
            param="background",
        )
    options = request.prompt_cache_options
    if options is not None and options.prewarm:
        raise UnsupportedFeatureError(
            "prompt_cache_options.prewarm is not supported", param="prompt_cache_options.prewarm"
        )
    if request.prompt is not None:
        raise UnsupportedFeatureError("prompt is not supported by this server", param="prompt")
    if request.conversation is not None and request.previous_response_id is not None:
        raise InvalidRequestError(
            "conversation and previous_response_id cannot be used together: a response"
            " continues either a conversation or a previous response",
            param="conversation",
            code="invalid_value",
        )
    conversation_id = request.conversation_id
    if conversation_id is not None and not conversation_id:
        raise InvalidRequestError(
            "conversation: the id must not be empty", param="conversation", code="invalid_value"
        )


def check_metadata(metadata: dict[str, str] | None) -> None:
    """OpenAI's limits on `metadata` (a response's, a conversation's)."""
    if metadata is None:
        return
    if len(metadata) > MAX_METADATA_PAIRS:
        raise InvalidRequestError(
            f"metadata: at most {MAX_METADATA_PAIRS} key-value pairs, got {len(metadata)}",
            param="metadata",
        )
    for key, value in metadata.items():
        if len(key) > MAX_METADATA_KEY_CHARS:
            raise InvalidRequestError(
                f"metadata: keys may have at most {MAX_METADATA_KEY_CHARS} characters;"
                f" one has {len(key)}",
                param="metadata",
            )
        if len(value) > MAX_METADATA_VALUE_CHARS:
            raise InvalidRequestError(
                f"metadata: values may have at most {MAX_METADATA_VALUE_CHARS} characters;"
                f" the value of {key!r} has {len(value)}",
                param=f"metadata.{key}",
            )
