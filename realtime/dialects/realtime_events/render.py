"""One response's server events, rendered from the pipeline's typed output.

The pipeline does the hard part (detokenizing, stop strings, the configured tool
parser); the output-item lifecycle every item API shares (`realtime.pipeline.items`)
says when each item opens, grows and closes. Here those changes become the
Realtime shape: a message item with one text part, and one `function_call` item
per call, each opened (`output_item.added`), streamed (`output_text.delta`,
`function_call_arguments.delta`) and closed (`.done`, `output_item.done`) in
order, then `response.done` with the output, the status and the usage.
Reasoning text is not shown (the API has no event for it, so it is no item and
leaves the open message open). Items are added to the conversation as they open,
through `on_item`, unless the response is out of band.

An item the client deletes from the conversation (`forget`) gets no event after
its `conversation.item.deleted`: its deltas and its closing events are not
rendered, and `response.done` leaves it out of the output.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal

from realtime.dialects.realtime_events.ids import EventIds, new_item_id
from realtime.dialects.realtime_events.session_config import GenerationConfig
from realtime.model.generation import FinishReason
from realtime.pipeline.events import Step, Usage
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
from realtime.protocol.errors import RealtimeError

Status = Literal["completed", "cancelled", "failed", "incomplete"]

#: Puts an item that opens into the conversation; returns the id of the item before it.
#: A response given none writes to no conversation (`conversation: "none"`).
ItemSink = Callable[[dict[str, Any]], str | None]


#: The events whose `delta` concatenates: a slow reader may get two as one.
_DELTAS = frozenset({"response.output_text.delta", "response.function_call_arguments.delta"})


def fold_delta(held: dict[str, Any], event: dict[str, Any]) -> bool:
    """Append `event`'s delta to `held` (in place) when both are deltas of one item and
    nothing else differs; True when folded (the folded event keeps the first
    `event_id`: ids are unique, not consecutive)."""
    kind = event.get("type")
    if (
        kind not in _DELTAS
        or held.get("type") != kind
        or held.keys() != event.keys()
        or held.get("item_id") != event.get("item_id")
        or held.get("response_id") != event.get("response_id")
        or held.get("output_index") != event.get("output_index")
    ):
        return False
    held["delta"] += event["delta"]
    return True


def realtime_usage(usage: Usage | None) -> dict[str, Any]:
    """An answer's usage in the Realtime spelling (text tokens only; cached input kept)."""
    prompt = usage.prompt_tokens if usage is not None else 0
    completion = usage.completion_tokens if usage is not None else 0
    cached = usage.cached_tokens if usage is not None else 0
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
        #: the answer's items (no reasoning items: the API shows no reasoning)
        self._items = OutputItems(_new_id, reasoning=False)
        self._finish_reason: FinishReason | None = None
        #: previous_item_id of each item added to the conversation, by item id.
        self._previous: dict[str, str | None] = {}
        #: `response.created` was rendered (a response cancelled while queued never was).
        self.announced = False
        #: Ids of output items the client deleted: nothing more is rendered for them.
        self._forgotten: set[str] = set()

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
            "output": [_copy(item) for item in self.output if item["id"] not in self._forgotten],
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

    # --- the pipeline's steps in, events out ---

    def step(self, step: Step) -> list[dict[str, Any]]:
        """The events of one step of the answer (often one delta, sometimes none)."""
        events: list[dict[str, Any]] = []
        for change in self._items.step(step):
            self._render(change, events)
        return events

    def writes(self, item_id: str) -> bool:
        """Whether `item_id` is one of this response's output items."""
        return any(item["id"] == item_id for item in self.output)

    def forget(self, item_id: str) -> bool:
        """The client deleted output item `item_id`: render nothing more for it. True
        when the model was still writing it."""
        self._forgotten.add(item_id)
        return any(
            item["id"] == item_id and item["status"] == "in_progress" for item in self.output
        )

    def relink(self, deleted: str, previous: str | None) -> None:
        """Conversation item `deleted` is gone: an item of this response that followed
        it now follows `previous`."""
        for item_id, before in self._previous.items():
            if before == deleted:
                self._previous[item_id] = previous

    def _render(self, change: ItemChange, events: list[dict[str, Any]]) -> None:
        item = change.item
        if item.id in self._forgotten:  # deleted by the client: no event names it again
            return
        if isinstance(change, ItemOpened):
            self._opened(item, events)
        elif isinstance(change, ItemDelta):
            body = self.output[item.index]
            if item.kind == "message":
                body["content"][0]["text"] += change.text
                events.append(
                    {
                        "type": "response.output_text.delta",
                        "event_id": self._event_id(),
                        "response_id": self.id,
                        "item_id": item.id,
                        "output_index": item.index,
                        "content_index": 0,
                        "delta": change.text,
                    }
                )
            else:
                body["arguments"] += change.text
                events.append(
                    {
                        "type": "response.function_call_arguments.delta",
                        "event_id": self._event_id(),
                        "response_id": self.id,
                        "item_id": item.id,
                        "output_index": item.index,
                        "call_id": item.call_id,
                        "delta": change.text,
                    }
                )
        else:
            assert isinstance(change, ItemClosed)
            self._closed(item, change.status, events)

    def _opened(self, item: OutputItem, events: list[dict[str, Any]]) -> None:
        body: dict[str, Any] = {"id": item.id, "object": "realtime.item", "type": item.kind}
        if item.kind == "message":
            body.update(role="assistant", status="in_progress", content=[])
        else:
            body.update(status="in_progress", call_id=item.call_id, name=item.name, arguments="")
        self._add(body, events)
        if item.kind == "message":
            body["content"].append({"type": "output_text", "text": ""})
            events.append(self._part_event("response.content_part.added", item, ""))

    def _closed(self, item: OutputItem, status: str, events: list[dict[str, Any]]) -> None:
        body = self.output[item.index]
        if item.kind == "message":
            text = body["content"][0]["text"]
            events.append(
                {
                    "type": "response.output_text.done",
                    "event_id": self._event_id(),
                    "response_id": self.id,
                    "item_id": item.id,
                    "output_index": item.index,
                    "content_index": 0,
                    "text": text,
                }
            )
            events.append(self._part_event("response.content_part.done", item, text))
        else:
            events.append(
                {
                    "type": "response.function_call_arguments.done",
                    "event_id": self._event_id(),
                    "response_id": self.id,
                    "item_id": item.id,
                    "output_index": item.index,
                    "call_id": item.call_id,
                    "name": item.name,
                    "arguments": body["arguments"],
                }
            )
        self._item_done(body, status, events)

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

    def _part_event(self, kind: str, item: OutputItem, text: str) -> dict[str, Any]:
        return {
            "type": kind,
            "event_id": self._event_id(),
            "response_id": self.id,
            "item_id": item.id,
            "output_index": item.index,
            "content_index": 0,
            "part": {"type": "text", "text": text},
        }

    def ended_with(self, reason: FinishReason) -> None:
        """The pipeline's finish: why the answer ended (its token limit makes it
        `incomplete`)."""
        self._finish_reason = reason

    # --- the end ---

    def finish(
        self,
        usage: Usage | None,
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
        elif self._finish_reason is FinishReason.LENGTH:
            status = "incomplete"
            details = {"type": "incomplete", "reason": "max_output_tokens"}
        else:
            status, details = "completed", None
        item_status: ItemStatus = "completed" if status == "completed" else "incomplete"
        # Every response.done follows its response.created, even for one never started.
        events: list[dict[str, Any]] = [] if self.announced else [self.created()]
        for change in self._items.close(item_status):
            self._render(change, events)
        self.status = status
        events.append(
            {
                "type": "response.done",
                "event_id": self._event_id(),
                "response": self.response(status, realtime_usage(usage), details),
            }
        )
        return events


def _new_id(kind: ItemKind) -> str:
    return new_item_id()


def _copy(item: dict[str, Any]) -> dict[str, Any]:
    """A shallow copy with its own content list: later deltas must not change a sent event."""
    copied = dict(item)
    if "content" in copied:
        copied["content"] = [dict(part) for part in copied["content"]]
    return copied
