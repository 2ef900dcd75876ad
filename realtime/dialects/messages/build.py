"""A Messages API request as the neutral `GenerationRequest`.

The wire model (`models.py`) was validated strictly when it was parsed; here the
Messages API's own rules are applied once:

* `system` (a string or text blocks) is the first system message. Claude Code's
  first system text, `x-anthropic-billing-header: cc_version=...`, changes from
  session to session; it is left out of the prompt (so the prompt's prefix, and
  the prefix cache, stay the same across sessions) unless the server keeps it
  (`--keep-billing-header`).
* Turns become conversation items in the order they were sent. A `system` turn
  inside `messages` (Claude Code sends one) stays where it is: the chat template
  renders it there, or refuses it (a 400 with the template's own message).
* Blocks: `text` -> message text (consecutive text blocks are one message's parts);
  `thinking` -> reasoning (its signature is not checked); `redacted_thinking` ->
  nothing (its data is opaque); `tool_use` -> a function call; `tool_result` -> the
  function's output (text blocks, or the string); `image`, `document` and
  `search_result` are refused naming their place.
* `tools`: custom tools only; a hosted tool (`web_search_...`, `bash_...`) is
  refused naming `tools.N.type`. `tool_choice`: `auto`, `any` (a call is
  required), `tool` (that one), `none`; `disable_parallel_tool_use` keeps one call.
* `thinking`: `enabled` and `adaptive` turn the template's thinking switch on,
  `disabled` off; absent leaves the template's default.
* `max_tokens` beyond what fits is clamped to what fits (Claude Code sends 32000
  whatever the model); a prompt that fits nothing is refused in Anthropic's words.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson
from pydantic import BaseModel, ValidationError

from realtime.dialects.messages.models import (
    ContentBlock,
    CountTokensRequest,
    CustomTool,
    JsonOutputFormat,
    MessageParam,
    MessagesRequest,
    PromptRequest,
    RedactedThinkingBlock,
    TextBlock,
    ThinkingBlock,
    ToolChoice,
    ToolResultBlock,
    ToolUseBlock,
)
from realtime.protocol.conversation import (
    FunctionCall,
    FunctionCallOutput,
    FunctionTool,
    Item,
    Message,
    NamedFunction,
    Reasoning,
)
from realtime.protocol.conversation import ToolChoice as NeutralToolChoice
from realtime.protocol.errors import InvalidRequestError, UnsupportedFeatureError
from realtime.protocol.generation_request import (
    FieldPaths,
    GenerationRequest,
    JsonFormat,
    Sampling,
    Stopping,
)
from realtime.protocol.input_limits import DEFAULT_INPUT_LIMITS, InputLimits, check_stop_strings
from realtime.protocol.validation import validate_body, validation_error_to_client

#: What Claude Code's first system text starts with (its billing line).
BILLING_HEADER = "x-anthropic-billing-header:"

PATHS = FieldPaths(
    input="messages",
    max_tokens="max_tokens",
    format="output_config.format",
    tools="tools",
    tool_choice="tool_choice",
    template_kwargs="thinking",
)
_OUTPUT_FORMAT_PATHS = FieldPaths(
    input="messages",
    max_tokens="max_tokens",
    format="output_format",
    tools="tools",
    tool_choice="tool_choice",
    template_kwargs="thinking",
)

#: Blocks each role's turn may hold (others are refused naming their place).
_ALLOWED = {
    "user": frozenset({"text", "tool_result"}),
    "assistant": frozenset({"text", "thinking", "redacted_thinking", "tool_use"}),
    "system": frozenset({"text"}),
}
#: Input the models cannot read: refused as unsupported (not as malformed).
_UNSUPPORTED_BLOCKS = frozenset({"image", "document", "search_result"})


@dataclass(frozen=True, slots=True)
class MessagesOptions:
    """The server's choices for this API (`realtime serve` flags)."""

    #: keep Claude Code's `x-anthropic-billing-header` system text in the prompt
    keep_billing_header: bool = False


DEFAULT_OPTIONS = MessagesOptions()


