"""DeltaGenerator: engine progress -> chat.completion.chunk dicts shaped as OpenAI's."""

from __future__ import annotations

import re
from typing import Any

import pytest

from realtime.chat.delta import DeltaGenerator, finish_reason_name, new_completion_id
from realtime.dialects.chat.response import ChatCompletionChunk
from realtime.model.generation import FinishReason


def gen(**kwargs: Any) -> DeltaGenerator:
    options: dict[str, Any] = {"model": "echo", "prompt_tokens": 7, "created": 1_700_000_000}
    options.update(kwargs)
    return DeltaGenerator(**options)


def valid(chunk: dict[str, Any] | None) -> dict[str, Any]:
    assert chunk is not None
    ChatCompletionChunk.model_validate(chunk)
    return chunk


def test_completion_id() -> None:
    first, second = new_completion_id(), new_completion_id()
    assert re.fullmatch(r"chatcmpl-[0-9a-f]{32}", first)
    assert first != second
    assert re.fullmatch(r"chatcmpl-[0-9a-f]{32}", DeltaGenerator(model="m", prompt_tokens=0).id)


def test_explicit_id_and_created() -> None:
    delta = gen(completion_id="chatcmpl-fixed")
    assert delta.id == "chatcmpl-fixed"
    assert delta.created == 1_700_000_000


def test_default_created_is_an_int_timestamp() -> None:
    delta = DeltaGenerator(model="m", prompt_tokens=0)
    assert isinstance(delta.created, int)
    assert delta.created > 1_600_000_000


@pytest.mark.parametrize(
    ("reason", "name"),
    [
        (FinishReason.EOS, "stop"),
        (FinishReason.STOP, "stop"),
        (FinishReason.LENGTH, "length"),
        (FinishReason.ERROR, "error"),
        (FinishReason.CANCELLED, "stop"),
    ],
)
def test_finish_reason_name(reason: FinishReason, name: str) -> None:
    assert finish_reason_name(reason) == name
    delta = gen()
    final = delta.finish_chunks(reason)[0]
    assert final["choices"][0]["finish_reason"] == name
    assert delta.finish_reason == name


def test_stream_shape() -> None:
    delta = gen(completion_id="chatcmpl-1", system_fingerprint="fp_abc")
    chunks = [
        valid(delta.content_chunk("Hel")),
        valid(delta.content_chunk("lo")),
        *[valid(c) for c in delta.finish_chunks(FinishReason.EOS)],
    ]
    meta = {
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "created": 1_700_000_000,
        "model": "echo",
        "system_fingerprint": "fp_abc",
    }
    assert chunks == [
        {
            **meta,
            "choices": [
                {
                    "index": 0,
                    "delta": {"role": "assistant", "content": "Hel"},
                    "logprobs": None,
                    "finish_reason": None,
                }
            ],
        },
        {
            **meta,
            "choices": [
                {"index": 0, "delta": {"content": "lo"}, "logprobs": None, "finish_reason": None}
            ],
        },
        {
            **meta,
            "choices": [{"index": 0, "delta": {}, "logprobs": None, "finish_reason": "stop"}],
        },
    ]


def test_role_only_in_the_first_chunk() -> None:
    delta = gen()
    chunks = [delta.content_chunk(t) for t in ["a", "b", "c"]]
    chunks += delta.finish_chunks(FinishReason.LENGTH)
    roles = ["role" in c["choices"][0]["delta"] for c in chunks if c is not None]
    assert roles == [True, False, False, False]


def test_first_chunk_carries_role_even_when_empty() -> None:
    delta = gen()
    chunk = valid(delta.content_chunk(""))
    assert chunk["choices"][0]["delta"] == {"role": "assistant", "content": ""}


def test_empty_content_after_the_first_is_none() -> None:
    delta = gen()
    delta.content_chunk("a")
    assert delta.content_chunk("") is None
    assert delta.content_chunk("", []) is None
    assert delta.content_chunk("", None) is None


