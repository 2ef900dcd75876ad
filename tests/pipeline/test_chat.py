"""ChatPipeline at unit level: an EchoEngine, no sockets."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import re
from contextlib import aclosing
from typing import Any

import pytest

from realtime.dialects.chat.request import parse_chat_request
from realtime.dialects.chat.response import ChatCompletion, ChatCompletionChunk
from realtime.dialects.chat.run import ChatRun
from realtime.engine.echo import EchoEngine, EchoTokenizer
from realtime.model.info import ModelInfo
from realtime.model.template import ChatTemplate
from realtime.pipeline import ChatPipeline
from realtime.protocol.errors import (
    EngineError,
    EngineUnavailableError,
    InvalidRequestError,
    ModelNotFoundError,
    PromptTooLongError,
    ToolChoiceNotSatisfiedError,
    UnsupportedFeatureError,
)

TEXT = "Hello world, this is the echo model speaking"


def make_pipeline(max_tokens_policy: str = "clamp", **options: Any) -> ChatPipeline:
    engine = EchoEngine(**options)
    asyncio.run(engine.start())
    return ChatPipeline(engine, max_tokens_policy=max_tokens_policy)


def req(content: str = TEXT, **fields: Any) -> Any:
    body: dict[str, Any] = {"model": "echo", "messages": [{"role": "user", "content": content}]}
    body.update(fields)
    return parse_chat_request(body)


async def _collect(pipeline: ChatPipeline, prepared: ChatRun) -> list[dict[str, Any]]:
    return [chunk async for chunk in prepared.stream()]


def stream(pipeline: ChatPipeline, prepared: ChatRun) -> list[dict[str, Any]]:
    chunks = asyncio.run(_collect(pipeline, prepared))
    for chunk in chunks:
        ChatCompletionChunk.model_validate(chunk)
    return chunks


def content(chunks: list[dict[str, Any]]) -> str:
    return "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"])


def finish(chunks: list[dict[str, Any]]) -> list[str]:
    return [
        c["choices"][0]["finish_reason"]
        for c in chunks
        if c["choices"] and c["choices"][0]["finish_reason"] is not None
    ]


@pytest.fixture
def pipeline() -> ChatPipeline:
    return make_pipeline()


def engine_of(pipeline: ChatPipeline) -> EchoEngine:
    engine = pipeline.engine
    assert isinstance(engine, EchoEngine)
    return engine


# --- prepare ---


def test_identity(pipeline: ChatPipeline) -> None:
    assert pipeline.model_name == "echo"
    assert re.fullmatch(r"fp_[0-9a-f]{10}", pipeline.system_fingerprint)
    assert make_pipeline().system_fingerprint == pipeline.system_fingerprint


def test_prepare_builds_the_engine_request(pipeline: ChatPipeline) -> None:
    request = req(
        max_tokens=5,
        temperature=0.3,
        top_p=0.8,
        seed=7,
        stop_token_ids=[1],
        logprobs=True,
        top_logprobs=2,
        logit_bias={"17": -5},
        cache_salt="s",
        nvext={"top_k": 5, "min_p": 0.2, "repetition_penalty": 1.3, "ignore_eos": True},
    )
    prepared = ChatRun.prepare(pipeline, request)
    er = prepared.engine_request
    assert er.prompt_token_ids == EchoTokenizer().encode(TEXT)
    assert er.request_id == prepared.delta.id
    assert er.request_id.startswith("chatcmpl-")
    assert er.stop.max_tokens == 5
    assert er.stop.stop_token_ids == [1]
    assert er.stop.ignore_eos is True
    assert er.logprobs == 2
    assert er.cache_salt == "s"
    assert er.sampling.temperature == 0.3
    assert er.sampling.top_p == 0.8
    assert er.sampling.seed == 7
    assert er.sampling.top_k == 5
    assert er.sampling.min_p == 0.2
    assert er.sampling.repetition_penalty == 1.3
    assert er.sampling.logit_bias == {17: -5.0}
    assert prepared.prepared.request.logprobs == 2
    assert prepared.delta.prompt_tokens == len(er.prompt_token_ids)
    assert prepared.delta.system_fingerprint == pipeline.system_fingerprint


def test_default_max_tokens_is_the_room_left(pipeline: ChatPipeline) -> None:
    prepared = ChatRun.prepare(pipeline, req("a b c"))
    assert prepared.engine_request.stop.max_tokens == 32768 - 3
    assert prepared.engine_request.logprobs is None


def test_nvext_token_data_skips_templating(pipeline: ChatPipeline) -> None:
    prepared = ChatRun.prepare(pipeline, req(nvext={"token_data": [0x0161, 0x0162]}))
    assert prepared.engine_request.prompt_token_ids == [0x0161, 0x0162]
    assert content(stream(pipeline, prepared)) == "ab"


def test_unknown_model(pipeline: ChatPipeline) -> None:
    with pytest.raises(ModelNotFoundError) as info:
        ChatRun.prepare(pipeline, req(model="gpt-4o"))
    assert info.value.param == "model"
    assert info.value.code == "model_not_found"
    assert info.value.status == 404
    assert info.value.message == "The model `gpt-4o` does not exist. Available: echo"


@pytest.mark.parametrize(
    ("fields", "param"),
    [
        ({"n": 2}, "n"),
        ({"response_format": {"type": "json_object"}}, "response_format"),
        (
            {"response_format": {"type": "json_schema", "json_schema": {"name": "x"}}},
            "response_format",
        ),
        ({"modalities": ["text", "audio"]}, "modalities"),
        ({"audio": {"voice": "alloy"}}, "audio"),
        ({"functions": [{"name": "f"}]}, "functions"),
    ],
)
def test_unsupported_features(pipeline: ChatPipeline, fields: dict[str, Any], param: str) -> None:
    with pytest.raises(UnsupportedFeatureError) as info:
        ChatRun.prepare(pipeline, req(**fields))
    assert info.value.param == param
    assert info.value.code == "unsupported"
    assert info.value.status == 400


@pytest.mark.parametrize(
    "fields",
    [
        {"n": 1},
        {"response_format": {"type": "text"}},
        {"tool_choice": "auto"},
        {"tool_choice": "none"},
        {"modalities": ["text"]},
    ],
)
def test_supported_variants_pass(pipeline: ChatPipeline, fields: dict[str, Any]) -> None:
    ChatRun.prepare(pipeline, req(**fields))


def test_engine_not_ready() -> None:
    pipeline = ChatPipeline(EchoEngine())  # never started
    with pytest.raises(EngineUnavailableError):
        ChatRun.prepare(pipeline, req())


def test_prompt_beyond_context() -> None:
    pipeline = make_pipeline(context_length=5)
    with pytest.raises(InvalidRequestError) as info:
        ChatRun.prepare(pipeline, req("one two three four five"))  # 5 tokens: no room at all
    assert info.value.code == "context_length_exceeded"
    assert info.value.param == "messages"
    assert info.value.message == "the prompt is 5 tokens; the model's context is 5 tokens"


def test_max_tokens_beyond_the_room_left_is_cut_to_it_by_default() -> None:
    pipeline = make_pipeline(context_length=5)
    prepared = ChatRun.prepare(pipeline, req("one two three", max_tokens=32000))
    assert prepared.engine_request.stop.max_tokens == 2


def test_max_tokens_beyond_the_room_left_under_the_error_policy() -> None:
    pipeline = make_pipeline("error", context_length=5)
    with pytest.raises(InvalidRequestError) as info:
        ChatRun.prepare(pipeline, req("one two three", max_tokens=3))
    assert info.value.code == "context_length_exceeded"
    assert info.value.param == "max_tokens"
    assert info.value.message == (
        "max_tokens is 3 but only 2 tokens fit after the 3-token prompt (context 5)"
    )
    # Exactly the room left is fine.
    prepared = ChatRun.prepare(pipeline, req("one two three", max_completion_tokens=2))
    assert prepared.engine_request.stop.max_tokens == 2


def test_bad_logit_bias_key(pipeline: ChatPipeline) -> None:
    with pytest.raises(InvalidRequestError) as info:
        ChatRun.prepare(pipeline, req(logit_bias={"hello": 1}))
    assert info.value.param == "logit_bias"


class _StrictTemplateEngine(EchoEngine):
    """The echo model with a template that rejects the conversation, as many models' do."""

    @property
    def info(self) -> ModelInfo:
        return dataclasses.replace(
            super().info, chat_template=ChatTemplate("{{ raise_exception('no system role') }}")
        )