def parse_messages_request(
    data: Any, limits: InputLimits = DEFAULT_INPUT_LIMITS
) -> MessagesRequest:
    """Validate a decoded `POST /v1/messages` body; every failure is one specific 400."""
    request = _validate(MessagesRequest, data)
    assert isinstance(request, MessagesRequest)
    stops = request.stop_sequences or []
    if any(not stop for stop in stops):
        raise InvalidRequestError(
            "stop_sequences: a stop sequence must not be empty", param="stop_sequences"
        )
    check_stop_strings(stops, limits, "stop_sequences")
    return request


def parse_count_tokens_request(data: Any) -> CountTokensRequest:
    """Validate a decoded `POST /v1/messages/count_tokens` body."""
    request = _validate(CountTokensRequest, data)
    assert isinstance(request, CountTokensRequest)
    return request


def _validate(model: type[PromptRequest], data: Any) -> PromptRequest:
    return validate_body(model, data)


def messages_generation(
    request: MessagesRequest | CountTokensRequest, options: MessagesOptions = DEFAULT_OPTIONS
) -> GenerationRequest:
    """The neutral request (see the module docstring). Raises InvalidRequestError."""
    tools = _tools(request.tools)
    choice, parallel = _tool_choice(request.tool_choice, tools)
    format_, paths = _format(request)
    thinking = request.thinking
    budget: int | None = None
    max_tokens: int | None = None
    sampling, stopping = Sampling(), Stopping()
    if isinstance(request, MessagesRequest):
        max_tokens = request.max_tokens
        if thinking is not None and thinking.type == "enabled":
            budget = thinking.budget_tokens
            if budget is None:
                raise InvalidRequestError(
                    "thinking.budget_tokens: required when thinking.type is 'enabled'",
                    param="thinking.budget_tokens",
                )
            if budget >= max_tokens:
                raise InvalidRequestError(
                    f"max_tokens must be greater than thinking.budget_tokens ({budget})",
                    param="thinking.budget_tokens",
                )
        sampling = Sampling(
            temperature=request.temperature, top_p=request.top_p, top_k=request.top_k
        )
        stopping = Stopping(strings=tuple(request.stop_sequences or ()))
    return GenerationRequest(
        model=request.model,
        conversation=conversation_items(request.system, request.messages, options),
        tools=tools,
        tool_choice=choice,
        parallel_tool_calls=parallel,
        format=format_,
        thinking=None if thinking is None else thinking.type != "disabled",
        thinking_budget=budget,
        max_tokens=max_tokens,
        max_tokens_explicit=max_tokens is not None,
        max_tokens_clamp=True,
        sampling=sampling,
        stopping=stopping,
        paths=paths,
    )


def conversation_items(
    system: str | list[TextBlock] | None,
    messages: list[MessageParam],
    options: MessagesOptions = DEFAULT_OPTIONS,
) -> tuple[Item, ...]:
    """`system` and the turns as conversation items (see the module docstring)."""
    items: list[Item] = []
    parts = _system_parts(system, options)
    if parts:
        items.append(Message("system", parts))
    last = len(messages) - 1
    for index, message in enumerate(messages):
        if message.role == "assistant" and index == last:
            raise UnsupportedFeatureError(
                "a final assistant turn (prefilling the answer) is not supported; end with a"
                " user turn",
                param=f"messages.{index}",
            )
        if isinstance(message.content, str):
            items.append(Message(message.role, (message.content,)))
        else:
            items += _turn(message.role, message.content, index)
    return tuple(items)


def _system_parts(
    system: str | list[TextBlock] | None, options: MessagesOptions
) -> tuple[str, ...]:
    if system is None:
        return ()
    if isinstance(system, str):
        return (system,)
    return tuple(
        block.text
        for block in system
        if options.keep_billing_header or not block.text.startswith(BILLING_HEADER)
    )


