"""Strict wire types, as OpenAI's: a wrong JSON type is refused by name, never converted."""

from __future__ import annotations

from typing import Any

import pytest

from realtime.dialects.chat.completions import parse_completion_request
from realtime.dialects.chat.request import parse_chat_request
from realtime.protocol.errors import InvalidRequestError, InvalidTypeError
from realtime.protocol.input_limits import InputLimits, check_stop_strings

CHAT = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
TEXT = {"model": "m", "prompt": "hi"}

REFUSED_CHAT = [
    ({"stream": "yes"}, "stream", "expected a boolean, but got a string instead"),
    ({"stream": 1}, "stream", "expected a boolean, but got an integer instead"),
    ({"stream": None, "logprobs": 0}, "logprobs", "expected a boolean, but got an integer instead"),
    ({"n": "2"}, "n", "expected an integer, but got a string instead"),
    ({"n": True}, "n", "expected an integer, but got a boolean instead"),
    ({"max_tokens": 1.5}, "max_tokens", "expected an integer, but got a decimal number instead"),
    ({"max_tokens": 2.0}, "max_tokens", "expected an integer, but got a decimal number instead"),
    ({"max_completion_tokens": "9"}, "max_completion_tokens",
     "expected an integer, but got a string instead"),
    ({"seed": 1.0}, "seed", "expected an integer, but got a decimal number instead"),
    ({"temperature": "0.5"}, "temperature", "expected a number, but got a string instead"),
    ({"temperature": False}, "temperature", "expected a number, but got a boolean instead"),
    ({"top_logprobs": 2.5, "logprobs": True}, "top_logprobs",
     "expected an integer, but got a decimal number instead"),
    ({"logit_bias": {"5": "1"}}, "logit_bias.5", "expected a number, but got a string instead"),
    ({"stop": 5}, "stop", "expected one of a string or an array, but got an integer instead"),
    ({"stop": ["a", None]}, "stop.1", "expected a string, but got null instead"),
    ({"user": 7}, "user", "expected a string, but got an integer instead"),
    ({"metadata": {"k": 1}}, "metadata.k", "expected a string, but got an integer instead"),
    ({"stream": True, "stream_options": {"include_usage": "true"}},
     "stream_options.include_usage", "expected a boolean, but got a string instead"),
    ({"parallel_tool_calls": "false"}, "parallel_tool_calls",
     "expected a boolean, but got a string instead"),
    ({"tools": [{"type": "function", "function": {"name": "f", "parameters": []}}]},
     "tools.0.function.parameters", "expected an object, but got an array instead"),
    ({"tools": [{"type": "function", "function": {"name": "f", "strict": "yes"}}]},
     "tools.0.function.strict", "expected a boolean, but got a string instead"),
    ({"chat_template_kwargs": []}, "chat_template_kwargs",
     "expected an object, but got an array instead"),
    ({"messages": "hi"}, "messages", "expected an array, but got a string instead"),
    ({"messages": [{"role": "user", "content": 5}]}, "messages.0.content",
     "expected one of a string or an array, but got an integer instead"),
    ({"messages": [{"role": "user", "content": "x", "name": 5}]}, "messages.0.name",
     "expected a string, but got an integer instead"),
    ({"messages": [{"role": "tool", "content": "x", "tool_call_id": 5}]},
     "messages.0.tool_call_id", "expected a string, but got an integer instead"),
    ({"messages": [{"role": "user", "content": [{"type": "text", "text": 1}]}]},
     "messages.0.content.0.text", "expected a string, but got an integer instead"),
    ({"top_k": 40.0}, "top_k", "expected an integer, but got a decimal number instead"),
    ({"ignore_eos": "no"}, "ignore_eos", "expected a boolean, but got a string instead"),
    ({"stop_token_ids": [1, 2.0]}, "stop_token_ids.1",
     "expected an integer, but got a decimal number instead"),
    ({"nvext": {"token_data": ["1"]}}, "nvext.token_data.0",
     "expected an integer, but got a string instead"),
    ({"nvext": {"agent_hints": {"speculative_prefill": 1}}},
     "nvext.agent_hints.speculative_prefill", "expected a boolean, but got an integer instead"),
    ({"model": None}, "model", "expected a string, but got null instead"),
]  # fmt: skip


