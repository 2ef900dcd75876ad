"""One response's server events, rendered from the pipeline's chat chunks.

The pipeline already does the hard part (detokenizing, stop strings, the
configured tool parser); its chunks carry text deltas and tool-call deltas.
Here they become the Realtime shape: a message item with one text part, and one
`function_call` item per call, each opened (`output_item.added`), streamed
(`output_text.delta`, `function_call_arguments.delta`) and closed
(`.done`, `output_item.done`) in order, then `response.done` with the output,
the status and the usage. Reasoning text is not shown (the API has no event for
it). Items are added to the conversation as they open, through `on_item`, unless
the response is out of band.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal

from realtime.dialects.realtime_events.ids import EventIds, new_call_id, new_item_id
from realtime.dialects.realtime_events.session_config import GenerationConfig
from realtime.protocol.errors import RealtimeError

Status = Literal["completed", "cancelled", "failed", "incomplete"]

#: Puts an item that opens into the conversation; returns the id of the item before it.
#: A response given none writes to no conversation (`conversation: "none"`).
ItemSink = Callable[[dict[str, Any]], str | None]


def realtime_usage(usage: dict[str, Any] | None) -> dict[str, Any]:
    """Chat usage -> the Realtime `usage` (text tokens only; cached input tokens kept)."""
    usage = usage or {}
    prompt = usage.get("prompt_tokens", 0)
    completion = usage.get("completion_tokens", 0)
    cached = (usage.get("prompt_tokens_details") or {}).get("cached_tokens", 0) or 0
    return {
        "total_tokens": prompt + completion,
        "input_tokens": prompt,
        "output_tokens": completion,
        "input_token_details": {
            "text_tokens": prompt,
            "audio_tokens": 0,
            "image_tokens": 0,
            "cached_tokens": cached,
            "cached_tokens_details": {"text_tokens": cached, "audio_tokens": 0, "image_tokens": 0},
        },
        "output_token_details": {"text_tokens": completion, "audio_tokens": 0},
    }


class ResponseRenderer:
    def __init__(
        self,
        response_id: str,
        event_ids: EventIds,
        config: GenerationConfig,
        *,
        on_item: ItemSink | None,
        metadata: dict[str, str] | None = None,
        conversation_id: str | None = None,
    ):
        self.id = response_id
        self._event_id = event_ids
        self._config = config
        self._on_item = on_item
        self._metadata = metadata
        self._conversation_id = conversation_id if on_item is not None else None
        self.output: list[dict[str, Any]] = []
        self.status: Status | None = None
        #: The open message item (its text grows in place) and its output index.
        self._message: dict[str, Any] | None = None
        self._message_index = 0
        #: Open function calls by the chunk's tool-call index.
        self._calls: dict[int, dict[str, Any]] = {}
        self._call_args: dict[int, list[str]] = {}
        self._finish_reason: str | None = None
        #: previous_item_id of each item added to the conversation, by item id.
        self._previous: dict[str, str | None] = {}
        #: `response.created` was rendered (a response cancelled while queued never was).
        self.announced = False

    # --- the response object ---

    def response(
        self,
        status: str,
        usage: dict[str, Any] | None = None,
        details: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        return {
            "id": self.id,
            "object": "realtime.response",
            "status": status,
            "status_details": details,
            "output": [_copy(item) for item in self.output],
            "conversation_id": self._conversation_id,
            "output_modalities": ["text"],
            "max_output_tokens": self._config.max_output_tokens,
            "metadata": self._metadata,
            "usage": usage,
        }

    def created(self) -> dict[str, Any]:
        self.announced = True
        return {
            "type": "response.created",
            "event_id": self._event_id(),
            "response": self.response("in_progress"),
        }

    # --- chunks in, events out ---

    def feed(self, chunk: dict[str, Any]) -> list[dict[str, Any]]:
        events: list[dict[str, Any]] = []
        for choice in chunk.get("choices") or ():
            delta = choice.get("delta") or {}
            text = delta.get("content")
            if text:
                if self._calls:
                    self._close_calls(events)
                self._text_delta(text, events)
            for call in delta.get("tool_calls") or ():
                self._call_delta(call, events)
            if choice.get("finish_reason"):
                self._finish_reason = choice["finish_reason"]
        return events

    def _add(self, item: dict[str, Any], events: list[dict[str, Any]]) -> int:
        index = len(self.output)
        self.output.append(item)
        events.append(
            {
                "type": "response.output_item.added",
                "event_id": self._event_id(),
                "response_id": self.id,
                "output_index": index,
                "item": _copy(item),
            }
        )
        if self._on_item is not None:
            previous = self._on_item(item)
            self._previous[item["id"]] = previous
            events.append(
                {
                    "type": "conversation.item.added",
                    "event_id": self._event_id(),
                    "previous_item_id": previous,
                    "item": _copy(item),
                }
            )
        return index

    def _item_done(self, item: dict[str, Any], status: str, events: list[dict[str, Any]]) -> None:
        item["status"] = status
        events.append(
            {
                "type": "response.output_item.done",
                "event_id": self._event_id(),
                "response_id": self.id,
                "output_index": self.output.index(item),
                "item": _copy(item),
            }
        )
        if self._on_item is not None:
            events.append(
                {
                    "type": "conversation.item.done",
                    "event_id": self._event_id(),
                    "previous_item_id": self._previous.get(item["id"]),
                    "item": _copy(item),
                }
            )

    def _text_delta(self, text: str, events: list[dict[str, Any]]) -> None:
        message = self._message
        if message is None:
            message = {
                "id": new_item_id(),
                "object": "realtime.item",
                "type": "message",
                "role": "assistant",
                "status": "in_progress",
                "content": [],
            }
            self._message = message
            self._message_index = self._add(message, events)
            message["content"].append({"type": "output_text", "text": ""})
            events.append(self._part_event("response.content_part.added", message, ""))
        message["content"][0]["text"] += text
        events.append(
            {
                "type": "response.output_text.delta",
                "event_id": self._event_id(),
                "response_id": self.id,
                "item_id": message["id"],
                "output_index": self._message_index,
                "content_index": 0,
                "delta": text,
            }
        )

    def _part_event(self, kind: str, message: dict[str, Any], text: str) -> dict[str, Any]:
        return {
            "type": kind,
            "event_id": self._event_id(),
            "response_id": self.id,
            "item_id": message["id"],
            "output_index": self.output.index(message),
            "content_index": 0,
            "part": {"type": "text", "text": text},
        }

    def _close_message(self, status: str, events: list[dict[str, Any]]) -> None:
        message = self._message
        if message is None:
            return
        self._message = None
        text = message["content"][0]["text"]
        events.append(
            {
                "type": "response.output_text.done",
                "event_id": self._event_id(),
                "response_id": self.id,
                "item_id": message["id"],
                "output_index": self.output.index(message),
                "content_index": 0,
                "text": text,
            }
        )
        events.append(self._part_event("response.content_part.done", message, text))
        self._item_done(message, status, events)

    def _call_delta(self, call: dict[str, Any], events: list[dict[str, Any]]) -> None:
        index = call.get("index", 0)
        function = call.get("function") or {}
        item = self._calls.get(index)
        if item is None:
            self._close_message("completed", events)
            self._close_calls(events)
            item = {
                "id": new_item_id(),
                "object": "realtime.item",
                "type": "function_call",
                "status": "in_progress",
                "call_id": call.get("id") or new_call_id(),
                "name": function.get("name") or "",
                "arguments": "",
            }
            self._calls[index] = item
            self._add(item, events)
        arguments = function.get("arguments")
        if arguments:
            item["arguments"] += arguments
            events.append(
                {
                    "type": "response.function_call_arguments.delta",
                    "event_id": self._event_id(),
                    "response_id": self.id,
                    "item_id": item["id"],
                    "output_index": self.output.index(item),
                    "call_id": item["call_id"],
                    "delta": arguments,
                }
            )

    def _close_calls(self, events: list[dict[str, Any]], status: str = "completed") -> None:
        for item in self._calls.values():
            if item["status"] != "in_progress":
                continue
            events.append(
                {
                    "type": "response.function_call_arguments.done",
                    "event_id": self._event_id(),
                    "response_id": self.id,
                    "item_id": item["id"],
                    "output_index": self.output.index(item),
                    "call_id": item["call_id"],
                    "name": item["name"],
                    "arguments": item["arguments"],
                }
            )
            self._item_done(item, status, events)

    # --- the end ---

    def finish(
        self,
        usage: dict[str, Any] | None,
        *,
        cancelled: bool = False,
        error: RealtimeError | None = None,
    ) -> list[dict[str, Any]]:
        """Close what is open, then `response.done`: cancelled, failed, incomplete (the
        token limit) or completed."""
        details: dict[str, Any] | None
        if cancelled:
            status: Status = "cancelled"
            details = {"type": "cancelled", "reason": "client_cancelled"}
        elif error is not None:
            status = "failed"
            details = {
                "type": "failed",
                "error": {"type": error.error_type, "code": error.code, "message": error.message},
            }
        elif self._finish_reason == "length":
            status = "incomplete"
            details = {"type": "incomplete", "reason": "max_output_tokens"}
        else:
            status, details = "completed", None
        item_status = "completed" if status == "completed" else "incomplete"
        # Every response.done follows its response.created, even for one never started.
        events: list[dict[str, Any]] = [] if self.announced else [self.created()]
        self._close_message(item_status, events)
        self._close_calls(events, item_status)
        self.status = status
        events.append(
            {
                "type": "response.done",
                "event_id": self._event_id(),
                "response": self.response(status, realtime_usage(usage), details),
            }
        )
        return events


def _copy(item: dict[str, Any]) -> dict[str, Any]:
    """A shallow copy with its own content list: later deltas must not change a sent event."""
    copied = dict(item)
    if "content" in copied:
        copied["content"] = [dict(part) for part in copied["content"]]
    return copied
