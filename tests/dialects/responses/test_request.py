"""The Responses request: every input path refuses bad input with a 400 naming the field."""

from __future__ import annotations

from typing import Any

import pytest

from realtime.dialects.responses.request import parse_responses_request
from realtime.protocol.errors import (
    InvalidRequestError,
    InvalidTypeError,
    UnknownFieldError,
    UnsupportedFeatureError,
)
from tests.e2e.agent_clis import REPO_ROOT

FUNCTION = {"type": "function", "name": "f", "parameters": {"type": "object"}, "strict": True}
MCP = {"type": "mcp"}
GRAMMAR = {"type": "grammar"}


def parse(**body: Any) -> Any:
    return parse_responses_request({"model": "m", **body})


def test_a_string_input_is_one_user_message() -> None:
    request = parse(input="hi")
    [item] = request.items
    assert item["type"] == "message" and item["role"] == "user"
    assert item["content"] == [{"type": "input_text", "text": "hi"}]
    assert item["id"].startswith("msg_") and len(item["id"]) == len("msg_") + 32
    assert request.stores and not request.wants_logprobs


def test_every_supported_item_type_is_normalized() -> None:
    request = parse(
        input=[
            {"role": "system", "content": "sys"},
            {
                "type": "message",
                "role": "developer",
                "content": [{"type": "input_text", "text": "d"}],
            },
            {"role": "assistant", "content": "earlier", "phase": "final_answer"},
            {
                "type": "message",
                "role": "assistant",
                "id": "msg_given",
                "status": "completed",
                "content": [
                    {"type": "output_text", "text": "t", "annotations": [], "logprobs": []}
                ],
            },
            {"type": "reasoning", "id": "rs_1", "summary": [{"type": "summary_text", "text": "s"}]},
            {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "c1", "output": "42"},
            {
                "type": "function_call_output",
                "call_id": "c1",
                "output": [{"type": "input_text", "text": "a"}],
            },
        ],
    )
    kinds = [(i["type"], i.get("role")) for i in request.items]
    assert kinds == [
        ("message", "system"),
        ("message", "developer"),
        ("message", "assistant"),
        ("message", "assistant"),
        ("reasoning", None),
        ("function_call", None),
        ("function_call_output", None),
        ("function_call_output", None),
    ]
    assistant = request.items[2]
    assert assistant["content"] == [{"type": "output_text", "text": "earlier", "annotations": []}]
    assert request.items[3]["id"] == "msg_given"
    assert all(item["id"] for item in request.items)
    assert len({item["id"] for item in request.items}) == len(request.items)


