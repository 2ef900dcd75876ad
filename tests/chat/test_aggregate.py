"""ChunkAggregator: the non-streaming chat.completion is a fold over the streamed chunks."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

from realtime.chat.aggregate import ChunkAggregator
from realtime.chat.delta import DeltaGenerator
from realtime.dialects.chat.response import ChatCompletion
from realtime.model.generation import FinishReason

USAGE_3 = {
    "prompt_tokens": 4,
    "completion_tokens": 3,
    "total_tokens": 7,
    "prompt_tokens_details": {"cached_tokens": 0},
}


def gen(**kwargs: Any) -> DeltaGenerator:
    options: dict[str, Any] = {
        "model": "echo",
        "prompt_tokens": 4,
        "created": 1_700_000_000,
        "completion_id": "chatcmpl-agg",
        "system_fingerprint": "fp_1",
        "include_usage": True,
    }
    options.update(kwargs)
    return DeltaGenerator(**options)


def fold(chunks: Sequence[dict[str, Any] | None]) -> dict[str, Any]:
    aggregator = ChunkAggregator()
    for chunk in chunks:
        if chunk is not None:
            aggregator.add(chunk)
    result = aggregator.result()
    ChatCompletion.model_validate(result)
    return result


def test_content_finish_and_usage() -> None:
    delta = gen()
    chunks = []
    for token, text in [(1, "Hel"), (2, "lo"), (3, "!")]:
        delta.add_tokens([token])
        chunks.append(delta.content_chunk(text))
    chunks += delta.finish_chunks(FinishReason.EOS)
    assert fold(chunks) == {
        "id": "chatcmpl-agg",
        "object": "chat.completion",
        "created": 1_700_000_000,
        "model": "echo",
        "system_fingerprint": "fp_1",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": "Hello!", "refusal": None},
                "logprobs": None,
                "finish_reason": "stop",
            }
        ],
        "usage": USAGE_3,
    }


@pytest.mark.parametrize(
    ("reason", "name"),
    [(FinishReason.LENGTH, "length"), (FinishReason.STOP, "stop"), (FinishReason.ERROR, "error")],
)
def test_finish_reason(reason: FinishReason, name: str) -> None:
    delta = gen()
    result = fold([delta.content_chunk("x"), *delta.finish_chunks(reason)])
    assert result["choices"][0]["finish_reason"] == name


def test_no_content_gives_empty_string() -> None:
    delta = gen()
    result = fold(delta.finish_chunks(FinishReason.EOS))
    assert result["choices"][0]["message"] == {"role": "assistant", "content": "", "refusal": None}
    assert result["usage"] == {
        "prompt_tokens": 4,
        "completion_tokens": 0,
        "total_tokens": 4,
        "prompt_tokens_details": {"cached_tokens": 0},
    }


def test_without_usage_chunk() -> None:
    delta = gen(include_usage=False)
    result = fold([delta.content_chunk("a"), *delta.finish_chunks(FinishReason.EOS)])
    assert result["usage"] is None


def test_continuous_usage_keeps_the_last() -> None:
    delta = gen(include_usage=False, continuous_usage=True)
    chunks = []
    for token in (1, 2, 3):
        delta.add_tokens([token])
        chunks.append(delta.content_chunk("t"))
    chunks += delta.finish_chunks(FinishReason.EOS)
    assert fold(chunks)["usage"] == USAGE_3


def _lp(token: str, logprob: float) -> dict[str, Any]:
    entry = {"token": token, "logprob": logprob, "bytes": list(token.encode())}
    return {**entry, "top_logprobs": [entry]}


def test_logprobs_are_concatenated() -> None:
    delta = gen(logprobs=True)
    chunks = [
        delta.content_chunk("He", [_lp("He", -0.5)]),
        delta.content_chunk("", [_lp("l", -1.0)]),
        delta.content_chunk("llo", [_lp("lo", -0.1)]),
        *delta.finish_chunks(FinishReason.EOS),
    ]
    result = fold(chunks)
    assert result["choices"][0]["message"]["content"] == "Hello"
    assert result["choices"][0]["logprobs"] == {
        "content": [_lp("He", -0.5), _lp("l", -1.0), _lp("lo", -0.1)],
        "refusal": None,
    }


def test_nvext_is_carried() -> None:
    delta = gen(extra_fields=frozenset({"completion_token_ids"}))
    delta.add_tokens([9, 8])
    chunks = [delta.content_chunk("ab"), *delta.finish_chunks(FinishReason.EOS)]
    result = fold(chunks)
    assert result["nvext"] == {"completion_token_ids": [9, 8]}


def test_no_nvext_key_without_extra_fields() -> None:
    delta = gen()
    assert "nvext" not in fold([delta.content_chunk("a"), *delta.finish_chunks(FinishReason.EOS)])


def test_reasoning_content() -> None:
    delta = gen(include_usage=False)
    first = delta.content_chunk("")
    assert first is not None
    thinking = {**first, "choices": [{**first["choices"][0], "delta": {"reasoning_content": "hm"}}]}
    chunks = [
        first,
        thinking,
        thinking,
        delta.content_chunk("ok"),
        *delta.finish_chunks(FinishReason.EOS),
    ]
    message = fold(chunks)["choices"][0]["message"]
    assert message == {
        "role": "assistant",
        "content": "ok",
        "refusal": None,
        "reasoning_content": "hmhm",
    }


def _tool_chunk(calls: list[dict[str, Any]], finish: str | None = None) -> dict[str, Any]:
    return {
        "id": "chatcmpl-tools",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "echo",
        "system_fingerprint": None,
        "choices": [
            {"index": 0, "delta": {"tool_calls": calls}, "logprobs": None, "finish_reason": finish}
        ],
    }


def test_tool_call_deltas_merge_by_index() -> None:
    first = {
        "id": "chatcmpl-tools",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "echo",
        "system_fingerprint": None,
        "choices": [
            {
                "index": 0,
                "delta": {"role": "assistant", "content": None},
                "logprobs": None,
                "finish_reason": None,
            }
        ],
    }
    chunks = [
        first,
        _tool_chunk(
            [
                {
                    "index": 0,
                    "id": "call_a",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": ""},
                }
            ]
        ),
        _tool_chunk([{"index": 0, "function": {"arguments": '{"ci'}}]),
        _tool_chunk(
            [
                {
                    "index": 1,
                    "id": "call_b",
                    "type": "function",
                    "function": {"name": "get_time", "arguments": "{"},
                }
            ]
        ),
        _tool_chunk([{"index": 0, "function": {"arguments": 'ty": "Paris"}'}}]),
        _tool_chunk([{"index": 1, "function": {"arguments": "}"}}]),
        _tool_chunk([], finish="tool_calls"),
    ]
    result = fold(chunks)
    assert result["choices"][0]["finish_reason"] == "tool_calls"
    assert result["choices"][0]["message"] == {
        "role": "assistant",
        "content": None,
        "refusal": None,
        "tool_calls": [
            {
                "id": "call_a",
                "type": "function",
                "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
            },
            {
                "id": "call_b",
                "type": "function",
                "function": {"name": "get_time", "arguments": "{}"},
            },
        ],
    }


def test_tool_calls_sorted_by_index() -> None:
    chunks = [
        _tool_chunk([{"index": 1, "id": "b", "type": "function", "function": {"name": "g"}}]),
        _tool_chunk([{"index": 0, "id": "a", "type": "function", "function": {"name": "f"}}]),
    ]
    calls = fold(chunks)["choices"][0]["message"]["tool_calls"]
    assert [c["id"] for c in calls] == ["a", "b"]
    assert [c["function"] for c in calls] == [
        {"name": "f", "arguments": ""},
        {"name": "g", "arguments": ""},
    ]


def test_tool_calls_with_content_keep_the_content() -> None:
    text = _tool_chunk([])
    text["choices"][0]["delta"] = {"content": "Let me check."}
    chunks = [
        text,
        _tool_chunk(
            [
                {
                    "index": 0,
                    "id": "a",
                    "type": "function",
                    "function": {"name": "f", "arguments": "{}"},
                }
            ]
        ),
    ]
    message = fold(chunks)["choices"][0]["message"]
    assert message["content"] == "Let me check."
    assert message["tool_calls"][0]["id"] == "a"


def test_no_chunks_raises() -> None:
    with pytest.raises(ValueError, match="no chunks were aggregated"):
        ChunkAggregator().result()


# --- parsed output folded into the message ---


def _events_completion(
    *steps: list[Any], reason: FinishReason = FinishReason.EOS
) -> dict[str, Any]:
    delta = gen()
    chunks: list[dict[str, Any] | None] = []
    for events in steps:
        chunks += delta.event_chunks(events)
    chunks += delta.finish_chunks(reason)
    return fold(chunks)


def test_tool_calls_only_give_null_content() -> None:
    from realtime.protocol.output import ToolCallArguments, ToolCallStart

    result = _events_completion(
        [ToolCallStart(0, "call_a", "get_weather"), ToolCallArguments(0, '{"city": ')],
        [ToolCallArguments(0, '"Paris"}'), ToolCallStart(1, "call_b", "get_time")],
        [ToolCallArguments(1, "{}")],
    )
    choice = result["choices"][0]
    assert choice["finish_reason"] == "tool_calls"
    assert choice["message"] == {
        "role": "assistant",
        "content": None,
        "refusal": None,
        "tool_calls": [
            {
                "id": "call_a",
                "type": "function",
                "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
            },
            {
                "id": "call_b",
                "type": "function",
                "function": {"name": "get_time", "arguments": "{}"},
            },
        ],
    }


def test_reasoning_content_and_calls_together() -> None:
    from realtime.protocol.output import (
        ContentDelta,
        ReasoningDelta,
        ToolCallArguments,
        ToolCallStart,
    )

    result = _events_completion(
        [ReasoningDelta("Need the time.")],
        [ContentDelta("Checking."), ToolCallStart(0, "call_t", "get_time")],
        [ToolCallArguments(0, "{}")],
    )
    message = result["choices"][0]["message"]
    assert message["reasoning_content"] == "Need the time."
    assert message["content"] == "Checking."
    assert message["tool_calls"][0]["function"] == {"name": "get_time", "arguments": "{}"}


def test_reasoning_only_gives_empty_content() -> None:
    from realtime.protocol.output import ReasoningDelta

    message = _events_completion(
        [ReasoningDelta("cut off while thinking")], reason=FinishReason.LENGTH
    )["choices"][0]["message"]
    assert message["content"] == ""
    assert message["reasoning_content"] == "cut off while thinking"


def test_completion_validates_with_the_openai_sdk() -> None:
    from realtime.protocol.output import ContentDelta, ToolCallArguments, ToolCallStart

    sdk = pytest.importorskip("openai.types.chat")
    with_calls = _events_completion(
        [ToolCallStart(0, "call_a", "f"), ToolCallArguments(0, '{"x": 1}')]
    )
    completion = sdk.ChatCompletion.model_validate(with_calls)
    message = completion.choices[0].message
    assert message.content is None
    assert message.tool_calls is not None
    assert message.tool_calls[0].function.arguments == '{"x": 1}'
    plain = sdk.ChatCompletion.model_validate(_events_completion([ContentDelta("hi")]))
    assert plain.choices[0].message.content == "hi"
