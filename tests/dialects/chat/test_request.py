"""parse_chat_request: what OpenAI clients send is accepted; everything else is a named 400."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from realtime.dialects.chat.messages import (
    AssistantMessage,
    DeveloperMessage,
    ImagePart,
    SystemMessage,
    TextPart,
    ToolMessage,
    UserMessage,
    text_of,
)
from realtime.dialects.chat.request import (
    ChatCompletionRequest,
    NamedToolChoice,
    parse_chat_request,
)
from realtime.protocol.errors import InvalidRequestError, UnknownFieldError

USER = [{"role": "user", "content": "hi"}]

WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather for a city",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
            "additionalProperties": False,
        },
        "strict": True,
    },
}

#: A body as the openai Python SDK serializes it, with every message role and most options.
SDK_BODY: dict[str, Any] = {
    "model": "echo",
    "messages": [
        {"role": "system", "content": "You are terse."},
        {"role": "developer", "content": [{"type": "text", "text": "Answer in English."}]},
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "What is in this image, and the weather in Paris?"},
                {
                    "type": "image_url",
                    "image_url": {"url": "data:image/png;base64,AAAA", "detail": "low"},
                },
            ],
            "name": "alice",
        },
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_abc",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_abc", "content": '{"temp_c": 18}'},
        {"role": "user", "content": "Thanks."},
    ],
    "frequency_penalty": 0.5,
    "presence_penalty": -0.5,
    "logit_bias": {"50256": -100, "1234": 2.5},
    "logprobs": True,
    "top_logprobs": 5,
    "max_completion_tokens": 64,
    "max_tokens": 64,
    "metadata": {"session": "s1"},
    "n": 1,
    "parallel_tool_calls": True,
    "response_format": {"type": "text"},
    "seed": 42,
    "service_tier": "auto",
    "stop": ["\n\n", "END"],
    "store": False,
    "stream": True,
    "stream_options": {"include_usage": True},
    "temperature": 0.7,
    "top_p": 0.9,
    "tools": [WEATHER_TOOL],
    "tool_choice": "auto",
    "user": "user-123",
    "nvext": {
        "token_data": None,
        "extra_fields": ["completion_token_ids", "engine_data"],
        "cache_salt": "tenant-a",
        "agent_hints": {"speculative_prefill": True},
        "ignore_eos": True,
        "top_k": 40,
        "min_p": 0.05,
        "repetition_penalty": 1.1,
    },
}


def body(**fields: Any) -> dict[str, Any]:
    data: dict[str, Any] = {"model": "echo", "messages": copy.deepcopy(USER)}
    data.update(fields)
    return data


def rejected(data: Any) -> InvalidRequestError:
    with pytest.raises(InvalidRequestError) as info:
        parse_chat_request(data)
    return info.value


# --- accepted ---


def test_full_sdk_body() -> None:
    request = parse_chat_request(copy.deepcopy(SDK_BODY))
    assert isinstance(request, ChatCompletionRequest)
    assert [type(m) for m in request.messages] == [
        SystemMessage,
        DeveloperMessage,
        UserMessage,
        AssistantMessage,
        ToolMessage,
        UserMessage,
    ]
    user = request.messages[2]
    assert isinstance(user, UserMessage)
    assert isinstance(user.content, list)
    assert isinstance(user.content[0], TextPart)
    assert isinstance(user.content[1], ImagePart)
    assert user.content[1].image_url.url == "data:image/png;base64,AAAA"
    assert user.content[1].image_url.detail == "low"
    assert user.name == "alice"
    assert text_of(user.content) == "What is in this image, and the weather in Paris?"

    assistant = request.messages[3]
    assert isinstance(assistant, AssistantMessage)
    assert assistant.content is None
    assert assistant.tool_calls is not None
    assert assistant.tool_calls[0].id == "call_abc"
    assert assistant.tool_calls[0].function.name == "get_weather"
    assert assistant.tool_calls[0].function.arguments == '{"city": "Paris"}'

    tool = request.messages[4]
    assert isinstance(tool, ToolMessage)
    assert tool.tool_call_id == "call_abc"
    assert tool.content == '{"temp_c": 18}'

    assert request.tools is not None
    assert request.tools[0].function.name == "get_weather"
    assert request.tools[0].function.strict is True
    assert request.tools[0].function.parameters == WEATHER_TOOL["function"]["parameters"]
    assert request.tool_choice == "auto"
    assert request.logit_bias == {"50256": -100.0, "1234": 2.5}
    assert request.metadata == {"session": "s1"}
    assert request.user == "user-123"
    assert request.seed == 42
    assert request.n == 1
    assert request.frequency_penalty == 0.5
    assert request.presence_penalty == -0.5
    assert request.temperature == 0.7
    assert request.top_p == 0.9
    assert request.response_format is not None
    assert request.response_format.type == "text"
    assert request.nvext is not None
    assert request.nvext.top_k == 40
    assert request.nvext.min_p == 0.05
    assert request.nvext.repetition_penalty == 1.1
    assert request.nvext.agent_hints is not None
    assert request.nvext.agent_hints.speculative_prefill is True

    assert request.output_limit == 64
    assert request.stop_strings == ["\n\n", "END"]
    assert request.include_usage is True
    assert request.effective_cache_salt == "tenant-a"
    assert request.effective_ignore_eos is True
    assert request.extra_fields == frozenset({"completion_token_ids", "engine_data"})


def test_minimal_body_defaults() -> None:
    request = parse_chat_request(body())
    assert request.stream is False
    assert request.output_limit is None
    assert request.stop_strings == []
    assert request.include_usage is False
    assert request.effective_cache_salt is None
    assert request.effective_ignore_eos is False
    assert request.extra_fields == frozenset()


@pytest.mark.parametrize(
    "tool_choice",
    ["none", "auto", "required", {"type": "function", "function": {"name": "get_weather"}}],
)
def test_tool_choice_variants(tool_choice: Any) -> None:
    request = parse_chat_request(body(tools=[WEATHER_TOOL], tool_choice=tool_choice))
    if isinstance(tool_choice, str):
        assert request.tool_choice == tool_choice
    else:
        assert isinstance(request.tool_choice, NamedToolChoice)
        assert request.tool_choice.function.name == "get_weather"


def test_minimal_tool_definition() -> None:
    request = parse_chat_request(body(tools=[{"type": "function", "function": {"name": "ping"}}]))
    assert request.tools is not None
    assert request.tools[0].function.name == "ping"
    assert request.tools[0].function.parameters is None


@pytest.mark.parametrize(
    ("options", "include_usage"),
    [
        ({"include_usage": True}, True),
        ({"include_usage": False}, False),
        ({}, False),
        (
            {"include_usage": True, "continuous_usage_stats": True, "include_obfuscation": False},
            True,
        ),
    ],
)
def test_stream_options(options: dict[str, Any], include_usage: bool) -> None:
    request = parse_chat_request(body(stream=True, stream_options=options))
    assert request.include_usage is include_usage


@pytest.mark.parametrize(
    ("fields", "limit"),
    [
        ({"max_tokens": 10}, 10),
        ({"max_completion_tokens": 11}, 11),
        ({"max_tokens": 12, "max_completion_tokens": 12}, 12),
        ({"max_tokens": None, "max_completion_tokens": 13}, 13),
        ({}, None),
    ],
)
def test_output_limit(fields: dict[str, Any], limit: int | None) -> None:
    assert parse_chat_request(body(**fields)).output_limit == limit


@pytest.mark.parametrize(
    ("stop", "strings"),
    [("END", ["END"]), (["a", "bc"], ["a", "bc"]), ([], []), (None, [])],
)
def test_stop_strings(stop: Any, strings: list[str]) -> None:
    assert parse_chat_request(body(stop=stop)).stop_strings == strings


@pytest.mark.parametrize(
    "response_format",
    [
        {"type": "text"},
        {"type": "json_object"},
        {
            "type": "json_schema",
            "json_schema": {
                "name": "answer",
                "schema": {"type": "object", "properties": {"a": {"type": "integer"}}},
                "strict": True,
                "description": "extra keys are allowed here",
            },
        },
    ],
)
def test_response_format(response_format: dict[str, Any]) -> None:
    request = parse_chat_request(body(response_format=response_format))
    assert request.response_format is not None
    assert request.response_format.type == response_format["type"]
    if response_format["type"] == "json_schema":
        schema = request.response_format.json_schema
        assert schema is not None
        assert schema.name == "answer"
        assert schema.schema_ == {"type": "object", "properties": {"a": {"type": "integer"}}}


def test_assistant_message_round_tripped_from_a_response() -> None:
    """The `message` of a chat.completion, sent back as history by a client."""
    returned = {
        "role": "assistant",
        "content": "It is 18 degrees.",
        "refusal": None,
        "annotations": [],
        "audio": None,
        "function_call": None,
        "tool_calls": None,
        "reasoning_content": "The tool said 18.",
    }
    request = parse_chat_request(
        body(messages=[*USER, returned, {"role": "user", "content": "ok"}])
    )
    message = request.messages[1]
    assert isinstance(message, AssistantMessage)
    assert message.content == "It is 18 degrees."
    assert message.reasoning_content == "The tool said 18."
    assert message.refusal is None
    dumped = message.model_dump(exclude_none=True)
    assert dumped == {
        "role": "assistant",
        "content": "It is 18 degrees.",
        "annotations": [],
        "reasoning_content": "The tool said 18.",
    }


def test_message_extra_keys_are_kept_for_the_template() -> None:
    request = parse_chat_request(
        body(
            messages=[
                {"role": "user", "content": "hi", "thinking": "on", "cache_control": {"x": 1}}
            ]
        )
    )
    assert request.messages[0].model_dump(exclude_none=True) == {
        "role": "user",
        "content": "hi",
        "thinking": "on",
        "cache_control": {"x": 1},
    }


@pytest.mark.parametrize(
    ("fields", "salt"),
    [
        ({"cache_salt": "root"}, "root"),
        ({"nvext": {"cache_salt": "ext"}}, "ext"),
        # a top-level field wins over the same field in nvext
        ({"cache_salt": "root", "nvext": {"cache_salt": "ext"}}, "root"),
        ({"cache_salt": "root", "nvext": {}}, "root"),
        ({}, None),
    ],
)
def test_effective_cache_salt(fields: dict[str, Any], salt: str | None) -> None:
    assert parse_chat_request(body(**fields)).effective_cache_salt == salt


@pytest.mark.parametrize(
    ("fields", "ignore"),
    [
        ({"ignore_eos": True}, True),
        ({"nvext": {"ignore_eos": True}}, True),
        ({"ignore_eos": False, "nvext": {"ignore_eos": True}}, False),
        ({"ignore_eos": True, "nvext": {"ignore_eos": False}}, True),
        ({"nvext": {"ignore_eos": False}}, False),
        ({}, False),
    ],
)
def test_effective_ignore_eos(fields: dict[str, Any], ignore: bool) -> None:
    assert parse_chat_request(body(**fields)).effective_ignore_eos is ignore


@pytest.mark.parametrize(
    ("nvext", "fields"),
    [
        (None, frozenset()),
        ({}, frozenset()),
        ({"extra_fields": []}, frozenset()),
        ({"extra_fields": ["engine_data"]}, frozenset({"engine_data"})),
        (
            {"extra_fields": ["completion_token_ids", "completion_token_ids"]},
            frozenset({"completion_token_ids"}),
        ),
    ],
)
def test_extra_fields(nvext: dict[str, Any] | None, fields: frozenset[str]) -> None:
    assert parse_chat_request(body(nvext=nvext)).extra_fields == fields


def test_self_hosting_extras() -> None:
    request = parse_chat_request(
        body(
            top_k=20,
            min_p=0.1,
            repetition_penalty=1.2,
            min_tokens=3,
            stop_token_ids=[7, 8],
            include_stop_str_in_output=True,
            skip_special_tokens=False,
            chat_template_kwargs={"enable_thinking": False},
            nvext={"token_data": [1, 2, 3]},
        )
    )
    assert request.top_k == 20
    assert request.min_tokens == 3
    assert request.stop_token_ids == [7, 8]
    assert request.include_stop_str_in_output is True
    assert request.chat_template_kwargs == {"enable_thinking": False}
    assert request.nvext is not None
    assert request.nvext.token_data == [1, 2, 3]


def test_top_logprobs_zero_without_logprobs_is_accepted() -> None:
    assert parse_chat_request(body(top_logprobs=0)).top_logprobs == 0


# --- rejected ---


@pytest.mark.parametrize(
    ("fields", "param"),
    [
        ({"max_token": 5}, "max_token"),
        ({"temprature": 0.5}, "temprature"),
        ({"nvext": {"bogus": 1}}, "nvext.bogus"),
        ({"nvext": {"agent_hints": {"bogus": 1}}}, "nvext.agent_hints.bogus"),
        ({"stream": True, "stream_options": {"bogus": True}}, "stream_options.bogus"),
        (
            {"tools": [{"type": "function", "function": {"name": "f", "bogus": 1}}]},
            "tools.0.function.bogus",
        ),
    ],
)
def test_unknown_field(fields: dict[str, Any], param: str) -> None:
    error = rejected(body(**fields))
    assert type(error) is UnknownFieldError
    assert error.code == "unknown_field"
    assert error.param == param
    assert error.message == f"Unrecognized request argument supplied: {param}"
    assert error.status == 400
    assert error.to_body()["error"] == {
        "message": f"Unrecognized request argument supplied: {param}",
        "type": "invalid_request_error",
        "param": param,
        "code": "unknown_field",
    }


@pytest.mark.parametrize(
    ("data", "param", "message"),
    [
        (
            body(messages=[{"role": "bot", "content": "x"}]),
            "messages.0",
            "messages.0: Input tag 'bot' found using 'role' does not match any of the expected "
            "tags: 'system', 'developer', 'user', 'assistant', 'tool', 'function'",
        ),
        (
            body(messages=[{"content": "x"}]),
            "messages.0",
            "messages.0: Unable to extract tag using discriminator 'role'",
        ),
        (
            body(temperature=2.5),
            "temperature",
            "temperature: Input should be less than or equal to 2",
        ),
        (
            body(temperature=-0.1),
            "temperature",
            "temperature: Input should be greater than or equal to 0",
        ),
        (
            body(messages=[]),
            "messages",
            "messages: List should have at least 1 item after validation, not 0",
        ),
        (
            body(max_tokens=0),
            "max_tokens",
            "max_tokens: Input should be greater than or equal to 1",
        ),
        (
            body(max_completion_tokens=0),
            "max_completion_tokens",
            "max_completion_tokens: Input should be greater than or equal to 1",
        ),
        (body(top_p=0), "top_p", "top_p: Input should be greater than 0"),
        (
            body(top_logprobs=21, logprobs=True),
            "top_logprobs",
            "top_logprobs: Input should be less than or equal to 20",
        ),
        (
            body(logit_bias={"5": 101}),
            "logit_bias.5",
            "logit_bias.5: Input should be less than or equal to 100",
        ),
        (body(n=0), "n", "n: Input should be greater than or equal to 1"),
        ({"messages": USER}, "model", "model: Field required"),
        (
            body(tool_choice="maybe"),
            "tool_choice",
            "tool_choice: Input should be 'none', 'auto' or 'required'",
        ),
        (
            body(nvext={"extra_fields": ["bogus"]}),
            "nvext.extra_fields.0",
            "nvext.extra_fields.0: Input should be 'completion_token_ids' or 'engine_data'",
        ),
        (
            body(nvext={"token_data": [1, -1]}),
            "nvext.token_data.1",
            "nvext.token_data.1: Input should be greater than or equal to 0",
        ),
    ],
)
def test_invalid_value(data: dict[str, Any], param: str, message: str) -> None:
    error = rejected(data)
    assert type(error) is InvalidRequestError
    assert error.param == param
    assert error.message == message
    assert error.code is None
    assert error.status == 400


@pytest.mark.parametrize(
    ("data", "param"),
    [
        # Union members (the message's role tag, `str` / `list[str]`) must not leak into `param`.
        pytest.param(
            body(messages=[{"role": "tool", "content": "x"}]),
            "messages.0.tool_call_id",
            id="tool-message-without-tool_call_id",
        ),
        pytest.param(body(stop=5), "stop", id="stop-not-a-string"),
    ],
)
def test_param_is_the_user_facing_path(data: dict[str, Any], param: str) -> None:
    assert rejected(data).param == param


COMBINATIONS = [
    pytest.param(
        {"max_tokens": 5, "max_completion_tokens": 6},
        {"max_tokens", "max_completion_tokens"},
        "max_tokens and max_completion_tokens disagree; send one of them",
        id="max_tokens-disagree",
    ),
    pytest.param(
        {"top_logprobs": 3},
        {"top_logprobs"},
        "top_logprobs requires logprobs: true",
        id="top_logprobs-without-logprobs",
    ),
    pytest.param(
        {"top_logprobs": 3, "logprobs": False},
        {"top_logprobs"},
        "top_logprobs requires logprobs: true",
        id="top_logprobs-with-logprobs-false",
    ),
    pytest.param(
        {"stream_options": {"include_usage": True}},
        {"stream_options"},
        "stream_options is only allowed when stream is true",
        id="stream_options-without-stream",
    ),
    pytest.param(
        {"stream": False, "stream_options": {"include_usage": True}},
        {"stream_options"},
        "stream_options is only allowed when stream is true",
        id="stream_options-with-stream-false",
    ),
    pytest.param(
        {"stop": ["a", ""]}, {"stop"}, "stop strings must not be empty", id="empty-stop-string"
    ),
]


@pytest.mark.parametrize(("fields", "params", "message"), COMBINATIONS)
def test_invalid_combination_is_rejected(
    fields: dict[str, Any], params: set[str], message: str
) -> None:
    error = rejected(body(**fields))
    assert type(error) is InvalidRequestError
    assert error.status == 400
    assert error.code is None
    assert error.message.endswith(message)


@pytest.mark.parametrize(("fields", "params", "message"), COMBINATIONS)
def test_invalid_combination_names_the_param(
    fields: dict[str, Any], params: set[str], message: str
) -> None:
    # Like every other validation error, a cross-field rejection names the offending field
    # in `error.param` (clients read it; the openai SDK exposes it as `err.param`).
    assert rejected(body(**fields)).param in params


@pytest.mark.parametrize("data", [[USER], "hello", 3, None, True])
def test_non_object_body(data: Any) -> None:
    error = rejected(data)
    assert type(error) is InvalidRequestError
    assert error.message == "the request body must be a JSON object"
    assert error.param is None


def test_only_the_first_error_is_reported() -> None:
    error = rejected(body(temperature=5, max_tokens=0))
    assert error.param in {"temperature", "max_tokens"}
    assert "\n" not in error.message