def test_finish_without_content_carries_role() -> None:
    delta = gen()
    chunks = delta.finish_chunks(FinishReason.EOS)
    assert len(chunks) == 1
    assert valid(chunks[0])["choices"] == [
        {
            "index": 0,
            "delta": {"role": "assistant", "content": ""},
            "logprobs": None,
            "finish_reason": "stop",
        }
    ]


def test_constant_metadata_across_chunks() -> None:
    delta = gen(system_fingerprint="fp_x", include_usage=True)
    chunks = [delta.content_chunk("a"), delta.content_chunk("b")]
    chunks += delta.finish_chunks(FinishReason.EOS)
    keys = ("id", "object", "created", "model", "system_fingerprint")
    values = {tuple(c[k] for k in keys) for c in chunks if c is not None}
    assert values == {(delta.id, "chat.completion.chunk", 1_700_000_000, "echo", "fp_x")}


def test_no_usage_key_without_include_usage() -> None:
    delta = gen()
    chunk = delta.content_chunk("a")
    assert chunk is not None
    assert "usage" not in chunk
    assert all("usage" not in c for c in delta.finish_chunks(FinishReason.EOS))


def test_include_usage() -> None:
    delta = gen(include_usage=True, cached_tokens=2)
    first = valid(delta.content_chunk("ab"))
    delta.add_tokens([1, 2])
    second = valid(delta.content_chunk("cd"))
    delta.add_tokens([3])
    final, usage_chunk = delta.finish_chunks(FinishReason.EOS)
    assert first["usage"] is None
    assert second["usage"] is None
    assert final["usage"] is None
    assert final["choices"][0]["finish_reason"] == "stop"
    valid(usage_chunk)
    assert usage_chunk["choices"] == []
    assert usage_chunk["id"] == delta.id
    assert usage_chunk["usage"] == {
        "prompt_tokens": 7,
        "completion_tokens": 3,
        "total_tokens": 10,
        "prompt_tokens_details": {"cached_tokens": 2},
    }


def test_set_cached_tokens() -> None:
    delta = gen()
    delta.set_cached_tokens(5)
    assert delta.usage()["prompt_tokens_details"] == {"cached_tokens": 5}


def test_continuous_usage() -> None:
    delta = gen(continuous_usage=True)
    delta.add_tokens([1])
    first = valid(delta.content_chunk("a"))
    delta.add_tokens([2, 3])
    second = valid(delta.content_chunk("b"))
    chunks = delta.finish_chunks(FinishReason.EOS)
    assert first["usage"]["completion_tokens"] == 1
    assert first["usage"]["total_tokens"] == 8
    assert second["usage"]["completion_tokens"] == 3
    assert second["usage"]["total_tokens"] == 10
    # Without include_usage there is no separate usage chunk; the final chunk has the total.
    assert len(chunks) == 1
    assert chunks[0]["usage"] == delta.usage()


def test_continuous_usage_with_include_usage() -> None:
    delta = gen(continuous_usage=True, include_usage=True)
    delta.add_tokens([1, 2])
    chunk = valid(delta.content_chunk("a"))
    final, usage_chunk = delta.finish_chunks(FinishReason.LENGTH)
    assert chunk["usage"]["completion_tokens"] == 2
    assert final["usage"]["completion_tokens"] == 2
    assert usage_chunk["choices"] == []
    assert usage_chunk["usage"] == {
        "prompt_tokens": 7,
        "completion_tokens": 2,
        "total_tokens": 9,
        "prompt_tokens_details": {"cached_tokens": 0},
    }


LOGPROBS = [
    {
        "token": "Hi",
        "logprob": -0.25,
        "bytes": [72, 105],
        "top_logprobs": [{"token": "Hi", "logprob": -0.25, "bytes": [72, 105]}],
    }
]


def test_logprobs_shape() -> None:
    delta = gen(logprobs=True)
    chunk = valid(delta.content_chunk("Hi", LOGPROBS))
    assert chunk["choices"][0]["logprobs"] == {"content": LOGPROBS, "refusal": None}
    # Logprobs of held-back text (stop-string prefix) still go out, with empty content.
    held = valid(delta.content_chunk("", LOGPROBS))
    assert held["choices"][0]["delta"] == {"content": ""}
    assert held["choices"][0]["logprobs"] == {"content": LOGPROBS, "refusal": None}
    final = delta.finish_chunks(FinishReason.EOS)[0]
    assert final["choices"][0]["logprobs"] is None


