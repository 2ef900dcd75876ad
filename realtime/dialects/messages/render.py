"""The pipeline's typed output as Anthropic's Messages events, or one `Message`.

    message_start
    content_block_start   content_block_delta...   content_block_stop     (each block)
    message_delta         (stop_reason, stop_sequence, usage)
    message_stop

Blocks are the answer's output items (`realtime.pipeline.items.OutputItems`), one
open at a time, each at its place in `content` (`index`): a `message` item is a
`text` block (`text_delta`), `reasoning` a `thinking` block (`thinking_delta`, then
one `signature_delta` before it stops), a `function_call` a `tool_use` block
(`input_json_delta`: the arguments' JSON as the parser reads it). `message_start`
goes out with the first engine step, once the prefix cache has said how much of
the prompt it reused, so its usage is the answer's real one.

Usage follows Anthropic's sums: `input_tokens` are the prompt's tokens computed
for this request, `cache_read_input_tokens` those the prefix cache reused (their
sum is the prompt), and `cache_creation_input_tokens` is 0: the cache is automatic,
nothing is written to it on request. A thinking block's `signature` is a digest of
its text, so clients that insist on one get one; it proves nothing, and the server
never checks the signatures it is sent.

A non-streamed answer is the fold of the same events (`MessageBlocks.message`), so
the two forms cannot drift apart.
"""

from __future__ import annotations

import base64
import hashlib
from typing import Any

import orjson

from realtime.model.generation import FinishReason
from realtime.pipeline.events import Finish, Step, Usage
from realtime.pipeline.items import (
    ItemChange,
    ItemClosed,
    ItemDelta,
    ItemKind,
    ItemOpened,
    ItemStatus,
    OutputItem,
    OutputItems,
)

Event = dict[str, Any]


def signature(thinking: str) -> str:
    """The `signature` of a thinking block: a digest of its text (see the module docstring)."""
    digest = hashlib.sha256(thinking.encode("utf-8", "surrogatepass")).digest()
    return "rt1." + base64.urlsafe_b64encode(digest).decode().rstrip("=")


def usage_fields(usage: Usage) -> dict[str, int]:
    cached = usage.cached_tokens
    return {
        "input_tokens": usage.prompt_tokens - cached,
        "output_tokens": usage.completion_tokens,
        "cache_read_input_tokens": cached,
        "cache_creation_input_tokens": 0,
    }


def _no_id(kind: ItemKind) -> str:
    return ""  # blocks have no ids of their own; a tool_use block carries its call's


class MessageBlocks:
    """The events of one answer, step by step (see the module docstring)."""

    __slots__ = ("finish", "id", "items", "model", "started", "stop_sequence", "usage")

    def __init__(self, message_id: str, model: str, usage: Usage) -> None:
        self.id = message_id
        self.model = model
        self.usage = usage
        self.items = OutputItems(_no_id)
        self.started = False
        self.finish: FinishReason | None = None
        #: the stop sequence that ended the answer (the pipeline's stop matcher's)
        self.stop_sequence: str | None = None

    def render(self, event: Step | Finish, matched_stop: str | None = None) -> list[Event]:
        """The events for one pipeline step, or the closing events for its finish."""
        events: list[Event] = []
        if not self.started:
            self.started = True
            if type(event) is Step and event.cached_tokens is not None:
                self.usage.cached_tokens = event.cached_tokens
            events.append({"type": "message_start", "message": self._envelope([], None)})
        if type(event) is Step:
            for change in self.items.step(event):
                events += _block_events(change)
            return events
        assert isinstance(event, Finish)
        self.finish = event.reason
        self.usage = event.usage
        if event.reason is FinishReason.ERROR:
            return events  # the pipeline raises the error next: an `error` event
        self.stop_sequence = matched_stop if event.reason is FinishReason.STOP else None
        status: ItemStatus = "incomplete" if event.reason is FinishReason.LENGTH else "completed"
        for change in self.items.close(status):
            events += _block_events(change)
        events.append(
            {
                "type": "message_delta",
                "delta": {"stop_reason": self.stop_reason, "stop_sequence": self.stop_sequence},
                "usage": usage_fields(self.usage),
            }
        )
        events.append({"type": "message_stop"})
        return events

    @property
    def stop_reason(self) -> str | None:
        if self.finish is None:
            return None
        if self.finish is FinishReason.LENGTH:
            return "max_tokens"
        if any(item.kind == "function_call" for item in self.items.items):
            return "tool_use"
        if self.stop_sequence is not None:
            return "stop_sequence"
        return "end_turn"

    def message(self) -> dict[str, Any]:
        """The whole `Message`, once the answer has finished."""
        return self._envelope([_block(item) for item in self.items.items], self.stop_reason)

    def _envelope(self, content: list[dict[str, Any]], stop_reason: str | None) -> Event:
        return {
            "id": self.id,
            "type": "message",
            "role": "assistant",
            "model": self.model,
            "content": content,
            "stop_reason": stop_reason,
            "stop_sequence": self.stop_sequence if stop_reason is not None else None,
            "usage": usage_fields(self.usage),
        }


def _block_events(change: ItemChange) -> list[Event]:
    item = change.item
    if isinstance(change, ItemDelta):
        if item.kind == "message":
            delta: Event = {"type": "text_delta", "text": change.text}
        elif item.kind == "reasoning":
            delta = {"type": "thinking_delta", "thinking": change.text}
        else:
            delta = {"type": "input_json_delta", "partial_json": change.text}
        return [{"type": "content_block_delta", "index": item.index, "delta": delta}]
    if isinstance(change, ItemOpened):
        return [{"type": "content_block_start", "index": item.index, "content_block": _empty(item)}]
    assert isinstance(change, ItemClosed)
    stop: Event = {"type": "content_block_stop", "index": item.index}
    if item.kind == "reasoning":
        delta = {"type": "signature_delta", "signature": signature(item.text)}
        return [{"type": "content_block_delta", "index": item.index, "delta": delta}, stop]
    return [stop]


def _empty(item: OutputItem) -> dict[str, Any]:
    if item.kind == "message":
        return {"type": "text", "text": ""}
    if item.kind == "reasoning":
        return {"type": "thinking", "thinking": "", "signature": ""}
    return {"type": "tool_use", "id": item.call_id, "name": item.name, "input": {}}


def _block(item: OutputItem) -> dict[str, Any]:
    text = item.text
    if item.kind == "message":
        return {"type": "text", "text": text}
    if item.kind == "reasoning":
        return {"type": "thinking", "thinking": text, "signature": signature(text)}
    return {"type": "tool_use", "id": item.call_id, "name": item.name, "input": tool_input(text)}


def tool_input(arguments: str) -> dict[str, Any]:
    """A call's arguments as the `input` object (`{}` for none, or for text that is not
    a JSON object: a grammar-less engine may write anything)."""
    try:
        value = orjson.loads(arguments) if arguments else {}
    except orjson.JSONDecodeError:
        return {}
    return value if isinstance(value, dict) else {}