def _turn(role: str, blocks: list[ContentBlock], index: int) -> list[Item]:
    items: list[Item] = []
    texts: list[str] = []

    def flush() -> None:
        if texts:
            items.append(Message(role, tuple(texts)))
            texts.clear()

    allowed = _ALLOWED[role]
    for position, block in enumerate(blocks):
        where = f"messages.{index}.content.{position}"
        kind = block.type
        if kind in _UNSUPPORTED_BLOCKS:
            raise UnsupportedFeatureError(
                f"{where}: this model accepts text only; {kind!r} blocks are not supported",
                param=where,
            )
        if kind not in allowed:
            raise InvalidRequestError(
                f"{where}: a {role} turn may not hold {kind!r} blocks", param=where
            )
        if isinstance(block, TextBlock):
            texts.append(block.text)
            continue
        flush()
        if isinstance(block, ThinkingBlock):
            if block.thinking:
                items.append(Reasoning(block.thinking))
        elif isinstance(block, RedactedThinkingBlock):
            pass  # opaque: nothing a local model can read
        elif isinstance(block, ToolUseBlock):
            arguments = orjson.dumps(block.input).decode()
            items.append(FunctionCall(block.id, block.name, arguments))
        elif isinstance(block, ToolResultBlock):
            items.append(FunctionCallOutput(block.tool_use_id, _result_texts(block, where)))
    flush()
    return items


def _result_texts(block: ToolResultBlock, where: str) -> tuple[str, ...]:
    content = block.content
    if content is None:
        return ("",)
    if isinstance(content, str):
        return (content,)
    texts = []
    for position, part in enumerate(content):
        if not isinstance(part, TextBlock):
            place = f"{where}.content.{position}"
            raise UnsupportedFeatureError(
                f"{place}: this model accepts text only; {part.type!r} blocks are not supported",
                param=place,
            )
        texts.append(part.text)
    return tuple(texts) or ("",)


def _tools(tools: list[dict[str, Any]] | None) -> tuple[FunctionTool, ...] | None:
    if not tools:
        return None
    for index, tool in enumerate(tools):
        kind = tool.get("type")
        if kind is not None and kind != "custom":
            raise UnsupportedFeatureError(
                f"tools.{index}.type: the hosted tool {kind!r} is not supported; send a custom"
                " tool (name, description, input_schema) that your client runs",
                param=f"tools.{index}.type",
            )
    try:
        parsed = _CustomTools.model_validate({"tools": tools}).tools
    except ValidationError as exc:
        raise validation_error_to_client(exc) from None
    return tuple(
        FunctionTool(tool.name, tool.description, tool.input_schema, tool.strict) for tool in parsed
    )


class _CustomTools(BaseModel):
    """The tools, validated where they sit, so errors name `tools.N.field`."""

    tools: list[CustomTool]


def _tool_choice(
    choice: ToolChoice | None, tools: tuple[FunctionTool, ...] | None
) -> tuple[NeutralToolChoice | None, bool | None]:
    if choice is None:
        return None, None
    parallel = False if choice.disable_parallel_tool_use else None
    if choice.type == "tool":
        if not choice.name:
            raise InvalidRequestError(
                "tool_choice.name: required when tool_choice.type is 'tool'",
                param="tool_choice.name",
            )
        if not any(tool.name == choice.name for tool in tools or ()):
            raise InvalidRequestError(
                f"tool_choice.name: no tool named {choice.name!r} in tools",
                param="tool_choice.name",
            )
        return NamedFunction(choice.name), parallel
    if choice.name is not None:
        raise InvalidRequestError(
            f"tool_choice.name: only allowed when tool_choice.type is 'tool', not {choice.type!r}",
            param="tool_choice.name",
        )
    if choice.type == "any":
        if not tools:
            raise InvalidRequestError("tool_choice: 'any' requires tools", param="tool_choice")
        return "required", parallel
    return choice.type, parallel


def _format(request: MessagesRequest | CountTokensRequest) -> tuple[JsonFormat | None, FieldPaths]:
    config = request.output_config
    spec: JsonOutputFormat | None = config.format if config is not None else None
    paths = PATHS
    if spec is None and request.output_format is not None:
        spec, paths = request.output_format, _OUTPUT_FORMAT_PATHS
    if spec is None:
        return None, paths
    return JsonFormat("json_schema", schema=spec.schema_), paths
