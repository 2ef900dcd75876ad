"""One conversation model for every API: the items a prompt is rendered from.

Chat messages, Responses items, Realtime conversation items and Anthropic content
blocks all say the same few things: someone wrote text, the model reasoned, the
model called a function, the function answered. Each API's dialect turns its wire
form into these items, and one function (`realtime.chat.conversation.template_messages`)
turns items into the messages a chat template renders. So the same conversation
renders the same prompt, byte for byte, whichever API carried it, and a prefix
cached by one is found by another.

The items are plain data: no validation (the dialect validated its wire form), no
I/O. `parts` keeps a message's text parts as sent; how they are joined is decided
in one place, with the rest of the template conversion.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

#: Extra keys a message carries to the chat template (a chat message's `name`, or a
#: model-specific field a client sends back): passed on as they are.
Extras = Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class Message:
    """Someone's text: a system or developer instruction, the user, or the assistant's
    answer. `parts` are its text parts in order (one for plain text); None is a
    message without content (an assistant turn of tool calls only)."""

    role: str
    parts: tuple[str, ...] | None
    extras: Extras | None = None


@dataclass(frozen=True, slots=True)
class Reasoning:
    """The model's reasoning before the assistant message or call that follows it."""

    text: str


@dataclass(frozen=True, slots=True)
class FunctionCall:
    """A call the model made: `arguments` is the JSON text it wrote."""

    call_id: str
    name: str
    arguments: str
    extras: Extras | None = None


@dataclass(frozen=True, slots=True)
class FunctionCallOutput:
    """What the client's function answered to `call_id`: text, or text parts."""

    call_id: str
    output: tuple[str, ...]
    extras: Extras | None = None


Item = Message | Reasoning | FunctionCall | FunctionCallOutput


@dataclass(frozen=True, slots=True)
class FunctionTool:
    """A function the model may call: its name, description and JSON Schema."""

    name: str
    description: str | None = None
    parameters: Mapping[str, Any] | None = None
    strict: bool | None = None


@dataclass(frozen=True, slots=True)
class NamedFunction:
    """`tool_choice` naming one function: the answer must call it."""

    name: str


#: Whether the model may, must or must not call tools, or which one it must call.
ToolChoice = Literal["auto", "none", "required"] | NamedFunction


def text_message(role: str, text: str | None) -> Message:
    """A message of one text part (None: no content)."""
    return Message(role, None if text is None else (text,))
