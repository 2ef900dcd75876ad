"""Client event text -> a validated event, or an `EventError` naming the field at fault.

Every check here runs before any work: the JSON's size was bounded by the frame
limit, its depth and value count are checked next (`--max-json-depth`,
`--max-json-values`), then the event's schema, then what text mode cannot do
(audio in or out, images, MCP tools, prompts), each refused with its own code.
"""

from __future__ import annotations

import re
from typing import Any

import orjson
from pydantic import BaseModel, ValidationError

from realtime.dialects.realtime_events.errors import (
    AudioNotSupportedError,
    EventError,
    UnknownEventError,
)
from realtime.dialects.realtime_events.limits import DEFAULT_MAX_ITEM_PARTS
from realtime.dialects.realtime_events.models import (
    AUDIO_EVENTS,
    CLIENT_EVENTS,
    MAX_METADATA_KEY_CHARS,
    MAX_METADATA_PAIRS,
    MAX_METADATA_VALUE_CHARS,
    AssistantContent,
    AssistantMessageItem,
    ClientEvent,
    FunctionCallItem,
    FunctionCallOutputItem,
    FunctionTool,
    GenerationSettings,
    Item,
    ItemCreateEvent,
    ItemReference,
    ResponseCreateEvent,
    SessionUpdateEvent,
    SystemContent,
    SystemMessageItem,
    ToolChoice,
    ToolChoiceFunction,
    UserContent,
    UserMessageItem,
)
from realtime.protocol.errors import (
    InvalidRequestError,
    RealtimeError,
    UnsupportedFeatureError,
)
from realtime.protocol.input_limits import InputLimits
from realtime.protocol.json_input import check_shape, parse_json
from realtime.protocol.validation import validation_error_to_client

_MESSAGE_ROLES: dict[str, type[BaseModel]] = {
    "user": UserMessageItem,
    "system": SystemMessageItem,
    "assistant": AssistantMessageItem,
}
_ITEM_TYPES: dict[str, type[BaseModel]] = {
    "function_call": FunctionCallItem,
    "function_call_output": FunctionCallOutputItem,
}
_MCP_ITEMS = frozenset(
    {"mcp_approval_response", "mcp_list_tools", "mcp_call", "mcp_approval_request"}
)


def decode_event(
    text: str | bytes, limits: InputLimits, max_item_parts: int = DEFAULT_MAX_ITEM_PARTS
) -> ClientEvent:
    """One client event from a text frame. Raises EventError (the socket stays open).

    `max_item_parts`: content parts an item may have (counted before it is validated)."""
    try:
        data = parse_json(text, limits.max_json_depth)
    except orjson.JSONDecodeError as exc:
        raise EventError(
            InvalidRequestError(f"the event is not valid JSON: {exc}", code="invalid_json"), None
        ) from None
    except RealtimeError as exc:  # deeper than orjson's own limit
        raise EventError(exc, None) from None
    if not isinstance(data, dict):
        raise EventError(InvalidRequestError("an event must be a JSON object"), None)
    event_id = data.get("event_id")
    client_event_id = event_id if isinstance(event_id, str) and len(event_id) <= 64 else None
    try:
        check_shape(data, limits.max_json_depth, limits.max_json_values)
        return _event(data, max_item_parts)
    except RealtimeError as exc:
        raise EventError(exc, client_event_id) from None


def _event(data: dict[str, Any], max_parts: int) -> ClientEvent:
    kind = data.get("type")
    if not isinstance(kind, str):
        raise InvalidRequestError("an event needs a string 'type'", param="type")
    if kind in AUDIO_EVENTS:
        raise AudioNotSupportedError(
            f"{kind}: this server speaks the Realtime API in text mode only; "
            "send text with conversation.item.create",
            param="type",
        )
    model = CLIENT_EVENTS.get(kind)
    if model is None:
        shown = kind if len(kind) <= 64 else kind[:64] + "..."
        raise UnknownEventError(
            f"unknown event type {shown!r}; this server reads: " + ", ".join(CLIENT_EVENTS),
            param="type",
        )
    event: ClientEvent = validate(model, data, "")
    if isinstance(event, SessionUpdateEvent):
        check_generation(event.session, "session")
        session = event.session
        if session.type == "transcription":
            raise AudioNotSupportedError(
                "session.type 'transcription' needs audio; this server has text only",
                param="session.type",
            )
        for name in ("include", "tracing", "truncation"):
            if getattr(session, name) is not None:
                raise UnsupportedFeatureError(
                    f"session.{name} is not supported by this server", param=f"session.{name}"
                )
    elif isinstance(event, ItemCreateEvent):
        event._parsed = parse_item(event.item, "item", max_parts)
    elif isinstance(event, ResponseCreateEvent) and event.response is not None:
        response = event.response
        check_generation(response, "response")
        if response.conversation not in (None, "auto", "none"):
            raise UnsupportedFeatureError(
                "response.conversation must be 'auto' or 'none'", param="response.conversation"
            )
        for index, entry in enumerate(response.input or ()):
            parse_input_entry(entry, f"response.input.{index}", max_parts)
        check_metadata(response.metadata)
    return event


def validate(model: type[BaseModel], data: Any, prefix: str) -> Any:
    """`model.model_validate(data)`, its errors naming fields under `prefix`."""
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise _prefixed(validation_error_to_client(exc), prefix) from None


