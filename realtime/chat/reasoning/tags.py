"""tags: reasoning between a start and an end tag at the start of the output.

The generic parser behind every tag-style format, usable directly with any pair
of tags. Rules:

* the block is recognised only at the start of the output (after whitespace),
  or, with `starts_in_reasoning`, the output begins inside it because the
  prompt already opened it (an opening tag the model repeats is then skipped);
* reasoning ends at the end tag; without one, the whole output is reasoning
  (the model was cut off while thinking);
* whitespace around the reasoning and at the start of the answer after it is
  layout and dropped; without a reasoning block every character is content;
* with `enabled=False` nothing is parsed: the output is content, tags included.
"""

from __future__ import annotations

from typing import ClassVar

from realtime.chat.reasoning.base import ReasoningParser
from realtime.protocol.output import ContentDelta, ReasoningDelta, ReasoningEvent, merge_adjacent

_LEAD, _OPENING, _THINK_LEAD, _THINK, _CONTENT_LEAD, _CONTENT = range(6)


class TagReasoningParser(ReasoningParser):
    name = "tags"
    start_tag: ClassVar[str] = "<think>"
    end_tag: ClassVar[str] = "</think>"
    #: Whether the prompt usually opens the block already (DeepSeek-R1's does).
    starts_in_reasoning_default: ClassVar[bool] = False

    def __init__(
        self,
        *,
        enabled: bool = True,
        starts_in_reasoning: bool | None = None,
        start_tag: str | None = None,
        end_tag: str | None = None,
    ) -> None:
        self.start = self.start_tag if start_tag is None else start_tag
        self.end = self.end_tag if end_tag is None else end_tag
        if not self.start or not self.end:
            raise ValueError("reasoning tags must not be empty")
        if starts_in_reasoning is None:
            starts_in_reasoning = self.starts_in_reasoning_default
        self.enabled = enabled
        self.starts_in_reasoning = starts_in_reasoning and enabled
        self._state = _CONTENT if not enabled else _OPENING if starts_in_reasoning else _LEAD
        self._buf = ""
        self._ws = ""  # trailing whitespace of the reasoning so far
        self._events: list[ReasoningEvent] = []
        self._finished = False

    @property
    def markers(self) -> tuple[str, ...]:
        return (self.start, self.end)

    @property
    def in_reasoning(self) -> bool:
        return self._state in (_OPENING, _THINK_LEAD, _THINK)

    def feed(self, text: str) -> list[ReasoningEvent]:
        if self._finished:
            raise RuntimeError("feed() after finish()")
        self._buf += text
        self._run(final=False)
        return self._take()

    def finish(self) -> list[ReasoningEvent]:
        if not self._finished:
            self._finished = True
            self._run(final=True)  # resolves every state; nothing stays held
        return self._take()

    def _take(self) -> list[ReasoningEvent]:
        events = merge_adjacent(list(self._events))
        self._events.clear()
        return events  # type: ignore[return-value]

    def _run(self, *, final: bool) -> None:
        while self._buf:
            buf, state = self._buf, self._state
            if state == _CONTENT:
                self._content(buf)
                self._buf = ""
            elif state in (_LEAD, _OPENING):
                body = buf.lstrip()
                if body.startswith(self.start):
                    self._buf = body[len(self.start) :]
                    self._state = _THINK_LEAD
                elif not final and self.start.startswith(body):
                    return  # whitespace, or maybe the start tag: undecided
                elif state == _LEAD:
                    self._state = _CONTENT
                else:
                    self._state = _THINK_LEAD
            elif state in (_THINK_LEAD, _CONTENT_LEAD):
                body = buf.lstrip()
                self._buf = body
                if body:
                    self._state = _THINK if state == _THINK_LEAD else _CONTENT
            else:  # _THINK
                i = buf.find(self.end)
                if i != -1:
                    self._reasoning(buf[:i])
                    self._ws = ""
                    self._buf = buf[i + len(self.end) :]
                    self._state = _CONTENT_LEAD
                    continue
                keep = 0 if final else _held(buf, self.end)
                self._reasoning(buf[: len(buf) - keep])
                self._buf = buf[len(buf) - keep :]
                return

    def _reasoning(self, text: str) -> None:
        body = text.rstrip()
        if not body:
            self._ws += text
            return
        self._events.append(ReasoningDelta(self._ws + body))
        self._ws = text[len(body) :]

    def _content(self, text: str) -> None:
        if text:
            self._events.append(ContentDelta(text))


def _held(buf: str, tag: str) -> int:
    """Length of the longest suffix of `buf` that begins `tag`."""
    for n in range(min(len(tag) - 1, len(buf)), 0, -1):
        if tag.startswith(buf[-n:]):
            return n
    return 0