@pytest.mark.parametrize(("fields", "param", "wording"), REFUSED_CHAT)
def test_chat_wrong_types_are_refused_by_name(
    fields: dict[str, Any], param: str, wording: str
) -> None:
    with pytest.raises(InvalidTypeError) as info:
        parse_chat_request({**CHAT, **fields})
    error = info.value
    assert (error.param, error.code, error.status) == (param, "invalid_type", 400)
    assert error.message == f"Invalid type for '{param}': {wording}."


REFUSED_TEXT = [
    ({"prompt": 5}, "prompt"),
    ({"prompt": [1.5]}, "prompt.0"),
    ({"prompt": [[1, "2"]]}, "prompt.0.1"),
    ({"max_tokens": 1.5}, "max_tokens"),
    ({"logprobs": True}, "logprobs"),
    ({"echo": "true"}, "echo"),
    ({"best_of": "1"}, "best_of"),
    ({"suffix": 1}, "suffix"),
]


@pytest.mark.parametrize(("fields", "param"), REFUSED_TEXT)
def test_completion_wrong_types_are_refused_by_name(fields: dict[str, Any], param: str) -> None:
    with pytest.raises(InvalidTypeError) as info:
        parse_completion_request({**TEXT, **fields})
    assert info.value.param == param


@pytest.mark.parametrize(
    "fields",
    [
        {"temperature": 1, "top_p": 1, "presence_penalty": 0, "frequency_penalty": -2},
        {"logit_bias": {"5": 100}},
        {"min_p": 0, "repetition_penalty": 2},
        {"seed": -(2**63), "max_tokens": 2**31},
        {"stream": False, "logprobs": False, "n": 1},
    ],
)
def test_integers_are_numbers_and_exact_types_pass(fields: dict[str, Any]) -> None:
    request = parse_chat_request({**CHAT, **fields})
    for name, value in fields.items():
        got = getattr(request, name)
        assert got == value and (type(got) is type(value) or isinstance(got, float))


# --- stop-string limits ----------------------------------------------------------


def test_stop_strings_up_to_the_limits_are_accepted() -> None:
    limits = InputLimits(max_stop_strings=3, max_stop_chars=4)
    check_stop_strings(["a", "bb", "cccc"], limits)
    request = parse_chat_request({**CHAT, "stop": ["a", "bb", "cccc"]}, limits)
    assert request.stop_strings == ["a", "bb", "cccc"]


def test_one_stop_string_too_many_is_refused_naming_stop() -> None:
    limits = InputLimits(max_stop_strings=3)
    with pytest.raises(InvalidRequestError) as info:
        parse_chat_request({**CHAT, "stop": ["a", "b", "c", "d"]}, limits)
    assert info.value.param == "stop" and info.value.status == 400
    assert info.value.message == (
        "stop: at most 3 stop strings per request (this server's --max-stop-strings), got 4"
    )
    with pytest.raises(InvalidRequestError):
        parse_completion_request({**TEXT, "stop": ["a", "b", "c", "d"]}, limits)


def test_a_stop_string_too_long_is_refused_naming_stop() -> None:
    limits = InputLimits(max_stop_chars=4)
    for stop in ("12345", ["ok", "12345"]):
        with pytest.raises(InvalidRequestError) as info:
            parse_chat_request({**CHAT, "stop": stop}, limits)
        assert info.value.param == "stop"
        assert "at most 4 characters (this server's --max-stop-chars)" in info.value.message


def test_the_default_limits_refuse_ten_thousand_stop_strings() -> None:
    with pytest.raises(InvalidRequestError) as info:
        parse_chat_request({**CHAT, "stop": [f"s{i}" for i in range(10_000)]})
    assert "got 10000" in info.value.message
    parse_chat_request({**CHAT, "stop": [f"s{i}" for i in range(64)]})
    parse_chat_request({**CHAT, "stop": "x" * 256})