def test_template_error_surfaces_as_invalid_request() -> None:
    engine = _StrictTemplateEngine()
    asyncio.run(engine.start())
    with pytest.raises(InvalidRequestError) as info:
        ChatRun.prepare(ChatPipeline(engine), req())
    assert info.value.param == "messages"
    assert info.value.message == "chat template error: no system role"


@pytest.mark.parametrize("key", ["add_generation_prompt", "tools", "messages"])
def test_chat_template_kwargs_cannot_crash_prepare(pipeline: ChatPipeline, key: str) -> None:
    """prepare() raises only RealtimeErrors: client input must never become a 500."""
    request = req(chat_template_kwargs={key: False})
    try:
        ChatRun.prepare(pipeline, request)
    except InvalidRequestError as exc:
        assert exc.param == "chat_template_kwargs"


# --- stream ---


def test_stream_echoes_the_prompt(pipeline: ChatPipeline) -> None:
    prepared = ChatRun.prepare(pipeline, req())
    chunks = stream(pipeline, prepared)
    assert content(chunks) == TEXT
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    assert finish(chunks) == ["stop"]
    assert chunks[-1]["choices"][0]["delta"] == {}
    assert {c["id"] for c in chunks} == {prepared.delta.id}
    n_tokens = len(EchoTokenizer().encode(TEXT))
    assert len(chunks) == n_tokens + 1
    engine = engine_of(pipeline)
    assert engine.stats.tokens_generated == n_tokens
    assert engine.stats.requests_finished == 1
    assert engine.stats.requests_cancelled == 0
    assert engine.stats.active == 0


