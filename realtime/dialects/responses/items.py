"""Input items: validated one at a time, then kept in one normal form.

A Responses `input` is a string or a list of items. The SDK knows some thirty item
types; this server runs the ones a text model can: messages (system, developer,
user, assistant), `function_call`, `function_call_output`, `custom_tool_call`,
`custom_tool_call_output`, `reasoning`, and `compaction` (a summary this server
made, `compaction_item.py`). The others (hosted tools' calls, images, files, item
references...) are refused with a 400 naming the item, since a model that never
saw them would answer as if they were not there.

Each item's `type` picks its model (a message may leave `type` out), and each
model is strict as the chat request is: an unknown field is a 400
`unknown_field` naming it (`input.2.contents`), a wrong type a 400
`invalid_type`. Fields the SDK defines but that change nothing here (`status`,
`phase`, `caller`, `namespace`...) are accepted.

The normal form is what the store keeps and `GET /v1/responses/{id}/input_items`
returns: every item with an id (the client's, or a new random one), string
content as one text part, and a status. Ids are unique within a response: an
input that gives one id to two items is refused (400 `duplicate_item_id`,
naming the second), and the server's own ids are 128 random bits.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from realtime.dialects.responses import compaction_item, ids
from realtime.dialects.responses.validation import client_error, invalid_type
from realtime.protocol.errors import InvalidRequestError, UnsupportedFeatureError

Status = Literal["in_progress", "completed", "incomplete"]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, populate_by_name=True)


# --- content parts ---


class PromptCacheBreakpoint(_Strict):
    mode: Literal["explicit"]
    ttl: Literal["30m", "12h"] | None = None


class InputText(_Strict):
    type: Literal["input_text"]
    text: str
    #: OpenAI's explicit cache breakpoint; the engines here cache every prefix anyway.
    prompt_cache_breakpoint: PromptCacheBreakpoint | None = None


class OutputText(_Strict):
    type: Literal["output_text"]
    text: str
    annotations: list[dict[str, Any]] | None = None
    logprobs: list[dict[str, Any]] | None = None


class Refusal(_Strict):
    type: Literal["refusal"]
    refusal: str


_PART_MODELS: dict[str, type[_Strict]] = {
    "input_text": InputText,
    "output_text": OutputText,
    "refusal": Refusal,
}
#: Parts the SDK defines that a text-only model cannot take.
_UNSUPPORTED_PARTS = frozenset({"input_image", "input_file", "input_audio"})


# --- items ---


class MessageItem(_Strict):
    type: Literal["message"] = "message"
    role: Literal["user", "assistant", "system", "developer"]
    content: str | list[dict[str, Any]]
    id: str | None = None
    status: Status | None = None
    phase: Literal["commentary", "final_answer"] | None = None


class FunctionCallItem(_Strict):
    type: Literal["function_call"]
    call_id: str
    name: str
    arguments: str
    id: str | None = None
    status: Status | None = None
    namespace: str | None = None
    caller: dict[str, Any] | None = None
    async_: bool | None = Field(default=None, alias="async")


class FunctionCallOutputItem(_Strict):
    type: Literal["function_call_output"]
    call_id: str
    output: str | list[dict[str, Any]]
    id: str | None = None
    status: Status | None = None
    name: str | None = None
    namespace: str | None = None
    caller: dict[str, Any] | None = None


class CustomToolCallItem(_Strict):
    type: Literal["custom_tool_call"]
    call_id: str
    name: str
    input: str
    id: str | None = None
    namespace: str | None = None
    caller: dict[str, Any] | None = None
    async_: bool | None = Field(default=None, alias="async")


class CustomToolCallOutputItem(_Strict):
    type: Literal["custom_tool_call_output"]
    call_id: str
    output: str | list[dict[str, Any]]
    id: str | None = None
    caller: dict[str, Any] | None = None


class SummaryText(_Strict):
    type: Literal["summary_text"]
    text: str


class ReasoningText(_Strict):
    type: Literal["reasoning_text"]
    text: str


class ReasoningItem(_Strict):
    type: Literal["reasoning"]
    summary: list[SummaryText]
    id: str | None = None
    content: list[ReasoningText] | None = None
    encrypted_content: str | None = None
    status: Status | None = None


class CompactionItem(_Strict):
    type: Literal["compaction"]
    encrypted_content: str
    id: str | None = None
    created_by: str | None = None


_ITEM_MODELS: dict[str, type[_Strict]] = {
    "compaction": CompactionItem,
    "message": MessageItem,
    "function_call": FunctionCallItem,
    "function_call_output": FunctionCallOutputItem,
    "custom_tool_call": CustomToolCallItem,
    "custom_tool_call_output": CustomToolCallOutputItem,
    "reasoning": ReasoningItem,
}

#: Item types the SDK defines that this server does not run (refused by name).
UNSUPPORTED_ITEMS = frozenset(
    {
        "item_reference",
        "file_search_call",
        "computer_call",
        "computer_call_output",
        "web_search_call",
        "tool_search_call",
        "tool_search_output",
        "additional_tools",
        "configuration_update",
        "compaction_trigger",
        "image_generation_call",
        "code_interpreter_call",
        "local_shell_call",
        "local_shell_call_output",
        "shell_call",
        "shell_call_output",
        "apply_patch_call",
        "apply_patch_call_output",
        "mcp_list_tools",
        "mcp_approval_request",
        "mcp_approval_response",
        "mcp_call",
        "program",
        "program_output",
    }
)


def normalize_input(raw: str | list[Any] | None, field: str = "input") -> list[dict[str, Any]]:
    """The request's `input` (or another list of input items, `field`: a conversation's
    `items`) as items in normal form. Raises a 400 naming the bad field."""
    if raw is None:
        return []
    if isinstance(raw, str):
        return [_message("user", [{"type": "input_text", "text": raw}], None, None)]
    items = [_normalize_item(item, f"{field}.{index}") for index, item in enumerate(raw)]
    _check_unique_ids(items, field)
    return items


def _check_unique_ids(items: list[dict[str, Any]], field: str = "input") -> None:
    """Ids are unique within a response: an id given twice is a 400 naming the second.

    (An item is found by its id: `input_items`' `after` cursor, a client's own
    bookkeeping. Renaming the second copy would hand back an id the client never
    sent; keeping both would make `after` ambiguous.)"""
    seen: set[str] = set()
    for index, item in enumerate(items):
        item_id = item["id"]
        if item_id in seen:
            raise InvalidRequestError(
                f"Duplicate item id {item_id!r} in {field}: {field}.{index}.id repeats an"
                " earlier item's id; item ids must be unique within a response",
                param=f"{field}.{index}.id",
                code="duplicate_item_id",
            )
        seen.add(item_id)


def _normalize_item(item: Any, where: str) -> dict[str, Any]:
    if not isinstance(item, dict):
        raise invalid_type(where, ["an object"], item)
    kind = item.get("type", "message")
    model = _ITEM_MODELS.get(kind) if isinstance(kind, str) else None
    if model is None:
        raise _unknown_type(kind, where, UNSUPPORTED_ITEMS, "input item")
    try:
        parsed = model.model_validate(item)
    except ValidationError as exc:
        raise client_error(exc, where) from None
    if isinstance(parsed, MessageItem):
        return _normalize_message(parsed, where)
    if isinstance(parsed, CompactionItem):
        return _normalize_compaction(parsed, where)
    if isinstance(parsed, FunctionCallItem):
        call: dict[str, Any] = {
            "id": parsed.id or ids.function_call_id(),
            "type": "function_call",
            "call_id": parsed.call_id,
            "name": parsed.name,
            "arguments": parsed.arguments,
            "status": parsed.status or "completed",
        }
        if parsed.namespace is not None:
            call["namespace"] = parsed.namespace
        return call
    if isinstance(parsed, FunctionCallOutputItem):
        output: str | list[dict[str, Any]] = parsed.output
        if isinstance(output, list):
            output = _parts(output, f"{where}.output", allowed=("input_text",))
        return {
            "id": parsed.id or ids.function_call_output_id(),
            "type": "function_call_output",
            "call_id": parsed.call_id,
            "output": output,
            "status": parsed.status or "completed",
        }
    if isinstance(parsed, CustomToolCallItem):
        custom: dict[str, Any] = {
            "id": parsed.id or ids.custom_tool_call_id(),
            "type": "custom_tool_call",
            "call_id": parsed.call_id,
            "name": parsed.name,
            "input": parsed.input,
        }
        if parsed.namespace is not None:
            custom["namespace"] = parsed.namespace
        return custom
    if isinstance(parsed, CustomToolCallOutputItem):
        result: str | list[dict[str, Any]] = parsed.output
        if isinstance(result, list):
            result = _parts(result, f"{where}.output", allowed=("input_text",))
        return {
            "id": parsed.id or ids.custom_tool_call_output_id(),
            "type": "custom_tool_call_output",
            "call_id": parsed.call_id,
            "output": result,
        }
    assert isinstance(parsed, ReasoningItem)
    reasoning: dict[str, Any] = {
        "id": parsed.id or ids.reasoning_id(),
        "type": "reasoning",
        "summary": [part.model_dump() for part in parsed.summary],
    }
    if parsed.content is not None:
        reasoning["content"] = [part.model_dump() for part in parsed.content]
    if parsed.encrypted_content is not None:
        reasoning["encrypted_content"] = parsed.encrypted_content
    reasoning["status"] = parsed.status or "completed"
    return reasoning


def _normalize_compaction(item: CompactionItem, where: str) -> dict[str, Any]:
    """Its content is checked here (and its kept items validated as input items), so a
    bad one is a 400 naming it, never a surprise while the prompt is built."""
    at = f"{where}.encrypted_content"
    try:
        _, kept = compaction_item.decode(item.encrypted_content)
    except compaction_item.CompactionContentError as exc:
        raise InvalidRequestError(
            f"Invalid value for '{at}': not a compaction item of this server: {exc}",
            param=at,
            code="invalid_value",
        ) from None
    for index, kept_item in enumerate(kept):
        if isinstance(kept_item, dict) and kept_item.get("type") == "compaction":
            raise InvalidRequestError(
                f"Invalid value for '{at}': a compaction keeps no compaction items",
                param=at,
                code="invalid_value",
            )
        _normalize_item(kept_item, f"{at}.kept.{index}")
    return {
        "id": item.id or ids.new_id("cmp"),
        "type": "compaction",
        "encrypted_content": item.encrypted_content,
    }


def _normalize_message(message: MessageItem, where: str) -> dict[str, Any]:
    assistant = message.role == "assistant"
    if isinstance(message.content, str):
        part: dict[str, Any] = (
            {"type": "output_text", "text": message.content, "annotations": []}
            if assistant
            else {"type": "input_text", "text": message.content}
        )
        parts = [part]
    else:
        parts = _parts(message.content, f"{where}.content")
    return _message(message.role, parts, message.id, message.phase, message.status)


def _message(
    role: str,
    parts: list[dict[str, Any]],
    item_id: str | None,
    phase: str | None,
    status: str | None = None,
) -> dict[str, Any]:
    message: dict[str, Any] = {
        "id": item_id or ids.message_id(),
        "type": "message",
        "role": role,
        "content": parts,
        "status": status or "completed",
    }
    if phase is not None:
        message["phase"] = phase
    return message


def _parts(
    parts: list[dict[str, Any]], where: str, allowed: tuple[str, ...] = tuple(_PART_MODELS)
) -> list[dict[str, Any]]:
    out = []
    for index, part in enumerate(parts):
        at = f"{where}.{index}"
        if not isinstance(part, dict):
            raise invalid_type(at, ["an object"], part)
        kind = part.get("type")
        model = _PART_MODELS.get(kind) if isinstance(kind, str) and kind in allowed else None
        if model is None:
            raise _unknown_type(kind, at, _UNSUPPORTED_PARTS, "content part")
        try:
            parsed = model.model_validate(part)
        except ValidationError as exc:
            raise client_error(exc, at) from None
        if isinstance(parsed, OutputText):
            out.append(
                {
                    "type": "output_text",
                    "text": parsed.text,
                    "annotations": parsed.annotations or [],
                    **({"logprobs": parsed.logprobs} if parsed.logprobs is not None else {}),
                }
            )
        else:
            out.append(parsed.model_dump(exclude_none=True))
    return out


def _unknown_type(kind: Any, where: str, unsupported: frozenset[str], what: str) -> Exception:
    if not isinstance(kind, str):
        return invalid_type(f"{where}.type", ["a string"], kind)
    if kind in unsupported:
        return UnsupportedFeatureError(
            f"{where}: {what} type {kind!r} is not supported by this server (it serves a"
            " text model with function tools)",
            param=f"{where}.type",
        )
    return InvalidRequestError(
        f"Invalid value for '{where}.type': unknown {what} type {kind!r}.",
        param=f"{where}.type",
        code="invalid_value",
    )


def item_text(parts: list[dict[str, Any]] | str) -> list[str]:
    """The texts of content parts (a refusal counts as text), in order."""
    if isinstance(parts, str):
        return [parts]
    texts = []
    for part in parts:
        text = part.get("refusal") if part.get("type") == "refusal" else part.get("text")
        if isinstance(text, str):
            texts.append(text)
    return texts