def _prefixed(error: InvalidRequestError, prefix: str) -> InvalidRequestError:
    """`error` with its `param` under `prefix` and without pydantic's union member names."""
    old = error.param or ""
    param = ".".join(part for part in old.split(".") if part and not _UNION_MEMBER.match(part))
    if prefix:
        param = f"{prefix}.{param}" if param else prefix
    if param == old:
        return error
    message = error.message.replace(old, param, 1) if old else f"{param}: {error.message}"
    return type(error)(message, param=param or None, code=error.code)


#: Names pydantic gives a union's members in an error's location; no client field is one.
_UNION_MEMBER = re.compile(r"^(constrained-|literal\[|function-|json-or-python|tagged-union)")


def check_generation(settings: GenerationSettings, prefix: str) -> None:
    """Text only; function tools only; nothing the server cannot do."""
    if settings.output_modalities is not None and settings.output_modalities != ["text"]:
        raise AudioNotSupportedError(
            f"{prefix}.output_modalities: this server answers in text only; send ['text']",
            param=f"{prefix}.output_modalities",
        )
    if settings.audio is not None:
        raise AudioNotSupportedError(
            f"{prefix}.audio: this server has no audio input or output",
            param=f"{prefix}.audio",
        )
    for name, value in (("prompt", settings.prompt), ("reasoning", settings.reasoning)):
        if value is not None:
            raise UnsupportedFeatureError(
                f"{prefix}.{name} is not supported by this server", param=f"{prefix}.{name}"
            )
    for index, tool in enumerate(settings.tools or ()):
        parse_tool(tool, f"{prefix}.tools.{index}")
    if isinstance(settings.tool_choice, dict):
        parse_tool_choice(settings.tool_choice, f"{prefix}.tool_choice")


def parse_tool(data: dict[str, Any], param: str) -> FunctionTool:
    if data.get("type") == "mcp":
        raise UnsupportedFeatureError(
            "MCP tools are not supported by this server; use function tools",
            param=f"{param}.type",
        )
    tool: FunctionTool = validate(FunctionTool, data, param)
    return tool


def parse_tool_choice(data: Any, param: str) -> ToolChoice:
    if not isinstance(data, dict):
        return data  # type: ignore[no-any-return]  # a string mode, checked by the schema
    if data.get("type") == "mcp":
        raise UnsupportedFeatureError(
            "MCP tools are not supported by this server", param=f"{param}.type"
        )
    choice: ToolChoiceFunction = validate(ToolChoiceFunction, data, param)
    return choice


def parse_item(data: dict[str, Any], param: str, max_parts: int) -> Item:
    """A conversation item the client sent, in text mode, with at most `max_parts`
    content parts (counted first: validating each would be the work the limit bounds)."""
    content = data.get("content")
    if isinstance(content, list) and len(content) > max_parts:
        raise InvalidRequestError(
            f"{param}.content has {len(content)} parts; an item may have at most {max_parts}"
            " (this server's --realtime-max-item-parts)",
            param=f"{param}.content",
            code="too_many_content_parts",
        )
    kind = data.get("type")
    if kind == "message":
        role = data.get("role")
        model = _MESSAGE_ROLES.get(role) if isinstance(role, str) else None
        if model is None:
            raise InvalidRequestError(
                f"{param}.role must be 'user', 'system' or 'assistant'", param=f"{param}.role"
            )
    elif isinstance(kind, str) and kind in _MCP_ITEMS:
        raise UnsupportedFeatureError(
            f"{param}.type {kind!r}: MCP is not supported by this server", param=f"{param}.type"
        )
    else:
        found = _ITEM_TYPES.get(kind) if isinstance(kind, str) else None
        if found is None:
            raise InvalidRequestError(
                f"{param}.type must be 'message', 'function_call' or 'function_call_output'",
                param=f"{param}.type",
            )
        model = found
    item: Item = validate(model, data, param)
    if isinstance(item, UserMessageItem | SystemMessageItem | AssistantMessageItem):
        _check_text_parts(item, param)
    return item


def _check_text_parts(
    item: UserMessageItem | SystemMessageItem | AssistantMessageItem, param: str
) -> None:
    parts: list[UserContent | SystemContent | AssistantContent] = list(item.content)
    for index, part in enumerate(parts):
        where = f"{param}.content.{index}"
        kind = part.type
        if kind in ("input_audio", "output_audio") or getattr(part, "audio", None) is not None:
            raise AudioNotSupportedError(
                f"{where}: audio content is not supported; this server has text only",
                param=f"{where}.type",
            )
        if kind == "input_image" or getattr(part, "image_url", None) is not None:
            raise UnsupportedFeatureError(
                f"{where}: image content is not supported by this server", param=f"{where}.type"
            )
        if part.text is None:
            raise InvalidRequestError(f"{where}.text is required", param=f"{where}.text")


def parse_input_entry(data: dict[str, Any], param: str, max_parts: int) -> Item | ItemReference:
    """One entry of `response.create`'s `input`: an item, or a reference to one."""
    if data.get("type") == "item_reference":
        reference: ItemReference = validate(ItemReference, data, param)
        return reference
    return parse_item(data, param, max_parts)


def check_metadata(metadata: dict[str, str] | None) -> None:
    if metadata is None:
        return
    if len(metadata) > MAX_METADATA_PAIRS:
        raise InvalidRequestError(
            f"response.metadata: at most {MAX_METADATA_PAIRS} pairs", param="response.metadata"
        )
    for key, value in metadata.items():
        if len(key) > MAX_METADATA_KEY_CHARS or len(value) > MAX_METADATA_VALUE_CHARS:
            raise InvalidRequestError(
                f"response.metadata: keys may have {MAX_METADATA_KEY_CHARS} characters and "
                f"values {MAX_METADATA_VALUE_CHARS}",
                param="response.metadata",
            )
