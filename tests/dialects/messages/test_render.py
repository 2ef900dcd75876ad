"""The pipeline's typed output as Anthropic's events and `Message` (no engine, no socket)."""

from __future__ import annotations

from typing import Any

from realtime.dialects.messages.render import MessageBlocks, signature, tool_input
from realtime.model.generation import FinishReason
from realtime.pipeline.events import Finish, Step, Usage
from realtime.protocol.output import (
    ContentDelta,
    OutputEvent,
    ReasoningDelta,
    ToolCallArguments,
    ToolCallStart,
)


def step(*events: OutputEvent, cached: int | None = None) -> Step:
    return Step([1] * len(events), "", list(events), None, cached)


def render(
    steps: list[Step], reason: FinishReason, stop: str | None = None
) -> tuple[list[dict[str, Any]], MessageBlocks]:
    usage = Usage(prompt_tokens=10)
    blocks = MessageBlocks("msg_1", "m", usage)
    events: list[dict[str, Any]] = []
    for item in steps:
        usage.completion_tokens += len(item.token_ids)
        events += blocks.render(item)
    events += blocks.render(Finish(reason, usage), stop)
    return events, blocks


def test_every_block_kind_in_order() -> None:
    events, blocks = render(
        [
            step(ReasoningDelta("Think"), cached=4),
            step(ReasoningDelta("ing."), ContentDelta("Calling.")),
            step(ToolCallStart(0, "call_1", "Bash"), ToolCallArguments(0, '{"command":')),
            step(ToolCallArguments(0, ' "ls"}')),
        ],
        FinishReason.EOS,
    )
    shape = [
        (e["type"], e.get("index"), (e.get("delta") or e.get("content_block") or {}).get("type"))
        for e in events
    ]
    assert shape == [
        ("message_start", None, None),
        ("content_block_start", 0, "thinking"),
        ("content_block_delta", 0, "thinking_delta"),
        ("content_block_delta", 0, "thinking_delta"),
        ("content_block_delta", 0, "signature_delta"),
        ("content_block_stop", 0, None),
        ("content_block_start", 1, "text"),
        ("content_block_delta", 1, "text_delta"),
        ("content_block_stop", 1, None),
        ("content_block_start", 2, "tool_use"),
        ("content_block_delta", 2, "input_json_delta"),
        ("content_block_delta", 2, "input_json_delta"),
        ("content_block_stop", 2, None),
        ("message_delta", None, None),
        ("message_stop", None, None),
    ]
    start = events[0]["message"]
    assert start["usage"] == {
        "input_tokens": 6,
        "output_tokens": 1,  # the first step's token: message_start goes out with it
        "cache_read_input_tokens": 4,
        "cache_creation_input_tokens": 0,
    }
    assert start["content"] == [] and start["stop_reason"] is None
    assert events[9]["content_block"] == {
        "type": "tool_use",
        "id": "call_1",
        "name": "Bash",
        "input": {},
    }
    delta = events[-2]
    assert delta["delta"] == {"stop_reason": "tool_use", "stop_sequence": None}
    assert delta["usage"]["output_tokens"] == 6
    message = blocks.message()
    assert message["content"] == [
        {"type": "thinking", "thinking": "Thinking.", "signature": signature("Thinking.")},
        {"type": "text", "text": "Calling."},
        {"type": "tool_use", "id": "call_1", "name": "Bash", "input": {"command": "ls"}},
    ]
    assert message["stop_reason"] == "tool_use"


def test_stop_reasons() -> None:
    plain = [step(ContentDelta("hi"))]
    assert render(plain, FinishReason.EOS)[1].message()["stop_reason"] == "end_turn"
    assert render(plain, FinishReason.STOP)[1].message()["stop_reason"] == "end_turn"
    stopped = render(plain, FinishReason.STOP, "END")[1].message()
    assert (stopped["stop_reason"], stopped["stop_sequence"]) == ("stop_sequence", "END")
    # a stop string noted but the answer ended by length: max_tokens, no sequence
    cut = render(plain, FinishReason.LENGTH, "END")[1].message()
    assert (cut["stop_reason"], cut["stop_sequence"]) == ("max_tokens", None)


def test_an_answer_without_a_parser_is_all_text() -> None:
    events, blocks = render([Step([1], "Hel", None), Step([2], "lo", None)], FinishReason.EOS)
    texts = [e["delta"]["text"] for e in events if e["type"] == "content_block_delta"]
    assert texts == ["Hel", "lo"]
    assert blocks.message()["content"] == [{"type": "text", "text": "Hello"}]


def test_an_error_finish_leaves_the_error_to_the_transport() -> None:
    events, _ = render([step(ContentDelta("x"))], FinishReason.ERROR)
    assert [e["type"] for e in events][-1] == "content_block_delta"


def test_tool_input_is_always_an_object() -> None:
    assert tool_input('{"a": 1}') == {"a": 1}
    assert tool_input("") == {} and tool_input("[1]") == {} and tool_input("{not json") == {}
