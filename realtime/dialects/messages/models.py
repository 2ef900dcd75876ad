"""The Messages API request as Anthropic's API and its SDKs send it, validated strictly.

Unknown fields are refused by name (as Anthropic refuses them), so a typo never
silently changes an answer. The fields Anthropic's API accepts that have no
meaning for a local model are accepted and change nothing: they are listed once,
in `NO_EFFECT_FIELDS` (and in docs/protocol.md), and a test checks that list
against the installed `anthropic` SDK's own request type, so a field a new SDK
adds fails a test rather than a client.

Content blocks are a union tagged by `type`. `image` and `document` blocks are
modelled so they can be refused naming their place (`messages.0.content.1`);
`cache_control` is accepted everywhere Anthropic takes it (the prefix cache is
automatic).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

#: Top-level fields Anthropic's API (and its beta) accepts that change nothing here.
NO_EFFECT_FIELDS = (
    "billing_policy",
    "cache_control",
    "compaction",
    "container",
    "context_management",
    "diagnostics",
    "fallback_credit_token",
    "fallbacks",
    "inference_geo",
    "mcp_servers",
    "service_tier",
    "speed",
    "thread",
    "user_profile_id",
    "workspace_id",
)


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class _Open(BaseModel):
    """A block refused as a whole: its inner fields are not checked first."""

    model_config = ConfigDict(extra="allow", strict=True)


class CacheControl(BaseModel):
    model_config = ConfigDict(extra="allow", strict=True)
    type: str


class TextBlock(_Strict):
    type: Literal["text"]
    text: str
    cache_control: CacheControl | None = None
    citations: list[dict[str, Any]] | None = None


class ImageBlock(_Open):
    type: Literal["image"]


class DocumentBlock(_Open):
    type: Literal["document"]


class SearchResultBlock(_Open):
    type: Literal["search_result"]


class ThinkingBlock(_Strict):
    type: Literal["thinking"]
    thinking: str
    signature: str | None = None
    cache_control: CacheControl | None = None


class RedactedThinkingBlock(_Strict):
    type: Literal["redacted_thinking"]
    data: str
    cache_control: CacheControl | None = None


class ToolUseBlock(_Strict):
    type: Literal["tool_use"]
    id: str = Field(min_length=1)
    name: str = Field(min_length=1)
    input: dict[str, Any]
    cache_control: CacheControl | None = None
    caller: dict[str, Any] | None = None


ToolResultContent = Annotated[
    TextBlock | ImageBlock | DocumentBlock | SearchResultBlock, Field(discriminator="type")
]


class ToolResultBlock(_Strict):
    type: Literal["tool_result"]
    tool_use_id: str = Field(min_length=1)
    content: str | list[ToolResultContent] | None = None
    is_error: bool | None = None
    cache_control: CacheControl | None = None


class ServerToolUseBlock(_Open):
    type: Literal["server_tool_use"]


ContentBlock = Annotated[
    TextBlock
    | ImageBlock
    | DocumentBlock
    | SearchResultBlock
    | ThinkingBlock
    | RedactedThinkingBlock
    | ToolUseBlock
    | ToolResultBlock
    | ServerToolUseBlock,
    Field(discriminator="type"),
]


class MessageParam(_Strict):
    """One turn. `system` turns are Claude Code's: kept where they were sent."""

    role: Literal["user", "assistant", "system"]
    content: str | list[ContentBlock]


class CustomTool(_Strict):
    """A tool the client runs: its name, description and JSON Schema for `input`."""

    name: str = Field(min_length=1, max_length=128)
    description: str | None = None
    input_schema: dict[str, Any]
    type: Literal["custom"] | None = None
    cache_control: CacheControl | None = None
    strict: bool | None = None
    #: accepted with no effect: every tool is offered to the model
    defer_loading: bool | None = None
    eager_input_streaming: bool | None = None
    input_examples: list[dict[str, Any]] | None = None
    allowed_callers: list[str] | None = None


class ToolChoice(_Strict):
    type: Literal["auto", "any", "tool", "none"]
    name: str | None = None
    disable_parallel_tool_use: bool | None = None


class Thinking(_Strict):
    type: Literal["enabled", "adaptive", "disabled"]
    #: `enabled` only: tokens the reasoning may use (Anthropic's minimum is 1024)
    budget_tokens: int | None = Field(default=None, ge=1)
    #: accepted with no effect: the reasoning is shown as the model wrote it
    display: Literal["summarized", "omitted"] | None = None


class JsonOutputFormat(_Strict):
    type: Literal["json_schema"]
    schema_: dict[str, Any] = Field(alias="schema")


class OutputConfig(_Strict):
    #: accepted; the template's thinking switch is `thinking`'s (see docs/protocol.md)
    effort: Literal["low", "medium", "high", "xhigh", "max"] | None = None
    format: JsonOutputFormat | None = None


class Metadata(BaseModel):
    model_config = ConfigDict(extra="allow", strict=True)
    user_id: str | None = None


class PromptRequest(_Strict):
    """What both endpoints take: the prompt (model, turns, system, tools, thinking)."""

    model: str = Field(min_length=1)
    messages: list[MessageParam] = Field(min_length=1)
    system: str | list[TextBlock] | None = None
    #: tools are checked one by one in `build.py`, so a hosted tool is refused by name
    tools: list[dict[str, Any]] | None = None
    tool_choice: ToolChoice | None = None
    thinking: Thinking | None = None
    output_config: OutputConfig | None = None
    #: the beta's older spelling of `output_config.format`
    output_format: JsonOutputFormat | None = None
    # accepted with no effect (NO_EFFECT_FIELDS)
    billing_policy: Any = None
    cache_control: Any = None
    compaction: Any = None
    container: Any = None
    context_management: Any = None
    diagnostics: Any = None
    fallback_credit_token: Any = None
    fallbacks: Any = None
    inference_geo: Any = None
    mcp_servers: Any = None
    service_tier: Any = None
    speed: Any = None
    thread: Any = None
    user_profile_id: Any = None
    workspace_id: Any = None


class MessagesRequest(PromptRequest):
    """`POST /v1/messages`."""

    max_tokens: int = Field(ge=1)
    stream: bool | None = None
    stop_sequences: list[str] | None = None
    temperature: float | None = Field(default=None, ge=0.0, le=1.0)
    top_p: float | None = Field(default=None, ge=0.0, le=1.0)
    top_k: int | None = Field(default=None, ge=0)
    metadata: Metadata | None = None


class CountTokensRequest(PromptRequest):
    """`POST /v1/messages/count_tokens`: the same prompt, without the answer's fields."""