@pytest.mark.parametrize(
    "text",
    [
        "",
        "a",
        "  spaced   out  ",
        "line\nbreaks\n\n",
        "caf\u00e9 \u4e2d\u6587 \U0001f389\U0001f389 e\u0301",
    ],
)
def test_stream_round_trips_any_text(pipeline: ChatPipeline, text: str) -> None:
    assert content(stream(pipeline, ChatRun.prepare(pipeline, req(text)))) == text


def test_content_parts_reach_the_model_one_per_line(pipeline: ChatPipeline) -> None:
    request = parse_chat_request(
        {
            "model": "echo",
            "messages": [
                {
                    "role": "user",
                    "content": [
                        {"type": "text", "text": "part a"},
                        {"type": "text", "text": "part b"},
                    ],
                }
            ],
        }
    )
    assert content(stream(pipeline, ChatRun.prepare(pipeline, request))) == "part a\npart b"


def test_non_text_content_parts_are_rejected_not_ignored(pipeline: ChatPipeline) -> None:
    request = parse_chat_request(
        {
            "model": "echo",
            "messages": [
                {"role": "system", "content": "s"},
                {
                    "role": "user",
                    "content": [
                        {"type": "text", "text": "look "},
                        {"type": "image_url", "image_url": {"url": "data:,"}},
                    ],
                },
            ],
        }
    )
    with pytest.raises(UnsupportedFeatureError) as info:
        ChatRun.prepare(pipeline, request)
    assert info.value.param == "messages.1.content"
    assert "'image_url'" in info.value.message


def test_max_tokens_finishes_with_length(pipeline: ChatPipeline) -> None:
    chunks = stream(pipeline, ChatRun.prepare(pipeline, req(max_tokens=2)))
    assert content(chunks) == "Hello world"
    assert finish(chunks) == ["length"]
    assert engine_of(pipeline).stats.tokens_generated == 2


