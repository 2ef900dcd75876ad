"""The pipeline's typed output as output items with a lifecycle: one builder for every API
whose answers are items (the Responses API, the Realtime events, Anthropic's blocks).

An answer is a sequence of items, one open at a time: a `message` (the text the
client reads), `reasoning` (the model's reasoning text) and one `function_call`
per tool call. Each item is opened, grows by deltas, and is closed, in that order,
before the next one opens:

    ItemOpened(item)  ItemDelta(item, text)...  ItemClosed(item, status)

`OutputItems.step` turns one pipeline `Step` into these changes and `close` ends
the answer. Each API renders the changes in its own event shapes (numbering,
ids, content parts); none of them parses another API's JSON to learn what the
model wrote. A state machine as data would be more ceremony than the three rules
below:

* text opens a message unless a message is open; reasoning opens a reasoning item
  unless one is open (or is dropped, for an API that shows none: `reasoning=False`,
  and then it leaves the open item open); a call's start always opens its item;
  whatever was open closes first, `completed`;
* a call's argument pieces go to that call while it is the open item (parsers end
  one call before they start the next);
* logprobs belong to a message's text: a step's logprobs ride on its first text
  delta; those of a step whose text is still held back (no event yet) wait for the
  next text delta; those of a step that produced only reasoning or calls are of
  tokens no message holds, and are dropped.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from realtime.pipeline.events import Step
from realtime.protocol.output import (
    ContentDelta,
    OutputEvent,
    ReasoningDelta,
    ToolCallArguments,
    ToolCallStart,
    merge_adjacent,
)

ItemKind = Literal["message", "reasoning", "function_call"]
ItemStatus = Literal["completed", "incomplete"]


@dataclass(slots=True, eq=False)
class OutputItem:
    kind: ItemKind
    #: its place in the answer's output, from 0
    index: int
    id: str
    #: a function call's call id and name
    call_id: str = ""
    name: str = ""
    pieces: list[str] = field(default_factory=list)
    #: a message's token logprobs (OpenAI's shape), when the API asked for them
    logprobs: list[dict[str, Any]] = field(default_factory=list)
    status: ItemStatus | None = None

    @property
    def text(self) -> str:
        """The text so far: a message's or reasoning's text, a call's arguments."""
        return "".join(self.pieces)


@dataclass(frozen=True, slots=True)
class ItemOpened:
    item: OutputItem


@dataclass(frozen=True, slots=True)
class ItemDelta:
    item: OutputItem
    text: str
    #: the logprobs of the tokens behind `text` (a message's, when asked for; else empty)
    logprobs: list[dict[str, Any]]


@dataclass(frozen=True, slots=True)
class ItemClosed:
    item: OutputItem
    status: ItemStatus


ItemChange = ItemOpened | ItemDelta | ItemClosed

_NO_LOGPROBS: list[dict[str, Any]] = []


class OutputItems:
    """The items of one answer, built step by step (see the module docstring).

    `new_id(kind)` names each new item (the API's own id scheme); `reasoning`: whether
    reasoning is an item of this API; `logprobs`: whether messages keep them."""

    def __init__(
        self,
        new_id: Callable[[ItemKind], str],
        *,
        reasoning: bool = True,
        logprobs: bool = False,
    ) -> None:
        self._new_id = new_id
        self._reasoning = reasoning
        self._logprobs = logprobs
        self.items: list[OutputItem] = []
        #: items of the answer that are not built here (a Responses compaction item)
        #: stand before these: the first one built gets this index
        self.offset = 0
        self.current: OutputItem | None = None
        #: the parser's tool-call index -> its item
        self._calls: dict[int, OutputItem] = {}
        #: logprobs of tokens whose text is still held back
        self._pending: list[dict[str, Any]] = []

    @property
    def reasoning_text(self) -> str:
        return "".join(item.text for item in self.items if item.kind == "reasoning")

    def step(self, step: Step) -> list[ItemChange]:
        """The changes one step makes (often one delta, sometimes none)."""
        logprobs = step.logprobs if self._logprobs else None
        if step.events is None:  # no parser: the step's text is all message text
            if step.text:
                return self._text(step.text, logprobs)
            if logprobs:
                self._pending += logprobs
            return []
        if not step.events:
            if logprobs:
                self._pending += logprobs
            return []
        changes: list[ItemChange] = []
        for event in merge_adjacent(step.events):
            if isinstance(event, ContentDelta):
                changes += self._text(event.text, logprobs)
                logprobs = None  # the step's logprobs ride on its first text delta
            else:
                changes += self._other(event)
        return changes

    def close(self, status: ItemStatus) -> list[ItemChange]:
        """The answer ended: close the open item (`incomplete` when it was cut off)."""
        return self._close(status)

    # --- the rules ---

    def _text(self, text: str, logprobs: list[dict[str, Any]] | None) -> list[ItemChange]:
        changes: list[ItemChange] = []
        item = self.current
        if item is None or item.kind != "message":
            item = self._open("message", changes)
        item.pieces.append(text)
        shown = _NO_LOGPROBS
        if self._logprobs:
            shown = self._pending + (logprobs or []) if self._pending else list(logprobs or [])
            self._pending = []
            item.logprobs += shown
        changes.append(ItemDelta(item, text, shown))
        return changes

    def _other(self, event: OutputEvent) -> list[ItemChange]:
        changes: list[ItemChange] = []
        if isinstance(event, ReasoningDelta):
            if not self._reasoning:
                return changes
            item = self.current
            if item is None or item.kind != "reasoning":
                item = self._open("reasoning", changes)
            item.pieces.append(event.text)
            changes.append(ItemDelta(item, event.text, _NO_LOGPROBS))
        elif isinstance(event, ToolCallStart):
            item = self._open("function_call", changes)
            item.call_id, item.name = event.id, event.name
            self._calls[event.index] = item
        elif isinstance(event, ToolCallArguments):
            target = self._calls.get(event.index)
            if target is not None and target is self.current and event.text:
                target.pieces.append(event.text)
                changes.append(ItemDelta(target, event.text, _NO_LOGPROBS))
        return changes

    def _open(self, kind: ItemKind, changes: list[ItemChange]) -> OutputItem:
        changes += self._close("completed")
        item = OutputItem(kind, self.offset + len(self.items), self._new_id(kind))
        self.items.append(item)
        self.current = item
        changes.append(ItemOpened(item))
        return item

    def _close(self, status: ItemStatus) -> list[ItemChange]:
        item = self.current
        if item is None:
            return []
        self.current = None
        if item.kind == "message" and self._pending:
            item.logprobs += self._pending
            self._pending = []
        item.status = status
        return [ItemClosed(item, status)]
