"""The one conversion from a conversation's items to the messages a chat template renders.

Every API builds its conversation as items (`realtime.protocol.conversation`);
this module alone turns items into template input, so the same conversation
renders the same prompt whichever API carried it, and a prefix one API cached is
found by the next. The speculative next-turn prefill renders the answer just
produced through the same function (`answer_items`), so it matches what the
client sends back.

The rules, documented in docs/protocol.md ("How a conversation becomes a prompt"):

* a message becomes a message of its role; its text parts are joined one per line
  (`PART_SEPARATOR`); a message without content has no `content` key;
* reasoning becomes `reasoning_content` of the assistant message that follows it
  (several reasoning items in a row are joined one per line); reasoning that no
  assistant turn follows before the next user or tool message is dropped;
* a function call joins the assistant message right before it as one of its
  `tool_calls` (calls in a row are one assistant turn), or opens an assistant
  message of its own; arguments are decoded from JSON for the template;
* a function's output becomes a `tool` message answering its `call_id`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from realtime.protocol.conversation import (
    FunctionCall,
    FunctionTool,
    Item,
    Message,
    Reasoning,
)
from realtime.protocol.errors import InvalidRequestError
from realtime.protocol.generation_request import GenerationRequest
from realtime.protocol.json_input import (
    DEFAULT_MAX_JSON_DEPTH,
    JsonTooDeepError,
    check_shape,
    parse_json,
)
from realtime.protocol.output import ParsedOutput

#: Between the texts of a message's content parts, and between reasoning items.
PART_SEPARATOR = "\n"


def template_messages(items: Iterable[Item]) -> list[dict[str, Any]]:
    """The template's `messages` for a conversation (see the module docstring)."""
    messages: list[dict[str, Any]] = []
    #: the assistant message function calls join, while nothing else came after it
    assistant: dict[str, Any] | None = None
    reasoning: list[str] = []
    for item in items:
        if isinstance(item, Message):
            message: dict[str, Any] = {"role": item.role}
            if item.parts is not None:
                message["content"] = PART_SEPARATOR.join(item.parts)
            if item.extras:
                message.update(item.extras)
            if item.role == "assistant":
                if reasoning:
                    message["reasoning_content"] = PART_SEPARATOR.join(reasoning)
                    reasoning = []
                assistant = message
            else:
                assistant = None
                reasoning = []
            messages.append(message)
        elif isinstance(item, Reasoning):
            assistant = None
            reasoning.append(item.text)
        elif isinstance(item, FunctionCall):
            if assistant is None:
                assistant = {"role": "assistant"}
                if reasoning:
                    assistant["reasoning_content"] = PART_SEPARATOR.join(reasoning)
                    reasoning = []
                messages.append(assistant)
            call: dict[str, Any] = {
                "id": item.call_id,
                "type": "function",
                "function": {"name": item.name, "arguments": _arguments(item.arguments)},
            }
            if item.extras:
                call.update(item.extras)
            assistant.setdefault("tool_calls", []).append(call)
        else:
            assistant = None
            reasoning = []
            output: dict[str, Any] = {
                "role": "tool",
                "tool_call_id": item.call_id,
                "content": PART_SEPARATOR.join(item.output),
            }
            if item.extras:
                output.update(item.extras)
            messages.append(output)
    return messages


def template_tools(tools: Sequence[FunctionTool] | None) -> list[dict[str, Any]] | None:
    """The template's `tools`, in the chat API's shape every template reads: a name, a
    description and the parameters. `strict` is how the server checks the arguments,
    not something the model reads, so it never changes the prompt."""
    if not tools:
        return None
    out = []
    for tool in tools:
        function: dict[str, Any] = {"name": tool.name}
        if tool.description is not None:
            function["description"] = tool.description
        if tool.parameters is not None:
            function["parameters"] = tool.parameters
        out.append({"type": "function", "function": function})
    return out


def answer_items(output: ParsedOutput) -> list[Item]:
    """A parsed answer as the items a client sends back (reasoning, text, calls)."""
    items: list[Item] = []
    if output.reasoning:
        items.append(Reasoning(output.reasoning))
    if output.content or not output.tool_calls:
        items.append(Message("assistant", (output.content,)))
    items += [FunctionCall(c.id, c.name, c.arguments) for c in output.tool_calls]
    return items


def _arguments(arguments: str) -> Any:
    """Arguments decoded for the template, which applies `| tojson` to them (Llama 3,
    Qwen), as transformers' callers pass them; text that is not JSON, or nests
    deeper than a request body may (`--max-json-depth`'s default), stays a string."""
    try:
        value = parse_json(arguments, DEFAULT_MAX_JSON_DEPTH)
        check_shape(value, DEFAULT_MAX_JSON_DEPTH)
    except (orjson.JSONDecodeError, JsonTooDeepError):
        return arguments
    return value


@dataclass(frozen=True, slots=True)
class TemplateInput:
    """What a request hands the chat template: its messages (template form), tools and
    extra variables. Kept after the prompt is rendered only when a warm-up needs it."""

    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]] | None
    kwargs: Mapping[str, Any]


#: Template variables the request itself decides; kwargs may not override them.
RESERVED_TEMPLATE_KWARGS = frozenset({"messages", "tools", "add_generation_prompt"})
#: The chat-template variable that switches a thinking model's reasoning on or off
#: (Qwen 3, and the templates that copied it), set from `GenerationRequest.thinking`.
THINKING_SWITCH = "enable_thinking"


def template_input(request: GenerationRequest) -> TemplateInput | None:
    """What the chat template gets; None when the client sent token ids instead.
    Raises InvalidRequestError (template kwargs that set a reserved variable)."""
    if request.prompt_token_ids is not None:
        return None
    kwargs = dict(request.template_kwargs or {})
    reserved = sorted(set(kwargs) & RESERVED_TEMPLATE_KWARGS)
    if reserved:
        raise InvalidRequestError(
            f"{request.paths.template_kwargs} may not set {reserved[0]!r};"
            " it comes from the request itself",
            param=request.paths.template_kwargs,
        )
    if request.thinking is not None:
        kwargs.setdefault(THINKING_SWITCH, request.thinking)
    return TemplateInput(
        template_messages(request.conversation), template_tools(request.tools), kwargs
    )