def test_include_usage(pipeline: ChatPipeline) -> None:
    chunks = stream(
        pipeline,
        ChatRun.prepare(
            pipeline, req("a b c", stream=True, stream_options={"include_usage": True})
        ),
    )
    assert [c["usage"] for c in chunks[:-1]] == [None] * (len(chunks) - 1)
    assert chunks[-1]["choices"] == []
    assert chunks[-1]["usage"] == {
        "prompt_tokens": 3,
        "completion_tokens": 3,
        "total_tokens": 6,
        "prompt_tokens_details": {"cached_tokens": 0},
    }


def test_no_usage_when_not_asked(pipeline: ChatPipeline) -> None:
    chunks = stream(pipeline, ChatRun.prepare(pipeline, req("a b c")))
    assert all("usage" not in c for c in chunks)


@pytest.mark.parametrize(
    ("stop", "expected"),
    [
        ("lo w", "Hel"),  # across the "Hello" / " world" token boundary
        ("world, this", "Hello "),  # spans " world", "," and " this"
        (["speaking", "this"], "Hello world, "),  # earliest wins
        ("o", "Hell"),
        ("Hello", ""),
        ("not there", TEXT),
    ],
)
def test_stop_strings_across_token_boundaries(
    pipeline: ChatPipeline, stop: Any, expected: str
) -> None:
    chunks = stream(pipeline, ChatRun.prepare(pipeline, req(stop=stop)))
    assert content(chunks) == expected
    assert finish(chunks) == ["stop"]


def test_stop_string_stops_generation(pipeline: ChatPipeline) -> None:
    stream(pipeline, ChatRun.prepare(pipeline, req(stop="lo w")))
    assert engine_of(pipeline).stats.tokens_generated == 2  # "Hello", " world"


def test_stop_string_included(pipeline: ChatPipeline) -> None:
    chunks = stream(
        pipeline, ChatRun.prepare(pipeline, req(stop="lo w", include_stop_str_in_output=True))
    )
    assert content(chunks) == "Hello w"


def test_stop_string_prefix_is_flushed_at_the_end(pipeline: ChatPipeline) -> None:
    chunks = stream(pipeline, ChatRun.prepare(pipeline, req("the end", stop="end!")))
    assert content(chunks) == "the end"
    assert finish(chunks) == ["stop"]


def test_stop_string_prefix_is_flushed_at_length(pipeline: ChatPipeline) -> None:
    chunks = stream(
        pipeline, ChatRun.prepare(pipeline, req("the end of it", stop="end!", max_tokens=2))
    )
    assert content(chunks) == "the end"
    assert finish(chunks) == ["length"]


def test_stop_token_ids(pipeline: ChatPipeline) -> None:
    stop_id = EchoTokenizer().encode(" world")[0]
    prepared = ChatRun.prepare(pipeline, req(stop_token_ids=[stop_id]))
    chunks = stream(pipeline, prepared)
    # The stop token counts as generated but its text is never shown (as in vLLM).
    assert content(chunks) == "Hello"
    assert finish(chunks) == ["stop"]
    assert prepared.delta.completion_tokens == 2


def test_min_tokens_keeps_stop_strings_from_ending_a_short_answer(pipeline: ChatPipeline) -> None:
    text = "a b a b a"
    early = stream(pipeline, ChatRun.prepare(pipeline, req(text, stop=["b"])))
    assert content(early) == "a "
    late = stream(pipeline, ChatRun.prepare(pipeline, req(text, stop=["b"], min_tokens=3)))
    # " b" as the 2nd token is inside min_tokens and is emitted; the one at token 4 stops.
    assert content(late) == "a b a "
    assert finish(late) == ["stop"]


def test_logprobs(pipeline: ChatPipeline) -> None:
    chunks = stream(
        pipeline, ChatRun.prepare(pipeline, req("hi there", logprobs=True, top_logprobs=1))
    )
    entries = [
        e
        for c in chunks
        if c["choices"]
        for e in (c["choices"][0]["logprobs"] or {}).get("content") or []
    ]
    assert entries == [
        {
            "token": "hi",
            "logprob": 0.0,
            "bytes": [104, 105],
            "top_logprobs": [{"token": "hi", "logprob": 0.0, "bytes": [104, 105]}],
        },
        {
            "token": " there",
            "logprob": 0.0,
            "bytes": list(b" there"),
            "top_logprobs": [{"token": " there", "logprob": 0.0, "bytes": list(b" there")}],
        },
    ]


