"""OutputItems: the pipeline's steps as output items, one open at a time, for every item API."""

from __future__ import annotations

import itertools

from hypothesis import given
from hypothesis import strategies as st

from realtime.pipeline.events import Step
from realtime.pipeline.items import (
    ItemChange,
    ItemClosed,
    ItemDelta,
    ItemOpened,
    OutputItems,
)
from realtime.protocol.output import (
    ContentDelta,
    OutputEvent,
    ReasoningDelta,
    ToolCallArguments,
    ToolCallStart,
    fold_events,
)


def items(**options: object) -> OutputItems:
    counter = itertools.count()
    return OutputItems(lambda kind: f"{kind}_{next(counter)}", **options)  # type: ignore[arg-type]


def parsed(events: list[OutputEvent], logprobs: list[dict[str, object]] | None = None) -> Step:
    return Step([1], "", events, logprobs)


def shape(changes: list[ItemChange]) -> list[tuple[str, ...]]:
    out: list[tuple[str, ...]] = []
    for change in changes:
        if isinstance(change, ItemOpened):
            out.append(("open", change.item.kind))
        elif isinstance(change, ItemDelta):
            out.append(("delta", change.item.kind, change.text))
        else:
            assert isinstance(change, ItemClosed)
            out.append(("close", change.item.kind, change.status))
    return out


def test_plain_text_is_one_message() -> None:
    builder = items()
    changes = builder.step(Step([1], "Hel", None)) + builder.step(Step([2], "lo", None))
    changes += builder.close("completed")
    assert shape(changes) == [
        ("open", "message"),
        ("delta", "message", "Hel"),
        ("delta", "message", "lo"),
        ("close", "message", "completed"),
    ]
    [message] = builder.items
    assert (message.text, message.index, message.id, message.status) == (
        "Hello",
        0,
        "message_0",
        "completed",
    )


def test_one_item_open_at_a_time_in_the_order_the_model_wrote() -> None:
    builder = items()
    changes = builder.step(parsed([ReasoningDelta("think"), ContentDelta("Let me look.")]))
    changes += builder.step(
        parsed([ToolCallStart(0, "call_a", "weather"), ToolCallArguments(0, '{"c')])
    )
    changes += builder.step(
        parsed([ToolCallArguments(0, '": 1}'), ToolCallStart(1, "call_b", "time")])
    )
    changes += builder.close("incomplete")
    assert shape(changes) == [
        ("open", "reasoning"),
        ("delta", "reasoning", "think"),
        ("close", "reasoning", "completed"),
        ("open", "message"),
        ("delta", "message", "Let me look."),
        ("close", "message", "completed"),
        ("open", "function_call"),
        ("delta", "function_call", '{"c'),
        ("delta", "function_call", '": 1}'),
        ("close", "function_call", "completed"),
        ("open", "function_call"),
        ("close", "function_call", "incomplete"),
    ]
    call = builder.items[2]
    assert (call.call_id, call.name, call.text, call.index) == ("call_a", "weather", '{"c": 1}', 2)
    assert builder.reasoning_text == "think"


def test_an_api_without_reasoning_items_keeps_the_message_open_across_reasoning() -> None:
    builder = items(reasoning=False)
    changes = builder.step(parsed([ContentDelta("a"), ReasoningDelta("r"), ContentDelta("b")]))
    assert shape(changes) == [
        ("open", "message"),
        ("delta", "message", "a"),
        ("delta", "message", "b"),
    ]


def test_arguments_of_a_call_that_is_no_longer_open_are_dropped() -> None:
    builder = items()
    builder.step(parsed([ToolCallStart(0, "a", "f"), ToolCallStart(1, "b", "g")]))
    assert builder.step(parsed([ToolCallArguments(0, "late")])) == []


def test_logprobs_ride_on_text_and_wait_while_it_is_held_back() -> None:
    builder = items(logprobs=True)
    first, second, third = ({"token": t} for t in "abc")
    assert builder.step(Step([1], "", None, [first])) == []  # text held back
    [_, delta] = builder.step(Step([2], "xy", None, [second]))
    assert isinstance(delta, ItemDelta) and delta.logprobs == [first, second]
    # a step of reasoning only: its tokens are in no message
    assert shape(builder.step(parsed([ReasoningDelta("r")], [third])))[-1] == (
        "delta",
        "reasoning",
        "r",
    )
    assert builder.items[0].logprobs == [first, second]
    silent = items()
    [_, quiet] = silent.step(Step([1], "x", None, [first]))
    assert isinstance(quiet, ItemDelta) and quiet.logprobs == []


def test_held_back_logprobs_join_the_message_when_it_closes() -> None:
    builder = items(logprobs=True)
    builder.step(Step([1], "x", None, [{"token": "x"}]))
    builder.step(parsed([], [{"token": "y"}]))
    builder.close("completed")
    assert builder.items[0].logprobs == [{"token": "x"}, {"token": "y"}]


_TEXT = st.text(alphabet="ab ", min_size=0, max_size=3)


@st.composite
def event_streams(draw: st.DrawFn) -> list[list[OutputEvent]]:
    """Steps of events as a parser emits them: a call's arguments follow its start, and
    nothing else comes between them (a parser ends one call before anything else)."""
    steps: list[list[OutputEvent]] = []
    calls, in_call = 0, False
    for _ in range(draw(st.integers(0, 8))):
        events: list[OutputEvent] = []
        for _ in range(draw(st.integers(0, 3))):
            kind = draw(st.sampled_from(["content", "reasoning", "start", "args"]))
            if kind == "args":
                if in_call:
                    events.append(ToolCallArguments(calls - 1, draw(_TEXT)))
                continue
            if kind == "content":
                events.append(ContentDelta(draw(_TEXT)))
            elif kind == "reasoning":
                events.append(ReasoningDelta(draw(_TEXT)))
            elif kind == "start":
                events.append(ToolCallStart(calls, f"call_{calls}", "f"))
                calls += 1
            in_call = kind == "start"
        steps.append(events)
    return steps


@given(event_streams())
def test_the_items_hold_exactly_what_the_model_wrote(steps: list[list[OutputEvent]]) -> None:
    builder = items()
    changes: list[ItemChange] = []
    for events in steps:
        changes += builder.step(parsed(events))
    changes += builder.close("completed")
    folded = fold_events([event for events in steps for event in events])
    messages = [i.text for i in builder.items if i.kind == "message"]
    assert "".join(messages) == folded.content
    assert builder.reasoning_text == folded.reasoning
    calls = [(i.call_id, i.name, i.text) for i in builder.items if i.kind == "function_call"]
    assert calls == [(c.id, c.name, c.arguments) for c in folded.tool_calls]
    # every item opens once, closes once, and deltas only while open
    open_now = None
    for change in changes:
        if isinstance(change, ItemOpened):
            assert open_now is None
            open_now = change.item
        elif isinstance(change, ItemDelta):
            assert change.item is open_now and change.text
        else:
            assert change.item is open_now
            open_now = None
    assert open_now is None and all(i.status == "completed" for i in builder.items)
    assert [i.index for i in builder.items] == list(range(len(builder.items)))
