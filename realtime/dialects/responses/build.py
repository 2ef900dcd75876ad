"""A Responses request as the neutral `GenerationRequest`: items in, no chat JSON between.

The conversation is the stored history along `previous_response_id` (each earlier
response's input items, then its output items, oldest first) and then the new input,
after `instructions` as a first system message (instructions are never carried over
from an earlier response, as OpenAI documents). Items become the neutral
conversation items one for one: a `message` its role's message with its text parts,
`reasoning` a reasoning item, `function_call` a function call, `custom_tool_call` a
call of the function a custom tool is offered as (its input as the one argument,
`input`) and either output a function's output; the one conversion every API shares
(`realtime.chat.conversation`) then renders them, so a continuation renders the same
prompt the chat API would for the same conversation, and the engine's prefix cache
finds the earlier turn.

A `compaction` item (`compaction.py`) stands for everything before it: the items
before the last one are dropped, except `system` and `developer` messages, and the
item itself becomes a user message with its summary (`SUMMARY_PREFIX`) followed by
the items it kept verbatim.

Every field keeps the client's own name for errors (`RESPONSES_PATHS`):
`max_output_tokens`, `text.format`, `input`.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import orjson

from realtime.dialects.responses import compaction_item
from realtime.dialects.responses.items import item_text
from realtime.dialects.responses.reasoning_seal import ReasoningSeal
from realtime.dialects.responses.request import ReasoningConfig, ResponsesRequest, TextConfig
from realtime.dialects.responses.tools import CUSTOM_INPUT
from realtime.protocol.conversation import (
    FunctionCall,
    FunctionCallOutput,
    FunctionTool,
    Item,
    Message,
    NamedFunction,
    Reasoning,
    ToolChoice,
)
from realtime.protocol.errors import InvalidRequestError
from realtime.protocol.generation_request import (
    FieldPaths,
    GenerationRequest,
    JsonFormat,
    Sampling,
)

#: What a compaction item's summary is introduced with in the prompt.
SUMMARY_PREFIX = "A summary of the conversation so far:\n"
_KEPT_ROLES = ("system", "developer")

RESPONSES_PATHS = FieldPaths(input="input", max_tokens="max_output_tokens", format="text.format")


def responses_conversation(
    items: Iterable[dict[str, Any]],
    instructions: str | None,
    *,
    seal: ReasoningSeal | None = None,
    first_input: int = 0,
) -> tuple[Item, ...]:
    """Responses items (normal form, `items.py`) as conversation items. With `seal`, a
    reasoning item with only `encrypted_content` is opened (errors name
    `input.N.encrypted_content`, N counted from the item at `first_input`)."""
    out: list[Item] = []
    if instructions:
        out.append(Message("system", (instructions,)))
    listed = list(items)
    last = _last_compaction(listed)
    for index, item in enumerate(listed):
        kind = item["type"]
        if index < last and not (kind == "message" and item["role"] in _KEPT_ROLES):
            continue  # in the compaction's summary
        if kind == "compaction":
            summary, kept = compaction_item.decode(item["encrypted_content"])
            out.append(Message("user", (SUMMARY_PREFIX + summary,)))
            out += responses_conversation(kept, None, seal=seal, first_input=len(kept))
        elif kind == "message":
            out.append(Message(item["role"], tuple(item_text(item["content"]))))
        elif kind == "reasoning":
            where = (
                f"input.{index - first_input}.encrypted_content"
                if index >= first_input
                else "previous_response_id"
            )
            out.append(Reasoning(_reasoning_text(item, seal, where)))
        elif kind == "function_call":
            out.append(FunctionCall(item["call_id"], item["name"], item["arguments"]))
        elif kind == "custom_tool_call":
            arguments = orjson.dumps({CUSTOM_INPUT: item["input"]}).decode()
            out.append(FunctionCall(item["call_id"], item["name"], arguments))
        elif kind in ("function_call_output", "custom_tool_call_output"):
            output = item["output"]
            texts = (output,) if isinstance(output, str) else tuple(item_text(output))
            out.append(FunctionCallOutput(item["call_id"], texts))
    return tuple(out)


def compacted(items: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """The items a prompt renders: from the last compaction item on, after the system
    and developer messages before it (everything else before it is in its summary)."""
    listed = list(items)
    last = _last_compaction(listed)
    if last < 0:
        return listed
    kept = [
        item for item in listed[:last] if item["type"] == "message" and item["role"] in _KEPT_ROLES
    ]
    return kept + listed[last:]


def _last_compaction(items: list[dict[str, Any]]) -> int:
    return max((i for i, item in enumerate(items) if item["type"] == "compaction"), default=-1)


def responses_generation(
    request: ResponsesRequest,
    history: list[dict[str, Any]],
    *,
    generate: bool = True,
    warm_next_turn: bool = False,
    seal: ReasoningSeal | None = None,
) -> GenerationRequest:
    """The neutral request that generates the response. `generate` False: the socket's
    warm-up (`generate: false`): one token is the least the engine computes; it is
    dropped, and nothing that could fail on an answer (a required tool call) applies."""
    conversation = responses_conversation(
        [*history, *request.items], request.instructions, seal=seal, first_input=len(history)
    )
    if not conversation:
        raise InvalidRequestError(
            "input is empty: send input items (or continue a response that has some)",
            param="input",
        )
    limit = 1 if not generate else request.max_output_tokens
    return GenerationRequest(
        model=request.model,
        conversation=conversation,
        tools=_tools(request.function_tools.chat),
        tool_choice="none" if not generate else _tool_choice(request.chat_tool_choice),
        parallel_tool_calls=request.parallel_tool_calls,
        format=_format(request.text),
        thinking=thinking_of(request.reasoning),
        max_tokens=limit,
        max_tokens_explicit=limit is not None,
        sampling=Sampling(temperature=request.temperature, top_p=request.top_p),
        logprobs=(request.top_logprobs or 0) if generate and request.wants_logprobs else None,
        speculative_prefill=generate and (warm_next_turn or request.warms_next_turn),
        warm_up=not generate,
        paths=RESPONSES_PATHS,
    )


#: `reasoning.effort` values that turn the model's thinking off; any other turns it on.
EFFORTS_WITHOUT_THINKING = frozenset({"none", "minimal"})


def thinking_of(reasoning: ReasoningConfig | None) -> bool | None:
    """`reasoning.effort` as the template's thinking switch (`GenerationRequest.thinking`):
    `none` / `minimal` off, any other effort on; without one, the template's default.
    A template without the switch ignores it. `reasoning.summary` changes nothing: the
    reasoning item carries the model's reasoning as it is."""
    effort = reasoning.effort if reasoning is not None else None
    if effort is None:
        return None
    return effort not in EFFORTS_WITHOUT_THINKING