def test_logprobs_with_top_zero(pipeline: ChatPipeline) -> None:
    chunks = stream(pipeline, ChatRun.prepare(pipeline, req("hi", logprobs=True)))
    assert chunks[0]["choices"][0]["logprobs"]["content"][0]["top_logprobs"] == []


def test_nvext_extra_fields(pipeline: ChatPipeline) -> None:
    ids = EchoTokenizer().encode("a b")
    chunks = stream(
        pipeline,
        ChatRun.prepare(pipeline, req("a b", nvext={"extra_fields": ["completion_token_ids"]})),
    )
    assert chunks[-1]["nvext"] == {"completion_token_ids": ids}


def test_engine_fault_mid_stream() -> None:
    pipeline = make_pipeline()
    engine_of(pipeline).fail_after_tokens = 2
    prepared = ChatRun.prepare(pipeline, req())
    chunks: list[dict[str, Any]] = []

    async def run() -> None:
        async for chunk in prepared.stream():
            chunks.append(chunk)

    with pytest.raises(EngineError) as info:
        asyncio.run(run())
    assert info.value.message == "echo engine: injected failure"
    assert content(chunks) == "Hello world"
    assert finish(chunks) == ["error"]
    assert chunks[-1]["choices"][0]["finish_reason"] == "error"
    assert engine_of(pipeline).stats.active == 0


def test_engine_fault_with_usage_still_sends_usage() -> None:
    pipeline = make_pipeline()
    engine_of(pipeline).fail_after_tokens = 1
    prepared = ChatRun.prepare(pipeline, req(stream=True, stream_options={"include_usage": True}))
    chunks: list[dict[str, Any]] = []

    async def run() -> None:
        async for chunk in prepared.stream():
            chunks.append(chunk)

    with pytest.raises(EngineError):
        asyncio.run(run())
    assert finish(chunks) == ["error"]
    assert chunks[-1]["choices"] == []
    assert chunks[-1]["usage"]["completion_tokens"] == 1


def test_closing_the_stream_cancels_the_engine(pipeline: ChatPipeline) -> None:
    prepared = ChatRun.prepare(pipeline, req())

    async def run() -> list[dict[str, Any]]:
        got = []
        async with aclosing(prepared.stream()) as chunks:
            async for chunk in chunks:
                got.append(chunk)
                if len(got) == 2:
                    break
        return got

    got = asyncio.run(run())
    assert content(got) == "Hello world"
    stats = engine_of(pipeline).stats
    assert stats.requests_cancelled == 1
    assert stats.requests_finished == 0
    assert stats.active == 0
    assert stats.tokens_generated == 2


# --- complete ---


def _complete(pipeline: ChatPipeline, prepared: ChatRun) -> dict[str, Any]:
    result = asyncio.run(prepared.complete())
    ChatCompletion.model_validate(result)
    return result


def test_complete_matches_the_stream(pipeline: ChatPipeline) -> None:
    streamed = content(stream(pipeline, ChatRun.prepare(pipeline, req())))
    prepared = ChatRun.prepare(pipeline, req(), stream=False)
    result = _complete(pipeline, prepared)
    n = len(EchoTokenizer().encode(TEXT))
    assert result == {
        "id": prepared.delta.id,
        "object": "chat.completion",
        "created": prepared.delta.created,
        "model": "echo",
        "system_fingerprint": pipeline.system_fingerprint,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": streamed, "refusal": None},
                "logprobs": None,
                "finish_reason": "stop",
            }
        ],
        "usage": {
            "prompt_tokens": n,
            "completion_tokens": n,
            "total_tokens": 2 * n,
            "prompt_tokens_details": {"cached_tokens": 0},
        },
    }
    assert streamed == TEXT
    stats = engine_of(pipeline).stats
    assert stats.requests_finished == 2
    assert stats.requests_cancelled == 0


