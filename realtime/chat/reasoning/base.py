"""The reasoning-parser interface: split a model's thinking from its answer.

Reasoning parsers run first, on the visible text; only the content they emit
goes on to the tool parser, so a `<tool_call>` written while thinking is never
taken for a call. Like tool parsers they are incremental state machines
(`feed` / `finish`) whose complete form (`parse`) is the same machine fed the
whole text, so any split of the text yields exactly the complete result.
"""

from __future__ import annotations

import logging
from abc import ABC, abstractmethod
from typing import ClassVar

from realtime.protocol.output import OutputEvent, ParsedOutput, ReasoningEvent, fold_events

logger = logging.getLogger("realtime.chat.reasoning")


class ReasoningParser(ABC):
    #: Registry name.
    name: ClassVar[str]

    @property
    def markers(self) -> tuple[str, ...]:
        """Strings this format needs to see in the decoded text (some are special
        tokens, which the detokenizer must then not skip)."""
        return ()

    @abstractmethod
    def feed(self, text: str) -> list[ReasoningEvent]:
        """Take the next piece of output; return the events that are now certain."""

    @abstractmethod
    def finish(self) -> list[ReasoningEvent]:
        """The output ended: flush what is held."""

    def parse(self, text: str) -> ParsedOutput:
        """The complete form, on a fresh parser: `reasoning` and `content` of `text`."""
        events: list[OutputEvent] = [*self.feed(text), *self.finish()]
        return fold_events(events)
