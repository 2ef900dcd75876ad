"""Messages the way chat templates expect them, including an answer being sent back.

Two places turn OpenAI messages into template input: the prompt of every request,
and the speculative next-turn prefill, which must render the assistant turn just
produced exactly as the client will send it back. Both use these functions, so the
two renderings cannot drift apart.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson

from realtime.chat.tools.events import ParsedOutput
from realtime.protocol.json_input import (
    DEFAULT_MAX_JSON_DEPTH,
    JsonTooDeepError,
    check_shape,
    parse_json,
)

#: Between the texts of a message's content parts (see `joined_parts`).
PART_SEPARATOR = "\n"


def template_message(message: dict[str, Any]) -> dict[str, Any]:
    """A wire message as chat templates get it: content parts joined, arguments decoded.

    Content given as an array of parts becomes one string (`joined_parts`), so the
    prompt does not depend on whether a template happens to handle part arrays.
    The OpenAI wire format carries tool-call `arguments` as a JSON string; templates
    get them as objects, as transformers' callers do, because real templates
    (Llama 3, Qwen) apply `| tojson` to them and would otherwise double-encode.
    Arguments that are not valid JSON, or nest deeper than the request body may
    (`--max-json-depth`'s default), stay the string they were sent as.
    """
    content = message.get("content")
    if isinstance(content, list):
        message = {**message, "content": joined_parts(content)}
    calls = message.get("tool_calls")
    if not calls:
        return message
    parsed = []
    for call in calls:
        function = call.get("function") or {}
        arguments = function.get("arguments")
        if isinstance(arguments, str):
            decoded = _decoded_arguments(arguments)
            if decoded is not None:
                function = {**function, "arguments": decoded}
        parsed.append({**call, "function": function})
    return {**message, "tool_calls": parsed}


def joined_parts(parts: list[Any]) -> str:
    """The text of content parts, one part per line.

    vLLM and llama.cpp join text parts with a newline for templates that take
    string content; TGI joins them with nothing, which runs `"part a"` and
    `"part b"` together as `"part apart b"`. A refusal part counts as text (as
    in vLLM); other parts never get here (`prepare` refuses them).
    """
    texts = []
    for part in parts:
        if isinstance(part, dict):
            text = part.get("text") if part.get("type") == "text" else part.get("refusal")
            if isinstance(text, str):
                texts.append(text)
    return PART_SEPARATOR.join(texts)


def _decoded_arguments(arguments: str) -> Any:
    """The decoded arguments, or None to keep the string (not JSON, or too deep)."""
    try:
        value = parse_json(arguments, DEFAULT_MAX_JSON_DEPTH)
        check_shape(value, DEFAULT_MAX_JSON_DEPTH)
    except (orjson.JSONDecodeError, JsonTooDeepError):
        return None
    return value


def assistant_message(output: ParsedOutput) -> dict[str, Any]:
    """The answer as the client received it (and will send it back), in wire form.

    Mirrors the non-streaming `message`: `content` is null when the answer is only
    tool calls, reasoning travels as `reasoning_content`, arguments as JSON text.
    """
    message: dict[str, Any] = {
        "role": "assistant",
        "content": output.content if output.content or not output.tool_calls else None,
    }
    if output.reasoning:
        message["reasoning_content"] = output.reasoning
    if output.tool_calls:
        message["tool_calls"] = [
            {
                "id": call.id,
                "type": "function",
                "function": {"name": call.name, "arguments": call.arguments},
            }
            for call in output.tool_calls
        ]
    return message


@dataclass(frozen=True, slots=True)
class TemplateInput:
    """What a request hands the chat template: its messages (template form), tools and
    extra variables. Kept after the prompt is rendered only when a warm-up needs it."""

    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]] | None
    kwargs: dict[str, Any]
