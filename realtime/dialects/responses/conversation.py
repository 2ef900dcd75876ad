"""Responses items -> chat messages: the conversation the chat template renders.

One function builds every prompt the Responses API sends to the model: a new
request's input, and a continuation's whole conversation rebuilt from stored
responses (`previous_response_id`: each earlier response's input items, then its
output items, oldest first, then the new input). Output items become the
assistant message exactly as `chat.conversation.assistant_message` writes the
answer a chat client sends back, so a continuation renders the same prompt as
the chat API would for the same conversation, and the engine's prefix cache
(and a speculative warm-up) finds the earlier turn's tokens.

Mapping:
* `instructions` -> a first `system` message (instructions are never carried over
  from an earlier response, as OpenAI documents);
* a `message` -> a message of its role; text parts stay parts (the chat layer
  joins them one per line);
* `reasoning` -> `reasoning_content` of the next assistant message;
* `function_call` -> a tool call of the assistant message before it, or of a
  new one (consecutive calls are one assistant turn with several calls);
* `function_call_output` -> a `tool` message answering `call_id`.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from realtime.dialects.responses.items import item_text


def chat_messages(
    items: Iterable[dict[str, Any]], instructions: str | None
) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = []
    if instructions:
        messages.append({"role": "system", "content": instructions})
    #: the assistant turn function calls join, while nothing else came after it
    assistant: dict[str, Any] | None = None
    reasoning: list[str] = []
    for item in items:
        kind = item["type"]
        if kind == "message":
            if item["role"] == "assistant":
                assistant = _assistant("\n".join(item_text(item["content"])), reasoning)
                messages.append(assistant)
                reasoning = []
            else:
                assistant = None
                messages.append({"role": item["role"], "content": _content(item["content"])})
        elif kind == "reasoning":
            assistant = None
            reasoning.append(_reasoning_text(item))
        elif kind == "function_call":
            if assistant is None:
                assistant = _assistant("", reasoning)
                messages.append(assistant)
                reasoning = []
            if not assistant["content"]:
                assistant["content"] = None  # only tool calls: content is null, as OpenAI's
            assistant.setdefault("tool_calls", []).append(
                {
                    "id": item["call_id"],
                    "type": "function",
                    "function": {"name": item["name"], "arguments": item["arguments"]},
                }
            )
        elif kind == "function_call_output":
            assistant = None
            output = item["output"]
            messages.append(
                {
                    "role": "tool",
                    "tool_call_id": item["call_id"],
                    "content": output if isinstance(output, str) else _content(output),
                }
            )
    return messages


def _assistant(content: str, reasoning: list[str]) -> dict[str, Any]:
    """Keys in `assistant_message`'s order: role, content, reasoning_content, tool_calls."""
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if reasoning:
        message["reasoning_content"] = "\n".join(reasoning)
    return message


def _content(parts: list[dict[str, Any]]) -> str | list[dict[str, Any]]:
    """Text parts as chat text parts; a single one as plain text."""
    texts = item_text(parts)
    if len(texts) == 1:
        return texts[0]
    return [{"type": "text", "text": text} for text in texts]


def _reasoning_text(item: dict[str, Any]) -> str:
    content = item.get("content")
    if content:
        return "".join(part["text"] for part in content)
    return "\n".join(part["text"] for part in item.get("summary") or ())
