"""ChatOutputParser: one object per request that turns visible text into typed events.

    text pieces -> reasoning parser -> (content only) tool parser -> policy -> events

The pipeline feeds it the text that passed the stop-string matcher and hands
the events to `DeltaGenerator.event_chunks`. The policy step applies
`parallel_tool_calls: false` (only the first call is kept; later ones are
dropped with a warning, since a stream cannot take back what it sent) and
records call names for the `tool_choice` check at the end.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from realtime.chat.reasoning.base import ReasoningParser
from realtime.chat.reasoning.registry import create_reasoning_parser, thinking_requested
from realtime.chat.tools.base import ToolParser, tool_specs
from realtime.chat.tools.choice import (
    AUTO,
    ToolChoice,
    ToolChoiceError,
    normalize_tool_choice,
    tool_choice_violation,
    tools_for_choice,
)
from realtime.chat.tools.registry import create_tool_parser
from realtime.protocol.output import (
    ContentDelta,
    OutputEvent,
    ToolCallArguments,
    ToolCallStart,
    merge_adjacent,
)

logger = logging.getLogger("realtime.chat.tools")


class ChatOutputParser:
    def __init__(
        self,
        *,
        reasoning: ReasoningParser | None = None,
        tools: ToolParser | None = None,
        tool_choice: ToolChoice = AUTO,
        parallel_tool_calls: bool = True,
    ) -> None:
        self.reasoning = reasoning
        self.tools = tools
        self.tool_choice = tool_choice
        self.parallel_tool_calls = parallel_tool_calls
        self.call_names: list[str] = []
        self._dropped: set[int] = set()
        self._finished = False

    @property
    def active(self) -> bool:
        """False when text passes through unchanged (no parser configured)."""
        return self.reasoning is not None or self.tools is not None

    @property
    def markers(self) -> tuple[str, ...]:
        """Every marker the configured parsers need to see in the decoded text."""
        found = (self.reasoning.markers if self.reasoning else ()) + (
            self.tools.markers if self.tools else ()
        )
        return tuple(dict.fromkeys(found))

    def feed(self, text: str) -> list[OutputEvent]:
        """Events for the next piece of visible text (may be empty: text is held)."""
        if not text:
            return []
        if self.reasoning is None:
            return self._tools(text, final=False)
        events: list[OutputEvent] = []
        for event in self.reasoning.feed(text):
            if isinstance(event, ContentDelta):
                events += self._tools(event.text, final=False)
            else:
                events.append(event)
        return merge_adjacent(events)

    def finish(self) -> list[OutputEvent]:
        """Flush everything held at the end of the output."""
        if self._finished:
            return []
        self._finished = True
        events: list[OutputEvent] = []
        if self.reasoning is not None:
            for event in self.reasoning.finish():
                if isinstance(event, ContentDelta):
                    events += self._tools(event.text, final=False)
                else:
                    events.append(event)
        events += self._tools("", final=True)
        return merge_adjacent(events)

    def tool_choice_violation(self) -> str | None:
        """After `finish()`: why the output does not comply with `tool_choice`, or None."""
        return tool_choice_violation(self.tool_choice, self.call_names)

    def _tools(self, text: str, *, final: bool) -> list[OutputEvent]:
        if self.tools is None:
            return [ContentDelta(text)] if text else []
        raw = self.tools.feed(text) if text else []
        if final:
            raw += self.tools.finish()
        out: list[OutputEvent] = []
        for event in raw:
            if isinstance(event, ToolCallStart):
                if not self.parallel_tool_calls and event.index > 0:
                    self._dropped.add(event.index)
                    logger.warning(
                        "parallel_tool_calls is false: dropping the model's extra call to %r",
                        event.name,
                    )
                    continue
                self.call_names.append(event.name)
            elif isinstance(event, ToolCallArguments) and event.index in self._dropped:
                continue
            out.append(event)
        return out


def build_output_parser(
    *,
    tool_parser: str | None = None,
    reasoning_parser: str | None = None,
    tools: Sequence[Mapping[str, Any]] | None = None,
    tool_choice: Any = None,
    parallel_tool_calls: bool | None = None,
    chat_template_kwargs: Mapping[str, Any] | None = None,
    prompt: str | None = None,
    incremental: bool = True,
    id_factory: Callable[[], str] | None = None,
) -> ChatOutputParser:
    """The parser for one request, from the server's parser names and the request.

    Tool calls are parsed only when a tool parser is configured, the request
    declared tools, and `tool_choice` is not `none`. Raises ToolChoiceError (a
    ValueError with `param = "tool_choice"`) when `tool_choice` demands a call
    that cannot be checked; the transport answers it with a 400 before
    generating anything.
    """
    choice = normalize_tool_choice(tool_choice)
    allowed = tools_for_choice(tool_specs(tools), choice)
    if choice.demands_call and (tool_parser is None or tool_parser == "passthrough"):
        raise ToolChoiceError(
            f"tool_choice {choice.describe()} needs a tool parser; the server runs without one"
        )
    parser = (
        create_tool_parser(tool_parser, allowed, incremental=incremental, id_factory=id_factory)
        if tool_parser is not None and allowed is not None
        else None
    )
    reasoning = (
        create_reasoning_parser(
            reasoning_parser,
            prompt=prompt,
            enable_thinking=thinking_requested(chat_template_kwargs),
        )
        if reasoning_parser is not None
        else None
    )
    return ChatOutputParser(
        reasoning=reasoning,
        tools=parser,
        tool_choice=choice,
        parallel_tool_calls=parallel_tool_calls is not False,
    )