def test_logprobs_not_requested() -> None:
    delta = gen(logprobs=False)
    chunk = delta.content_chunk("Hi", LOGPROBS)
    assert chunk is not None
    assert chunk["choices"][0]["logprobs"] is None


def test_no_nvext_by_default() -> None:
    delta = gen()
    delta.add_tokens([1, 2])
    assert all("nvext" not in c for c in delta.finish_chunks(FinishReason.EOS))


def test_nvext_completion_token_ids() -> None:
    delta = gen(extra_fields=frozenset({"completion_token_ids"}), include_usage=True)
    delta.add_tokens([11, 12])
    delta.content_chunk("ab")
    delta.add_tokens([13])
    delta.content_chunk("c")
    final, usage_chunk = delta.finish_chunks(FinishReason.EOS)
    assert final["nvext"] == {"completion_token_ids": [11, 12, 13]}
    assert "nvext" not in usage_chunk


def test_nvext_engine_data() -> None:
    delta = gen(extra_fields=frozenset({"completion_token_ids", "engine_data"}), logprobs=True)
    delta.add_tokens([5])
    chunk = delta.content_chunk("Hi", LOGPROBS)
    assert chunk is not None
    assert "nvext" not in chunk
    final = delta.finish_chunks(FinishReason.STOP)[0]
    assert final["nvext"] == {
        "completion_token_ids": [5],
        "engine_data": {"completion_token_ids": [5], "completion_logprobs": LOGPROBS},
    }


def test_nvext_engine_data_without_logprobs() -> None:
    delta = gen(extra_fields=frozenset({"engine_data"}))
    delta.add_tokens([5, 6])
    delta.content_chunk("ab")
    final = delta.finish_chunks(FinishReason.EOS)[0]
    assert final["nvext"] == {
        "engine_data": {"completion_token_ids": [5, 6], "completion_logprobs": None}
    }


# --- parsed output: reasoning and tool calls ---


def _choice(chunk: dict[str, Any]) -> dict[str, Any]:
    choice: dict[str, Any] = valid(chunk)["choices"][0]
    return choice


def test_tool_call_shape_matches_openai() -> None:
    from realtime.protocol.output import ToolCallArguments, ToolCallStart

    delta = gen()
    first, args = delta.event_chunks(
        [ToolCallStart(0, "call_abc", "get_weather"), ToolCallArguments(0, '{"city"')]
    )
    assert _choice(first)["delta"] == {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "index": 0,
                "id": "call_abc",
                "type": "function",
                "function": {"name": "get_weather", "arguments": ""},
            }
        ],
    }
    assert _choice(args)["delta"] == {
        "tool_calls": [{"index": 0, "function": {"arguments": '{"city"'}}]
    }
    (more,) = delta.event_chunks([ToolCallArguments(0, ': "Oslo"'), ToolCallArguments(0, "}")])
    assert _choice(more)["delta"] == {
        "tool_calls": [{"index": 0, "function": {"arguments": ': "Oslo"}'}}]
    }
    final = delta.finish_chunks(FinishReason.EOS)[0]
    assert _choice(final) == {
        "index": 0,
        "delta": {},
        "logprobs": None,
        "finish_reason": "tool_calls",
    }
    assert delta.finish_reason == "tool_calls"
    assert delta.tool_calls_sent == 1


@pytest.mark.parametrize(
    ("reason", "name"),
    [
        (FinishReason.STOP, "tool_calls"),
        (FinishReason.LENGTH, "length"),
        (FinishReason.ERROR, "error"),
        (FinishReason.CANCELLED, "stop"),
    ],
)
def test_finish_reason_after_tool_calls(reason: FinishReason, name: str) -> None:
    from realtime.protocol.output import ToolCallStart

    delta = gen()
    delta.event_chunks([ToolCallStart(0, "call_x", "f")])
    assert delta.finish_chunks(reason)[0]["choices"][0]["finish_reason"] == name