@pytest.mark.parametrize(
    ("body", "error", "param"),
    [
        ({"input": "x", "temprature": 1}, UnknownFieldError, "temprature"),
        ({"input": "x", "stream": "yes"}, InvalidTypeError, "stream"),
        ({"input": 5}, InvalidTypeError, "input"),
        ({"input": ["text"]}, InvalidTypeError, "input.0"),
        (
            {"input": [{"role": "user", "content": "x", "extra": 1}]},
            UnknownFieldError,
            "input.0.extra",
        ),
        ({"input": [{"role": "robot", "content": "x"}]}, InvalidRequestError, "input.0.role"),
        ({"input": [{"role": "user"}]}, InvalidRequestError, "input.0.content"),
        ({"input": [{"role": "user", "content": 3}]}, InvalidTypeError, "input.0.content"),
        (
            {"input": [{"role": "user", "content": [{"type": "input_text", "txt": "x"}]}]},
            UnknownFieldError,
            "input.0.content.0.txt",
        ),
        (
            {"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "u"}]}]},
            UnsupportedFeatureError,
            "input.0.content.0.type",
        ),
        (
            {"input": [{"role": "user", "content": [{"type": "video"}]}]},
            InvalidRequestError,
            "input.0.content.0.type",
        ),
        ({"input": [{"role": "user", "content": [7]}]}, InvalidTypeError, "input.0.content.0"),
        (
            {"input": [{"type": "web_search_call", "id": "w"}]},
            UnsupportedFeatureError,
            "input.0.type",
        ),
        (
            {"input": [{"type": "item_reference", "id": "x"}]},
            UnsupportedFeatureError,
            "input.0.type",
        ),
        ({"input": [{"type": "nonsense"}]}, InvalidRequestError, "input.0.type"),
        ({"input": [{"type": 5}]}, InvalidTypeError, "input.0.type"),
        (
            {"input": [{"type": "function_call", "name": "f", "arguments": "{}"}]},
            InvalidRequestError,
            "input.0.call_id",
        ),
        (
            {"input": [{"type": "function_call", "call_id": "c", "name": "f", "arguments": {}}]},
            InvalidTypeError,
            "input.0.arguments",
        ),
        (
            {"input": [{"type": "function_call_output", "output": "x"}]},
            InvalidRequestError,
            "input.0.call_id",
        ),
        (
            {
                "input": [
                    {
                        "type": "function_call_output",
                        "call_id": "c",
                        "output": [{"type": "input_file", "file_id": "f"}],
                    }
                ]
            },
            UnsupportedFeatureError,
            "input.0.output.0.type",
        ),
        (
            {"input": [{"type": "reasoning", "summary": [{"type": "summary_text"}]}]},
            InvalidRequestError,
            "input.0.summary.0.text",
        ),
        (
            {"input": "x", "tools": [{"type": "namespace", "name": "n", "tools": []}]},
            InvalidRequestError,
            "tools.0.description",
        ),
        (
            {
                "input": "x",
                "tools": [{"type": "namespace", "name": "n", "description": "d", "tools": [MCP]}],
            },
            InvalidRequestError,
            "tools.0.tools.0.type",
        ),
        (
            {"input": "x", "tools": [FUNCTION, {"type": "custom", "name": "f"}]},
            InvalidRequestError,
            "tools.1.name",
        ),
        (
            {"input": "x", "tools": [{"type": "custom", "name": "c", "format": GRAMMAR}]},
            InvalidRequestError,
            "tools.0.format.grammar.syntax",
        ),
        ({"input": "x", "tools": [{"type": "spaceship"}]}, InvalidRequestError, "tools.0.type"),
        ({"input": "x", "tools": ["f"]}, InvalidTypeError, "tools.0"),
        (
            {"input": "x", "tools": [{**FUNCTION, "paramters": {}}]},
            UnknownFieldError,
            "tools.0.paramters",
        ),
        ({"input": "x", "tools": [{"type": "function"}]}, InvalidRequestError, "tools.0.name"),
        (
            {"input": "x", "tools": [{**FUNCTION, "defer_loading": True}]},
            UnsupportedFeatureError,
            "tools.0.defer_loading",
        ),
        ({"input": "x", "tool_choice": "sometimes"}, InvalidRequestError, "tool_choice"),
        (
            {"input": "x", "tools": [FUNCTION], "tool_choice": {"type": "function", "name": "g"}},
            InvalidRequestError,
            "tool_choice.name",
        ),
        (
            {"input": "x", "tool_choice": {"type": "function", "name": "f", "x": 1}},
            UnknownFieldError,
            "tool_choice.x",
        ),
        (
            {"input": "x", "tool_choice": {"type": "allowed_tools", "mode": "auto", "tools": []}},
            UnsupportedFeatureError,
            "tool_choice",
        ),
        (
            {"input": "x", "tool_choice": {"type": "teleport"}},
            InvalidRequestError,
            "tool_choice.type",
        ),
        (
            {"input": "x", "text": {"format": {"type": "yaml"}}},
            InvalidRequestError,
            "text.format.type",
        ),
        ({"input": "x", "text": {"colour": "red"}}, UnknownFieldError, "text.colour"),
        ({"input": "x", "include": ["everything"]}, InvalidRequestError, "include.0"),
        (
            {"input": "x", "reasoning": {"effort": "low", "depth": 3}},
            UnknownFieldError,
            "reasoning.depth",
        ),
        ({"input": "x", "metadata": {"k": 1}}, InvalidTypeError, "metadata.k"),
        (
            {"input": "x", "metadata": {f"k{i}": "v" for i in range(17)}},
            InvalidRequestError,
            "metadata",
        ),
        ({"input": "x", "metadata": {"k" * 65: "v"}}, InvalidRequestError, "metadata"),
        ({"input": "x", "metadata": {"k": "v" * 513}}, InvalidRequestError, "metadata.k"),
        ({"input": "x", "temperature": 3}, InvalidRequestError, "temperature"),
        ({"input": "x", "top_p": 0}, InvalidRequestError, "top_p"),
        ({"input": "x", "top_logprobs": 21}, InvalidRequestError, "top_logprobs"),
        ({"input": "x", "max_output_tokens": 0}, InvalidRequestError, "max_output_tokens"),
        (
            {"input": "x", "stream_options": {"include_obfuscation": False}},
            InvalidRequestError,
            "stream_options",
        ),
        ({"input": "x", "background": True, "store": False}, InvalidRequestError, "background"),
        (
            {"input": "x", "conversation": "conv_1", "previous_response_id": "resp_1"},
            InvalidRequestError,
            "conversation",
        ),
        ({"input": "x", "conversation": {"id": 1}}, InvalidTypeError, "conversation.id"),
        ({"input": "x", "prompt": {"id": "p"}}, UnsupportedFeatureError, "prompt"),
        (
            {"input": "x", "context_management": [{"type": "compaction", "compact_threshold": -1}]},
            InvalidRequestError,
            "context_management.0.compact_threshold",
        ),
        (
            {"input": [{"type": "compaction", "encrypted_content": "not ours"}]},
            InvalidRequestError,
            "input.0.encrypted_content",
        ),
        ({"input": "x", "client_metadata": {"a": 1}}, InvalidTypeError, "client_metadata.a"),
        (
            {"input": "x", "prompt_cache_options": {"prewarm": True}},
            UnsupportedFeatureError,
            "prompt_cache_options.prewarm",
        ),
        # the chat API's nvext: only the agent hints mean something for a response
        ({"input": "x", "nvext": {"token_data": [1]}}, UnknownFieldError, "nvext.token_data"),
        (
            {"input": "x", "nvext": {"agent_hints": {"speculative_prefill": "yes"}}},
            InvalidTypeError,
            "nvext.agent_hints.speculative_prefill",
        ),
    ],
)
def test_bad_input_is_a_400_naming_the_field(
    body: dict[str, Any], error: type[InvalidRequestError], param: str
) -> None:
    with pytest.raises(InvalidRequestError) as info:
        parse(**body)
    assert type(info.value) is error, info.value.to_body()
    assert info.value.param == param, info.value.to_body()
    assert info.value.status == 400
    assert param.split(".")[0] in info.value.message or param == "input"


def test_missing_model_and_a_non_object_body() -> None:
    with pytest.raises(InvalidRequestError) as info:
        parse_responses_request({"input": "x"})
    assert info.value.param == "model" and info.value.code == "missing_required_parameter"
    with pytest.raises(InvalidRequestError) as info:
        parse_responses_request([1, 2])
    assert "JSON object" in info.value.message


def test_fields_the_sdk_sends_that_change_nothing_are_accepted() -> None:
    request = parse(
        input="x",
        user="u",
        safety_identifier="s",
        prompt_cache_key="k",
        prompt_cache_retention="24h",
        prompt_cache_options={"mode": "implicit", "ttl": "30m"},
        service_tier="auto",
        reasoning={"effort": "low", "summary": "auto"},
        text={"format": {"type": "text"}, "verbosity": "low"},
        max_tool_calls=3,
        truncation="disabled",
        background=False,
        image={"context_compression": "auto"},
        access_programs={"cyber": "standard"},
        include=["reasoning.encrypted_content", "message.output_text.logprobs"],
        stream=True,
        stream_options={"include_obfuscation": False},
        parallel_tool_calls=False,
        tools=[FUNCTION],
        tool_choice={"type": "function", "name": "f"},
    )
    assert request.wants_logprobs
    assert request.chat_tool_choice == {"type": "function", "function": {"name": "f"}}
    assert request.function_tools.chat == [
        {
            "type": "function",
            "function": {"name": "f", "parameters": {"type": "object"}, "strict": True},
        }
    ]


#: A value of each field as a client sends it (Codex's own where it sends one).
SDK_FIELD_VALUES: dict[str, Any] = {
    "model": "m",
    "input": [{"type": "message", "role": "user", "content": "x"}],
    "instructions": "be brief",
    "previous_response_id": None,
    "store": False,
    "stream": True,
    "metadata": {"k": "v"},
    "temperature": 0.5,
    "top_p": 0.9,
    "max_output_tokens": 16,
    "tools": [FUNCTION, {"type": "web_search"}],
    "tool_choice": "auto",
    "parallel_tool_calls": True,
    "text": {"format": {"type": "text"}, "verbosity": "low"},
    "include": ["reasoning.encrypted_content"],
    "top_logprobs": 2,
    "prompt_cache_key": "thread-1",
    "user": "u",
    "safety_identifier": "s",
    "prompt_cache_retention": "24h",
    "prompt_cache_options": {"mode": "implicit"},
    "service_tier": "auto",
    "reasoning": {"summary": "auto"},
    "max_tool_calls": 3,
    "truncation": "disabled",
    "background": False,
    "background_options": {},
    "image": {"context_compression": "auto"},
    "access_programs": {"cyber": "standard"},
    "stream_options": {"include_obfuscation": False},
    "context_management": [{"type": "compaction", "compact_threshold": 1000}],
    "moderation": {"model": "omni-moderation-latest"},
    "client_metadata": {"thread_id": "t", "x-codex-turn-metadata": '{"turn_id": "x"}'},
    "conversation": None,
    "prompt": None,
}


def sdk_fields() -> set[str]:
    from openai.types.responses import response_create_params as sdk

    fields: set[str] = {"client_metadata"}
    for params in (sdk.ResponseCreateParamsStreaming, sdk.ResponseCreateParamsNonStreaming):
        fields |= params.__required_keys__ | params.__optional_keys__
    return fields


def test_every_field_of_the_installed_sdk_is_classified_and_accepted() -> None:
    """A field a newer SDK adds fails here until it is served or documented as no-op."""
    from realtime.dialects.responses.request import (
        NO_EFFECT_FIELDS,
        REFUSED_FIELDS,
        SERVED_FIELDS,
    )

    fields = sdk_fields()
    classified = SERVED_FIELDS | NO_EFFECT_FIELDS | REFUSED_FIELDS
    assert fields == classified, (sorted(fields - classified), sorted(classified - fields))
    assert not SERVED_FIELDS & NO_EFFECT_FIELDS and not REFUSED_FIELDS & classified - REFUSED_FIELDS
    assert set(SDK_FIELD_VALUES) == fields
    request = parse_responses_request(SDK_FIELD_VALUES)  # every field at once is accepted
    assert request.wants_encrypted_reasoning and request.function_tools.names == ["f"]
    for name in sorted(fields):  # and each alone
        alone = {"model": "m", "input": "x", "stream": True, name: SDK_FIELD_VALUES[name]}
        parse_responses_request(alone)


def test_every_sdk_field_is_in_the_protocol_reference() -> None:
    text = (REPO_ROOT / "docs" / "protocol.md").read_text(encoding="utf-8")
    section = text[text.index("### The Responses API (`/v1/responses`)") :]
    section = section[: section.index("#### The response store")]
    missing = sorted(name for name in sdk_fields() if f"`{name}`" not in section)
    assert not missing, missing


def test_the_socket_event_is_the_same_request_with_its_own_fields() -> None:
    from openai.types.responses import ResponsesClientEvent
    from pydantic import TypeAdapter

    from realtime.dialects.responses.request import ResponseCreateEvent

    event = {
        "type": "response.create",
        "model": "m",
        "input": "hi",
        "stream_id": "lane-1",
        "generate": True,
        "store": False,
    }
    TypeAdapter(ResponsesClientEvent).validate_python(event)  # the SDK sends exactly this
    parsed = parse_responses_request(event, model=ResponseCreateEvent)
    assert isinstance(parsed, ResponseCreateEvent)
    assert parsed.stream_id == "lane-1" and not parsed.stores and len(parsed.items) == 1
    with pytest.raises(UnknownFieldError):
        parse_responses_request({**event, "lane": "x"}, model=ResponseCreateEvent)
    with pytest.raises(UnknownFieldError) as info:
        parse(input="hi", stream_id="lane-1")  # not an HTTP field
    assert info.value.param == "stream_id"
