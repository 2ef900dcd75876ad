"""ChatOutputParser: reasoning first, tools on the content only, any split, into chunks."""

from __future__ import annotations

import json
from typing import Any

import pytest

from realtime.chat.aggregate import ChunkAggregator
from realtime.chat.delta import DeltaGenerator
from realtime.chat.tools.output import ChatOutputParser, build_output_parser
from realtime.dialects.chat.response import ChatCompletion, ChatCompletionChunk
from realtime.model.generation import FinishReason
from realtime.protocol.output import OutputEvent, fold_events
from tests.chat.tools.harness import splits

TOOLS = [
    {"type": "function", "function": {"name": "get_weather"}},
    {"type": "function", "function": {"name": "get_time"}},
]
QWEN3_OUTPUT = (
    "<think>\nThe user wants the weather. I could write <tool_call> here but I am still"
    " thinking.\n</think>\n\nLet me check.\n"
    '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Zürich"}}\n</tool_call>\n'
    '<tool_call>\n{"name": "get_time", "arguments": {"tz": "Europe/Zurich"}}\n</tool_call>'
)


def qwen3() -> ChatOutputParser:
    return build_output_parser(tool_parser="hermes", reasoning_parser="qwen3", tools=TOOLS)


def feed_all(parser: ChatOutputParser, pieces: list[str]) -> list[OutputEvent]:
    events: list[OutputEvent] = []
    for piece in pieces:
        events += parser.feed(piece)
    return events + parser.finish()


def test_reasoning_runs_before_tools_at_any_split() -> None:
    expected = fold_events(feed_all(qwen3(), [QWEN3_OUTPUT]))
    assert expected.reasoning == (
        "The user wants the weather. I could write <tool_call> here but I am still thinking."
    )
    assert expected.content == "Let me check."
    assert [(c.name, json.loads(c.arguments)) for c in expected.tool_calls] == [
        ("get_weather", {"city": "Zürich"}),
        ("get_time", {"tz": "Europe/Zurich"}),
    ]
    for pieces in splits(QWEN3_OUTPUT, random_trials=10):
        folded = fold_events(feed_all(qwen3(), pieces))
        assert (folded.reasoning, folded.content) == (expected.reasoning, expected.content)
        assert [(c.name, c.arguments) for c in folded.tool_calls] == [
            (c.name, c.arguments) for c in expected.tool_calls
        ]


def test_no_parsers_pass_text_through() -> None:
    parser = build_output_parser()
    assert not parser.active
    text = " <think>x</think> <tool_call>{}</tool_call> "
    assert fold_events(feed_all(parser, [text[:5], text[5:]])).content == text


def test_markers_of_the_configured_parsers() -> None:
    parser = build_output_parser(tool_parser="mistral", reasoning_parser="mistral", tools=TOOLS)
    assert parser.markers == ("[THINK]", "[/THINK]", "[TOOL_CALLS]", "[ARGS]", "[CALL_ID]")


def test_tool_parser_needs_tools_in_the_request() -> None:
    parser = build_output_parser(tool_parser="hermes", reasoning_parser="qwen3", tools=[])
    assert parser.tools is None
    assert parser.reasoning is not None


def test_enable_thinking_false_from_template_kwargs() -> None:
    parser = build_output_parser(
        reasoning_parser="qwen3", chat_template_kwargs={"enable_thinking": False}
    )
    assert fold_events(feed_all(parser, ["<think>a</think>b"])).content == "<think>a</think>b"


def stream_chunks(text: str, pieces: list[str], **delta_options: Any) -> list[dict[str, Any]]:
    """What the pipeline does per step: parse the piece, turn the events into chunks."""
    parser = qwen3()
    delta = DeltaGenerator(model="m", prompt_tokens=3, created=1, **delta_options)
    chunks: list[dict[str, Any]] = []
    for piece in pieces:
        delta.add_tokens([0])
        chunks += delta.event_chunks(parser.feed(piece))
    chunks += delta.event_chunks(parser.finish())
    chunks += delta.finish_chunks(FinishReason.EOS)
    return chunks