def test_reasoning_then_content() -> None:
    from realtime.protocol.output import ContentDelta, ReasoningDelta

    delta = gen()
    chunks = delta.event_chunks([ReasoningDelta("Hm"), ReasoningDelta("m."), ContentDelta("Yes")])
    assert [_choice(c)["delta"] for c in chunks] == [
        {"role": "assistant", "content": None, "reasoning_content": "Hmm."},
        {"content": "Yes"},
    ]
    assert delta.finish_chunks(FinishReason.EOS)[0]["choices"][0]["finish_reason"] == "stop"


def test_event_chunks_send_nothing_empty() -> None:
    from realtime.protocol.output import ContentDelta, ReasoningDelta, ToolCallArguments

    delta = gen()
    (role,) = delta.event_chunks([])
    assert _choice(role)["delta"] == {"role": "assistant", "content": ""}
    assert delta.event_chunks([]) == []
    assert (
        delta.event_chunks([ContentDelta(""), ReasoningDelta(""), ToolCallArguments(0, "")]) == []
    )
    assert delta.reasoning_chunk("") is None
    assert delta.tool_call_arguments_chunk(0, "") is None


def test_event_chunks_put_logprobs_on_the_first_chunk() -> None:
    from realtime.protocol.output import ContentDelta, ToolCallStart

    delta = gen(logprobs=True, extra_fields=frozenset({"engine_data"}))
    content, start = delta.event_chunks(
        [ContentDelta("Hi"), ToolCallStart(0, "call_1", "f")], LOGPROBS
    )
    assert _choice(content)["logprobs"] == {"content": LOGPROBS, "refusal": None}
    assert _choice(start)["logprobs"] == {"content": None, "refusal": None}
    # Held-back text: its logprobs still go out, on an empty content delta.
    (held,) = delta.event_chunks([], LOGPROBS)
    assert _choice(held)["delta"] == {"content": ""}
    assert _choice(held)["logprobs"] == {"content": LOGPROBS, "refusal": None}
    nvext = delta.finish_chunks(FinishReason.EOS)[0]["nvext"]
    assert nvext["engine_data"]["completion_logprobs"] == LOGPROBS + LOGPROBS


def test_event_chunks_with_content_only_equal_content_chunk() -> None:
    from realtime.protocol.output import ContentDelta

    a, b = gen(completion_id="chatcmpl-x"), gen(completion_id="chatcmpl-x")
    for text in ["Hel", "lo"]:
        assert a.event_chunks([ContentDelta(text)]) == [b.content_chunk(text)]


def test_chunks_validate_with_the_openai_sdk() -> None:
    from realtime.protocol.output import (
        ContentDelta,
        ReasoningDelta,
        ToolCallArguments,
        ToolCallStart,
    )

    sdk = pytest.importorskip("openai.types.chat")
    delta = gen(include_usage=True, logprobs=True)
    chunks = delta.event_chunks([ReasoningDelta("think")], LOGPROBS)
    chunks += delta.event_chunks([ContentDelta("Sure.")])
    chunks += delta.event_chunks([ToolCallStart(0, "call_1", "f"), ToolCallArguments(0, "{}")])
    chunks += delta.event_chunks([ToolCallStart(1, "call_2", "g"), ToolCallArguments(1, "{}")])
    chunks += delta.finish_chunks(FinishReason.EOS)
    parsed = [sdk.ChatCompletionChunk.model_validate(valid(c)) for c in chunks]
    assert parsed[0].choices[0].delta.role == "assistant"
    calls = [
        c.choices[0].delta.tool_calls for c in parsed if c.choices and c.choices[0].delta.tool_calls
    ]
    assert [call[0].id for call in calls if call[0].id] == ["call_1", "call_2"]
    assert parsed[-2].choices[0].finish_reason == "tool_calls"
    assert parsed[-1].usage is not None