def test_complete_with_stop_and_length(pipeline: ChatPipeline) -> None:
    result = _complete(pipeline, ChatRun.prepare(pipeline, req(stop="lo w"), stream=False))
    assert result["choices"][0]["message"]["content"] == "Hel"
    assert result["choices"][0]["finish_reason"] == "stop"
    # Every generated token counts, including the ones behind the stop string.
    assert result["usage"]["completion_tokens"] == 2
    result = _complete(pipeline, ChatRun.prepare(pipeline, req(max_tokens=3), stream=False))
    assert result["choices"][0]["message"]["content"] == "Hello world,"
    assert result["choices"][0]["finish_reason"] == "length"


def test_complete_with_logprobs(pipeline: ChatPipeline) -> None:
    result = _complete(pipeline, ChatRun.prepare(pipeline, req("a b", logprobs=True), stream=False))
    assert [e["token"] for e in result["choices"][0]["logprobs"]["content"]] == ["a", " b"]


def test_complete_raises_on_engine_fault() -> None:
    pipeline = make_pipeline()
    engine_of(pipeline).fail_after_tokens = 1
    with pytest.raises(EngineError):
        asyncio.run(ChatRun.prepare(pipeline, req(), stream=False).complete())


# --- model metadata the pipeline honours (vocabulary, generation defaults, templates) ---


def _pipeline_with(**info_changes: Any) -> ChatPipeline:
    engine = EchoEngine()
    engine._info = dataclasses.replace(engine.info, **info_changes)
    asyncio.run(engine.start())
    return ChatPipeline(engine)


def test_token_ids_outside_the_vocabulary_are_rejected_before_generation() -> None:
    pipeline = _pipeline_with(vocab_size=100)
    cases = [
        ({"nvext": {"token_data": [5, 100]}}, "nvext.token_data"),
        ({"stop_token_ids": [3, 250]}, "stop_token_ids"),
        ({"logit_bias": {"99": 1.0, "100": -1.0}}, "logit_bias"),
    ]
    for fields, param in cases:
        with pytest.raises(InvalidRequestError) as info:
            ChatRun.prepare(pipeline, req("hi", **fields))
        assert info.value.param == param
        assert "outside the model's vocabulary of 100" in info.value.message


def test_generation_defaults_fill_only_what_the_request_leaves_out() -> None:
    from realtime.model.info import GenerationDefaults

    defaults = GenerationDefaults(temperature=0.6, top_p=0.9, top_k=20, repetition_penalty=1.1)
    pipeline = _pipeline_with(generation_defaults=defaults)
    implicit = ChatRun.prepare(pipeline, req("hi")).engine_request.sampling
    assert (implicit.temperature, implicit.top_p, implicit.top_k) == (0.6, 0.9, 20)
    assert implicit.repetition_penalty == 1.1 and implicit.min_p == 0.0
    explicit = ChatRun.prepare(pipeline, req("hi", temperature=0, top_k=-1)).engine_request.sampling
    assert explicit.temperature == 0 and explicit.top_k == 0 and explicit.top_p == 0.9


def test_tool_call_arguments_reach_the_template_as_objects() -> None:
    template = ChatTemplate(
        "{% for m in messages %}{% for c in m.tool_calls or [] %}"
        "{{ c.function.name }}={{ c.function.arguments | tojson }};{% endfor %}{% endfor %}"
    )
    pipeline = _pipeline_with(chat_template=template)
    call = {"id": "call_1", "type": "function"}
    messages = [
        {"role": "user", "content": "q"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {**call, "function": {"name": "f", "arguments": '{"x": 1}'}},
                {**call, "id": "call_2", "function": {"name": "g", "arguments": "not json"}},
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "1"},
        {"role": "user", "content": "again"},
    ]
    prepared = ChatRun.prepare(
        pipeline, parse_chat_request({"model": "echo", "messages": messages})
    )
    prompt = pipeline.engine.info.tokenizer.decode(prepared.engine_request.prompt_token_ids)
    assert prompt == 'f={"x": 1};g="not json";'


# --- tool calls and reasoning through the pipeline (echo model + named parsers) ---

WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
    },
}


def _parsing_pipeline(**parsers: str) -> ChatPipeline:
    engine = EchoEngine()
    asyncio.run(engine.start())
    return ChatPipeline(engine, **parsers)


