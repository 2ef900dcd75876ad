"""The path both APIs share from a request to engine requests, seen through `prepare`.

The server's cap is applied inside `prepare` (the transports take its result as
it is), the same way for chat and text completions.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from realtime.dialects.chat.build import chat_generation, completion_generation
from realtime.dialects.chat.completions import parse_completion_request
from realtime.dialects.chat.request import parse_chat_request
from realtime.engine.echo import EchoEngine
from realtime.pipeline import ChatPipeline, CompletionPipeline
from realtime.protocol.errors import (
    EngineUnavailableError,
    InvalidRequestError,
    ModelNotFoundError,
    OutputLimitError,
)

TEN_WORDS = "one two three four five six seven eight nine ten"


def pipelines(
    cap: int | None, *, context_length: int = 32768, policy: str = "error"
) -> tuple[ChatPipeline, Any]:
    """Refusing pipelines (`--max-tokens-policy error`), unless `policy` says otherwise."""
    engine = EchoEngine(context_length=context_length)
    asyncio.run(engine.start())
    chat = ChatPipeline(engine, max_tokens_cap=cap, max_tokens_policy=policy)
    return chat, CompletionPipeline(chat)


def chat_request(**fields: Any) -> Any:
    body = {"model": "echo", "messages": [{"role": "user", "content": TEN_WORDS}], **fields}
    return chat_generation(parse_chat_request(body))


def completion_request(**fields: Any) -> Any:
    return completion_generation(
        parse_completion_request({"model": "echo", "prompt": TEN_WORDS, **fields})
    )


def test_prepare_cuts_an_unset_limit_to_the_cap() -> None:
    chat, completions = pipelines(cap=3)
    assert chat.prepare(chat_request()).engine_request.stop.max_tokens == 3
    both = completions.prepare(completion_request(prompt=[TEN_WORDS, "x"]))
    assert [r.stop.max_tokens for r in both.engine_requests] == [3, 3]


def test_prepare_refuses_a_limit_above_the_cap_naming_the_field() -> None:
    chat, completions = pipelines(cap=3)
    for fields, param in (
        ({"max_tokens": 4}, "max_tokens"),
        ({"max_completion_tokens": 4}, "max_completion_tokens"),
    ):
        with pytest.raises(OutputLimitError) as info:
            chat.prepare(chat_request(**fields))
        assert info.value.param == param
    with pytest.raises(OutputLimitError):
        completions.prepare(completion_request(max_tokens=4))
    assert (
        completions.prepare(completion_request(max_tokens=3)).engine_requests[0].stop.max_tokens
        == 3
    )


def test_without_a_cap_the_limits_are_the_requests() -> None:
    chat, completions = pipelines(cap=None, context_length=100)
    assert chat.prepare(chat_request()).engine_request.stop.max_tokens == 90
    assert chat.prepare(chat_request(max_tokens=50)).engine_request.stop.max_tokens == 50
    # text completions default to 16 tokens, as OpenAI's
    assert completions.prepare(completion_request()).engine_requests[0].stop.max_tokens == 16


def test_both_apis_check_the_context_with_their_own_words() -> None:
    chat, completions = pipelines(cap=None, context_length=12)
    with pytest.raises(InvalidRequestError) as chat_error:
        chat.prepare(chat_request(max_tokens=5))
    assert chat_error.value.code == "context_length_exceeded"
    assert chat_error.value.param == "max_tokens"
    assert chat_error.value.message == (
        "max_tokens is 5 but only 2 tokens fit after the 10-token prompt (context 12)"
    )
    with pytest.raises(InvalidRequestError) as completion_error:
        completions.prepare(completion_request(prompt=["x", TEN_WORDS], max_tokens=5))
    assert completion_error.value.code == "context_length_exceeded"
    assert completion_error.value.param == "max_tokens"
    assert completion_error.value.message == (
        "prompt 1 is 10 tokens and asks for 5 more; the model's context is 12 tokens"
    )


def test_both_apis_check_the_model_and_the_engine_the_same_way() -> None:
    chat, completions = pipelines(cap=None)
    with pytest.raises(ModelNotFoundError):
        chat.prepare(chat_request(model="other"))
    with pytest.raises(ModelNotFoundError):
        completions.prepare(completion_request(model="other"))
    chat.engine.unavailable = "maintenance"  # type: ignore[attr-defined]
    for prepare in (
        lambda: chat.prepare(chat_request()),
        lambda: completions.prepare(completion_request()),
    ):
        with pytest.raises(EngineUnavailableError, match="engine unavailable: maintenance"):
            prepare()


def test_engine_requests_carry_the_shared_fields() -> None:
    chat, completions = pipelines(cap=None)
    fields = {
        "stop_token_ids": [7],
        "min_tokens": 2,
        "ignore_eos": True,
        "cache_salt": "s",
        "seed": 5,
    }
    [from_completions] = completions.prepare(
        completion_request(**fields, max_tokens=4)
    ).engine_requests
    from_chat = chat.prepare(chat_request(**fields, max_tokens=4), session_id="sess").engine_request
    for request in (from_chat, from_completions):
        assert request.stop.stop_token_ids == [7] and request.stop.min_tokens == 2
        assert request.stop.ignore_eos and request.cache_salt == "s" and request.sampling.seed == 5
    assert from_chat.session_id == "sess" and from_completions.session_id is None
