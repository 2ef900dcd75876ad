"""What the model produced, typed: the events every output parser emits, and their fold.

The output parsers report *what* the model produced (visible text, reasoning, the
start of a tool call, a piece of its arguments) as `OutputEvent`s; the pipeline
hands them to every API inside its steps (`realtime.pipeline.events`), and each
API's dialect renders them in its own wire shapes: chat chunks
(`DeltaGenerator.event_chunks`), Responses and Realtime events, Anthropic's
content blocks. Nothing is rendered as one API's JSON and parsed back by another.

Folding the events gives the complete (non-streaming) result, so tests can prove
that any split of the text yields exactly the complete parse.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class ContentDelta:
    """Visible answer text (`delta.content`)."""

    text: str


@dataclass(frozen=True, slots=True)
class ReasoningDelta:
    """Reasoning text (`delta.reasoning_content`)."""

    text: str


@dataclass(frozen=True, slots=True)
class ToolCallStart:
    """A tool call begins: sent once per index, before any of its arguments."""

    index: int
    id: str
    name: str


@dataclass(frozen=True, slots=True)
class ToolCallArguments:
    """The next piece of a call's arguments JSON; the pieces concatenate to the whole."""

    index: int
    text: str


ToolEvent = ContentDelta | ToolCallStart | ToolCallArguments
ReasoningEvent = ContentDelta | ReasoningDelta
OutputEvent = ContentDelta | ReasoningDelta | ToolCallStart | ToolCallArguments


@dataclass(slots=True)
class ParsedToolCall:
    id: str
    name: str
    arguments: str


@dataclass(slots=True)
class ParsedOutput:
    """The complete result of parsing one output."""

    content: str = ""
    reasoning: str = ""
    tool_calls: list[ParsedToolCall] = field(default_factory=list)


def fold_events(events: Iterable[OutputEvent]) -> ParsedOutput:
    """Concatenate events into the complete result (the fold a client performs)."""
    content: list[str] = []
    reasoning: list[str] = []
    calls: dict[int, ParsedToolCall] = {}
    args: dict[int, list[str]] = {}
    for event in events:
        if isinstance(event, ContentDelta):
            content.append(event.text)
        elif isinstance(event, ReasoningDelta):
            reasoning.append(event.text)
        elif isinstance(event, ToolCallStart):
            calls[event.index] = ParsedToolCall(event.id, event.name, "")
            args[event.index] = []
        else:
            args[event.index].append(event.text)
    out = ParsedOutput("".join(content), "".join(reasoning))
    for index in sorted(calls):
        call = calls[index]
        call.arguments = "".join(args[index])
        out.tool_calls.append(call)
    return out


def merge_adjacent(events: list[OutputEvent]) -> list[OutputEvent]:
    """Join neighbouring text events of one kind, so one step yields as few chunks as possible."""
    out: list[OutputEvent] = []
    for event in events:
        last = out[-1] if out else None
        if isinstance(event, ContentDelta) and isinstance(last, ContentDelta):
            out[-1] = ContentDelta(last.text + event.text)
        elif isinstance(event, ReasoningDelta) and isinstance(last, ReasoningDelta):
            out[-1] = ReasoningDelta(last.text + event.text)
        elif (
            isinstance(event, ToolCallArguments)
            and isinstance(last, ToolCallArguments)
            and last.index == event.index
        ):
            out[-1] = ToolCallArguments(event.index, last.text + event.text)
        elif (
            isinstance(event, ContentDelta | ReasoningDelta | ToolCallArguments) and not event.text
        ):
            continue
        else:
            out.append(event)
    return out