def test_chunks_validate_and_fold_to_the_message() -> None:
    chunks = stream_chunks(QWEN3_OUTPUT, list(QWEN3_OUTPUT), include_usage=True)
    for chunk in chunks:
        ChatCompletionChunk.model_validate(chunk)
        for choice in chunk["choices"]:
            assert choice["delta"] or choice["finish_reason"], "an empty delta was sent"
    aggregator = ChunkAggregator()
    for chunk in chunks:
        aggregator.add(chunk)
    completion = aggregator.result()
    ChatCompletion.model_validate(completion)
    choice = completion["choices"][0]
    assert choice["finish_reason"] == "tool_calls"
    message = choice["message"]
    assert message["content"] == "Let me check."
    assert message["reasoning_content"].startswith("The user wants the weather.")
    assert [json.loads(c["function"]["arguments"]) for c in message["tool_calls"]] == [
        {"city": "Zürich"},
        {"tz": "Europe/Zurich"},
    ]


@pytest.mark.parametrize("split", [1, 7, 40])
def test_openai_sdk_accumulates_a_streamed_call(split: int) -> None:
    openai_types = pytest.importorskip("openai.types.chat")
    pieces = [QWEN3_OUTPUT[i : i + split] for i in range(0, len(QWEN3_OUTPUT), split)]
    chunks = stream_chunks(QWEN3_OUTPUT, pieces)
    arguments: dict[int, str] = {}
    names: dict[int, str] = {}
    ids: dict[int, str] = {}
    for raw in chunks:
        chunk = openai_types.ChatCompletionChunk.model_validate(raw)
        for call in chunk.choices[0].delta.tool_calls or ():
            if call.id is not None:
                ids[call.index] = call.id
                assert call.type == "function"
                assert call.function is not None and call.function.name
                assert call.function.arguments == ""
                names[call.index] = call.function.name
            else:
                assert call.function is not None and call.function.name is None
            arguments[call.index] = arguments.get(call.index, "") + (call.function.arguments or "")
    assert names == {0: "get_weather", 1: "get_time"}
    assert all(i.startswith("call_") for i in ids.values())
    assert json.loads(arguments[0]) == {"city": "Zürich"}
    assert json.loads(arguments[1]) == {"tz": "Europe/Zurich"}


def test_pipeline_order_with_stop_strings() -> None:
    """The order the pipeline follows each step: stops, then parsing, then chunks; at the
    end: flush the stop matcher into the parser, finish the parser, then finish chunks."""
    from realtime.chat.stops import StopMatcher

    text = 'Sure.<tool_call>{"name": "get_time", "arguments": {"tz": "UTC"}}</tool_call>STOP junk'
    pieces = [text[i : i + 3] for i in range(0, len(text), 3)]
    parser = build_output_parser(tool_parser="hermes", tools=TOOLS, tool_choice="required")
    stops = StopMatcher(["STOP"])
    delta = DeltaGenerator(model="m", prompt_tokens=1, created=1)
    chunks: list[dict[str, Any]] = []
    finish: FinishReason | None = None
    for piece in pieces:
        emit = stops.feed(piece)
        if stops.matched is not None:
            finish = FinishReason.STOP
        events = parser.feed(emit)
        if finish is not None:
            events += parser.finish()
        chunks += delta.event_chunks(events)
        if finish is not None:
            break
    assert parser.tool_choice_violation() is None
    chunks += delta.finish_chunks(FinishReason.STOP)
    aggregator = ChunkAggregator()
    for chunk in chunks:
        ChatCompletionChunk.model_validate(chunk)
        aggregator.add(chunk)
    message = aggregator.result()["choices"][0]
    assert message["finish_reason"] == "tool_calls"
    assert message["message"]["content"] == "Sure."
    assert message["message"]["tool_calls"][0]["function"] == {
        "name": "get_time",
        "arguments": '{"tz": "UTC"}',
    }


def test_truncated_call_in_a_non_streaming_request(caplog: pytest.LogCaptureFixture) -> None:
    """incremental=False (for stream: false): a call cut off by max_tokens is content."""
    text = 'Sure.<tool_call>{"name": "get_time", "arguments": {"tz": "U'
    parser = build_output_parser(tool_parser="hermes", tools=TOOLS, incremental=False)
    folded = fold_events(feed_all(parser, [text[:20], text[20:]]))
    assert folded.content == text
    assert not folded.tool_calls
    assert "the output ended inside a tool call" in caplog.text
    streaming = build_output_parser(tool_parser="hermes", tools=TOOLS)
    folded = fold_events(feed_all(streaming, [text[:20], text[20:]]))
    assert [(c.name, c.arguments) for c in folded.tool_calls] == [("get_time", '{"tz": "U')]
    assert folded.content == text  # the raw call follows as content: nothing vanishes
