"""The chat request a response runs as: the conversation's items and the settings, in chat form.

The pipeline knows chat requests; a Realtime response is one. Instructions become
the system message at the top; message items their role's message; function
calls the `tool_calls` of an assistant message (calls in a row, and the text the
model wrote just before them, make one message, as the chat template expects);
function call outputs `tool` messages. Items the model is still writing are left
out.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from realtime.dialects.realtime_events.session_config import GenerationConfig
from realtime.protocol.errors import InvalidRequestError, RealtimeError
from realtime.protocol.input_limits import InputLimits
from realtime.protocol.request import ChatCompletionRequest, parse_chat_request


def chat_messages(items: Iterable[dict[str, Any]], instructions: str) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = []
    if instructions:
        messages.append({"role": "system", "content": instructions})
    for item in items:
        if item.get("status") == "in_progress":
            continue
        kind = item["type"]
        if kind == "message":
            texts = [part.get("text") or "" for part in item["content"]]
            if item["role"] == "assistant":
                messages.append({"role": "assistant", "content": "".join(texts)})
            else:
                parts = [{"type": "text", "text": text} for text in texts]
                messages.append({"role": item["role"], "content": parts})
        elif kind == "function_call":
            call = {
                "id": item["call_id"],
                "type": "function",
                "function": {"name": item["name"], "arguments": item["arguments"]},
            }
            last = messages[-1] if messages else None
            if last is not None and last["role"] == "assistant":
                last.setdefault("tool_calls", []).append(call)
                if not last.get("content"):
                    last["content"] = None
            else:
                messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
        else:
            messages.append(
                {"role": "tool", "tool_call_id": item["call_id"], "content": item["output"]}
            )
    return messages


def chat_request(
    items: Iterable[dict[str, Any]], config: GenerationConfig, limits: InputLimits
) -> ChatCompletionRequest:
    """Raises RealtimeError (an empty conversation, no model, a bad combination)."""
    messages = chat_messages(items, config.instructions)
    if not messages:
        raise InvalidRequestError(
            "nothing to answer: the conversation is empty and there are no instructions; "
            "add an item with conversation.item.create",
            code="empty_conversation",
        )
    if config.model is None:
        raise InvalidRequestError(
            "the session has no model; set one with session.update", param="session.model"
        )
    body: dict[str, Any] = {
        "model": config.model,
        "messages": messages,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    if config.tools:
        body["tools"] = [
            {"type": "function", "function": tool.model_dump(exclude_none=True, exclude={"type"})}
            for tool in config.tools
        ]
    choice = config.tool_choice
    if isinstance(choice, str):
        if choice != "auto" and (config.tools or choice == "required"):
            body["tool_choice"] = choice
    else:
        body["tool_choice"] = {"type": "function", "function": {"name": choice.name}}
    if isinstance(config.max_output_tokens, int):
        body["max_tokens"] = config.max_output_tokens
    if config.temperature is not None:
        body["temperature"] = config.temperature
    if config.parallel_tool_calls is not None:
        body["parallel_tool_calls"] = config.parallel_tool_calls
    try:
        return parse_chat_request(body, limits)
    except RealtimeError as exc:
        # The body is ours; a refusal of it is about the conversation or settings.
        raise InvalidRequestError(f"the conversation cannot be answered: {exc.message}") from None
