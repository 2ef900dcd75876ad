"""Shared checks: a parser's streaming form, fed any split of a text, folds to its complete form."""

from __future__ import annotations

import itertools
import json
import logging
import random
from collections.abc import Iterator, Sequence
from typing import Any

import pytest

from realtime.chat.tools.base import ToolParser, ToolSpec, tool_specs
from realtime.chat.tools.registry import tool_parser_class
from realtime.protocol.output import (
    ContentDelta,
    OutputEvent,
    ParsedOutput,
    ToolCallArguments,
    ToolCallStart,
    fold_events,
)

Calls = list[tuple[str, Any]]


def specs(*names: str, **schemas: dict[str, Any]) -> list[ToolSpec]:
    """ToolSpecs for `names`, with parameter schemas for some of them."""
    tools = [{"type": "function", "function": {"name": n}} for n in names if n not in schemas]
    tools += [
        {"type": "function", "function": {"name": n, "parameters": p}} for n, p in schemas.items()
    ]
    return tool_specs(tools)


def splits(text: str, *, seed: int = 0, random_trials: int = 25) -> Iterator[list[str]]:
    """Every single split point, one character at a time, and seeded random multi-splits."""
    yield [text]
    for i in range(1, len(text)):
        yield [text[:i], text[i:]]
    yield list(text)
    rnd = random.Random(f"{seed}:{text}")
    for _ in range(random_trials):
        if len(text) < 3:
            break
        cuts = sorted(rnd.sample(range(1, len(text)), rnd.randint(2, min(12, len(text) - 1))))
        bounds = [0, *cuts, len(text)]
        yield [text[a:b] for a, b in itertools.pairwise(bounds)]


def run(parser: ToolParser, pieces: Sequence[str]) -> tuple[list[OutputEvent], ParsedOutput]:
    events: list[OutputEvent] = []
    for piece in pieces:
        events += parser.feed(piece)
    events += parser.finish()
    return events, fold_events(events)


def shape(parsed: ParsedOutput) -> tuple[str, list[tuple[str, str]]]:
    return parsed.content, [(c.name, c.arguments) for c in parsed.tool_calls]


def check_events_well_formed(events: Sequence[OutputEvent]) -> None:
    """Starts come once per index, in order, before that index's arguments; nothing empty."""
    started: list[int] = []
    for event in events:
        if isinstance(event, ToolCallStart):
            assert event.index == len(started)
            assert event.name
            started.append(event.index)
        elif isinstance(event, ToolCallArguments):
            assert event.index in started
            assert event.text
        else:
            assert isinstance(event, ContentDelta)
            assert event.text


def check_split_invariant(
    name: str, text: str, tools: Sequence[ToolSpec] | None = None, *, random_trials: int = 25
) -> ParsedOutput:
    """Both modes, every split: streaming folds to the complete parse (well-formed text)."""
    cls = tool_parser_class(name)
    complete = cls.parse(text, tools)
    for pieces in splits(text, random_trials=random_trials):
        events, streamed = run(cls(tools), pieces)
        check_events_well_formed(events)
        assert shape(streamed) == shape(complete), pieces
        _, held = run(cls(tools, incremental=False), pieces)
        assert shape(held) == shape(complete), pieces
    return complete


def check_case(
    name: str,
    text: str,
    content: str,
    calls: Calls,
    tools: Sequence[ToolSpec] | None = None,
) -> ParsedOutput:
    """`text` parses to `content` and `calls` (arguments compared as JSON values and as
    the exact concatenation), in both modes and at every split."""
    complete = check_split_invariant(name, text, tools)
    assert complete.content == content
    assert [(c.name, json.loads(c.arguments)) for c in complete.tool_calls] == calls
    return complete


def check_malformed(
    name: str,
    text: str,
    caplog: pytest.LogCaptureFixture,
    tools: Sequence[ToolSpec] | None = None,
    *,
    content: str | None = None,
    calls: Calls | None = None,
) -> None:
    """A broken call: no exception, a logged warning, and no text lost.

    Complete form: the text comes back as content (`content`, default the whole
    text). Streaming form: the same at every split (it is deterministic), and
    whatever call it had started already is followed by the raw text as content.
    """
    cls = tool_parser_class(name)
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="realtime.chat.tools"):
        complete = cls.parse(text, tools)
    assert complete.content == (text if content is None else content)
    assert [(c.name, json.loads(c.arguments)) for c in complete.tool_calls] == (calls or [])
    assert any(r.levelno == logging.WARNING for r in caplog.records), "no warning was logged"
    _, reference = run(cls(tools), [text])
    for pieces in splits(text, random_trials=10):
        events, streamed = run(cls(tools), pieces)
        check_events_well_formed(events)
        assert shape(streamed) == shape(reference), pieces
        _, held = run(cls(tools, incremental=False), pieces)
        assert shape(held) == shape(complete), pieces
    # Nothing vanished: every non-space character of a broken call reaches the client
    # as content, after any valid argument prefix the stream had already sent.
    visible = "".join(reference.content.split())
    assert "".join(complete.content.split()) == visible


def state_trace(
    name: str, pieces: Sequence[str], tools: Sequence[ToolSpec] | None = None
) -> list[str]:
    """The states a parser went through, in order, ending with the one it rests in
    (repeats of one state collapsed)."""
    parser = tool_parser_class(name)(tools)
    trace: list[str] = []

    def recording(handler: Any) -> Any:
        def run_state(p: ToolParser, buf: str, i: int, final: bool) -> Any:
            state = type(p.initial)(p._state).name
            if not trace or trace[-1] != state:
                trace.append(state)
            return handler(p, buf, i, final)

        return run_state

    parser.states = {s: recording(h) for s, h in type(parser).states.items()}  # type: ignore[misc]
    run(parser, pieces)
    rest = type(parser.initial)(parser._state).name
    return trace if trace and trace[-1] == rest else [*trace, rest]
