"""A Realtime response as the neutral `GenerationRequest`: the conversation and the settings.

Instructions become a first system message; message items their role's message,
with their text parts; function calls and their outputs the neutral function
call and output items. The one conversion every API shares
(`realtime.chat.conversation`) renders them: calls in a row, and the text the model
wrote just before them, make one assistant turn, and a message's parts are joined
one per line, as for every API. Items the model is still writing are left out.

Errors name the session's own fields (`session.model`, `response.max_output_tokens`).
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from typing import Any

from realtime.dialects.realtime_events.models import ToolChoiceFunction
from realtime.dialects.realtime_events.session_config import GenerationConfig
from realtime.protocol.conversation import (
    FunctionCall,
    FunctionCallOutput,
    FunctionTool,
    Item,
    Message,
    NamedFunction,
    ToolChoice,
)
from realtime.protocol.errors import InvalidRequestError
from realtime.protocol.generation_request import FieldPaths, GenerationRequest, Sampling


def realtime_conversation(items: Iterable[dict[str, Any]], instructions: str) -> tuple[Item, ...]:
    """The conversation's items (and the instructions) as conversation items."""
    out: list[Item] = []
    if instructions:
        out.append(Message("system", (instructions,)))
    for item in items:
        if item.get("status") == "in_progress":
            continue
        kind = item["type"]
        if kind == "message":
            texts = tuple(part.get("text") or "" for part in item["content"])
            out.append(Message(item["role"], texts))
        elif kind == "function_call":
            out.append(FunctionCall(item["call_id"], item["name"], item["arguments"]))
        elif kind == "function_call_output":
            out.append(FunctionCallOutput(item["call_id"], (item["output"],)))
    return tuple(out)


def realtime_generation(
    items: Iterable[dict[str, Any]],
    config: GenerationConfig,
    *,
    overrides: Collection[str] = (),
) -> GenerationRequest:
    """The neutral request a response runs as. `overrides`: the settings its
    `response.create` set (errors name `response.<field>` for those, `session.<field>`
    for the rest). Raises InvalidRequestError (an empty conversation, no model)."""
    conversation = realtime_conversation(items, config.instructions)
    if not conversation:
        raise InvalidRequestError(
            "nothing to answer: the conversation is empty and there are no instructions; "
            "add an item with conversation.item.create",
            code="empty_conversation",
        )
    if config.model is None:
        raise InvalidRequestError(
            "the session has no model; set one with session.update", param="session.model"
        )
    limit = config.max_output_tokens if isinstance(config.max_output_tokens, int) else None
    tools = tuple(
        FunctionTool(tool.name, tool.description, tool.parameters) for tool in config.tools
    )
    return GenerationRequest(
        model=config.model,
        conversation=conversation,
        tools=tools or None,
        tool_choice=_tool_choice(config),
        parallel_tool_calls=config.parallel_tool_calls,
        max_tokens=limit,
        max_tokens_explicit=limit is not None,
        sampling=Sampling(temperature=config.temperature),
        paths=FieldPaths(
            model="session.model",
            input="item",
            max_tokens=_path("max_output_tokens", overrides),
            tools=_path("tools", overrides),
            tool_choice=_path("tool_choice", overrides),
        ),
    )


def _path(name: str, overrides: Collection[str]) -> str:
    return f"response.{name}" if name in overrides else f"session.{name}"


def _tool_choice(config: GenerationConfig) -> ToolChoice | None:
    """`auto` is the pipeline's default; `none` and `required` are passed on where they
    mean something (`required` always: without tools it is refused)."""
    choice = config.tool_choice
    if isinstance(choice, ToolChoiceFunction):
        return NamedFunction(choice.name)
    if choice == "auto" or (choice == "none" and not config.tools):
        return None
    return choice