def _reasoning_text(item: dict[str, Any], seal: ReasoningSeal | None, where: str) -> str:
    """A reasoning item's text: its content, else its `encrypted_content` opened, else
    its summary's parts one per line."""
    content = item.get("content")
    if content:
        return "".join(part["text"] for part in content)
    sealed = item.get("encrypted_content")
    if sealed is not None and seal is not None:
        return seal.open(sealed, where)
    return "\n".join(part["text"] for part in item.get("summary") or ())


def _tools(chat_tools: list[dict[str, Any]] | None) -> tuple[FunctionTool, ...] | None:
    if not chat_tools:
        return None
    tools = []
    for tool in chat_tools:
        function = tool["function"]
        tools.append(
            FunctionTool(
                function["name"],
                function.get("description"),
                function.get("parameters"),
                function.get("strict"),
            )
        )
    return tuple(tools)


def _tool_choice(choice: Any) -> ToolChoice | None:
    """`parse_tool_choice`'s result: a mode, or `{"function": {"name": ...}}`."""
    if choice in (None, "auto", "none", "required"):
        return choice  # type: ignore[no-any-return]
    return NamedFunction(choice["function"]["name"])


def _format(text: TextConfig | None) -> JsonFormat | None:
    """`text.format` (flat: `{"type": "json_schema", "name", "schema", ...}`)."""
    fmt = text.format if text is not None else None
    if fmt is None or fmt.type == "text":
        return None
    if fmt.type == "json_object":
        return JsonFormat()
    return JsonFormat(
        "json_schema",
        schema=fmt.schema_,
        name=fmt.name,
        description=fmt.description,
        strict=fmt.strict,
    )