@pytest.mark.parametrize(
    "choice", ["required", {"type": "function", "function": {"name": "get_weather"}}]
)
def test_a_demanded_tool_call_without_a_tool_parser_is_a_400(
    pipeline: ChatPipeline, choice: Any
) -> None:
    with pytest.raises(InvalidRequestError) as info:
        ChatRun.prepare(pipeline, req("x", tools=[WEATHER_TOOL], tool_choice=choice))
    assert info.value.param == "tool_choice" and "tool parser" in info.value.message


def test_echoed_tool_call_text_becomes_a_streamed_tool_call() -> None:
    pipeline = _parsing_pipeline(tool_parser="hermes")
    text = 'Checking. <tool_call>{"name": "get_weather", "arguments": {"city": "Oslo"}}</tool_call>'
    chunks = stream(pipeline, ChatRun.prepare(pipeline, req(text, tools=[WEATHER_TOOL])))
    calls = [
        call
        for c in chunks
        if c["choices"]
        for call in c["choices"][0]["delta"].get("tool_calls") or []
    ]
    assert calls[0]["id"].startswith("call_") and calls[0]["function"]["name"] == "get_weather"
    arguments = "".join(c["function"].get("arguments", "") for c in calls)
    assert json.loads(arguments) == {"city": "Oslo"}
    assert content(chunks).strip() == "Checking."
    assert finish(chunks) == ["tool_calls"]


def test_non_streamed_tool_call_and_reasoning_are_folded_into_the_message() -> None:
    pipeline = _parsing_pipeline(tool_parser="hermes", reasoning_parser="qwen3")
    text = (
        "<think>They want weather.</think>"
        '<tool_call>{"name": "get_weather", "arguments": {"city": "Oslo"}}</tool_call>'
    )
    prepared = ChatRun.prepare(pipeline, req(text, tools=[WEATHER_TOOL]), stream=False)
    completion = asyncio.run(prepared.complete())
    message = completion["choices"][0]["message"]
    assert message["reasoning_content"] == "They want weather."
    assert message["content"] is None
    assert [c["function"]["name"] for c in message["tool_calls"]] == ["get_weather"]
    assert completion["choices"][0]["finish_reason"] == "tool_calls"


def test_required_tool_choice_that_the_output_ignores_fails_the_request() -> None:
    pipeline = _parsing_pipeline(tool_parser="hermes")
    prepared = ChatRun.prepare(
        pipeline, req("no call here", tools=[WEATHER_TOOL], tool_choice="required")
    )
    with pytest.raises(ToolChoiceNotSatisfiedError):
        stream(pipeline, prepared)
    assert prepared.delta.finish_reason == "error"


def test_unknown_parser_names_fail_at_startup_with_the_valid_names() -> None:
    with pytest.raises(ValueError, match="hermes"):
        _parsing_pipeline(tool_parser="nope")


def test_a_prompt_whose_floor_fills_the_context_is_refused_before_encoding(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    pipeline = make_pipeline(context_length=5)
    tokenizer = pipeline.engine.info.tokenizer
    encode, encoded = tokenizer.encode, []

    def counting(text: str) -> list[int]:
        encoded.append(len(text))
        return encode(text)

    monkeypatch.setattr(tokenizer, "encode", counting)
    with pytest.raises(PromptTooLongError) as info:
        ChatRun.prepare(pipeline, req("x" * 30))  # at most 6 characters a token: at least 5
    assert info.value.code == "context_length_exceeded"
    assert info.value.param == "messages"
    assert (info.value.prompt_tokens, info.value.context_length) == (5, 5)
    assert info.value.message == (
        "the prompt is at least 5 tokens (30 characters); the model's context is 5 tokens"
    )
    assert encoded == []
    # A character less and the floor (4) leaves room: encoded, and counted exactly.
    with pytest.raises(PromptTooLongError) as info:
        ChatRun.prepare(pipeline, req("x" * 29))
    assert info.value.message == "the prompt is 5 tokens; the model's context is 5 tokens"
    assert encoded == [29]
