"""A Messages request as the neutral request: conversation, tools, thinking, limits."""

from __future__ import annotations

from typing import Any

import pytest

from realtime.chat.conversation import template_messages
from realtime.dialects.messages.build import (
    MessagesOptions,
    messages_generation,
    parse_count_tokens_request,
    parse_messages_request,
)
from realtime.protocol.conversation import (
    FunctionCall,
    FunctionCallOutput,
    Message,
    NamedFunction,
    Reasoning,
)
from realtime.protocol.errors import InvalidRequestError, UnsupportedFeatureError
from realtime.protocol.generation_request import GenerationRequest

BILLING = {"type": "text", "text": "x-anthropic-billing-header: cc_version=2.1.0.abc;"}
TOOL = {"name": "Bash", "description": "Run it.", "input_schema": {"type": "object"}}


def build(options: MessagesOptions | None = None, **fields: Any) -> GenerationRequest:
    body = {"model": "m", "max_tokens": 100, "messages": [{"role": "user", "content": "hi"}]}
    body.update(fields)
    return messages_generation(parse_messages_request(body), options or MessagesOptions())


def test_a_claude_code_conversation_becomes_items_in_order() -> None:
    request = build(
        system=[
            BILLING,
            {"type": "text", "text": "You are an agent.", "cache_control": {"type": "ephemeral"}},
        ],
        tools=[TOOL],
        messages=[
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "reminder"},
                    {"type": "text", "text": "list files"},
                ],
            },
            {"role": "system", "content": [{"type": "text", "text": "# Environment"}]},
            {
                "role": "assistant",
                "content": [
                    {"type": "thinking", "thinking": "I should run ls.", "signature": "sig"},
                    {"type": "redacted_thinking", "data": "opaque"},
                    {"type": "text", "text": "Running ls."},
                    {
                        "type": "tool_use",
                        "id": "toolu_1",
                        "name": "Bash",
                        "input": {"command": "ls"},
                    },
                ],
            },
            {
                "role": "user",
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": "toolu_1",
                        "content": [{"type": "text", "text": "a.txt"}],
                    },
                    {
                        "type": "tool_result",
                        "tool_use_id": "toolu_2",
                        "content": "failed",
                        "is_error": True,
                    },
                    {"type": "text", "text": "and now?"},
                ],
            },
        ],
    )
    assert request.conversation == (
        Message("system", ("You are an agent.",)),  # the billing line left out
        Message("user", ("reminder", "list files")),
        Message("system", ("# Environment",)),  # kept where it was sent
        Reasoning("I should run ls."),
        Message("assistant", ("Running ls.",)),
        FunctionCall("toolu_1", "Bash", '{"command":"ls"}'),
        FunctionCallOutput("toolu_1", ("a.txt",)),
        FunctionCallOutput("toolu_2", ("failed",)),
        Message("user", ("and now?",)),
    )
    rendered = template_messages(request.conversation)
    assert [m["role"] for m in rendered] == [
        "system",
        "user",
        "system",
        "assistant",
        "tool",
        "tool",
        "user",
    ]
    assert rendered[3]["reasoning_content"] == "I should run ls."
    assert rendered[3]["tool_calls"][0]["function"]["arguments"] == {"command": "ls"}


def test_the_billing_line_is_kept_when_the_server_says_so() -> None:
    request = build(MessagesOptions(keep_billing_header=True), system=[BILLING])
    assert request.conversation[0] == Message("system", (BILLING["text"],))
    assert build(system="plain system").conversation[0] == Message("system", ("plain system",))


def test_limits_sampling_and_stops() -> None:
    request = build(max_tokens=32000, temperature=0.5, top_p=0.9, top_k=40, stop_sequences=["END"])
    assert (request.max_tokens, request.max_tokens_explicit, request.max_tokens_clamp) == (
        32000,
        True,
        True,
    )
    assert (request.sampling.temperature, request.sampling.top_p, request.sampling.top_k) == (
        0.5,
        0.9,
        40,
    )
    assert request.stopping.strings == ("END",)
    assert request.paths.max_tokens == "max_tokens" and request.paths.input == "messages"


@pytest.mark.parametrize(
    ("thinking", "switch"),
    [
        (None, None),
        ({"type": "enabled", "budget_tokens": 50}, True),
        ({"type": "adaptive", "display": "omitted"}, True),
        ({"type": "disabled"}, False),
    ],
)
def test_thinking_is_the_templates_switch(thinking: Any, switch: bool | None) -> None:
    fields = {"thinking": thinking} if thinking is not None else {}
    assert build(**fields).thinking is switch


def test_a_thinking_budget_must_be_given_and_below_max_tokens() -> None:
    with pytest.raises(InvalidRequestError) as missing:
        build(thinking={"type": "enabled"})
    assert missing.value.param == "thinking.budget_tokens"
    with pytest.raises(InvalidRequestError) as too_big:
        build(max_tokens=100, thinking={"type": "enabled", "budget_tokens": 100})
    assert too_big.value.param == "thinking.budget_tokens"


@pytest.mark.parametrize(
    ("choice", "neutral", "parallel"),
    [
        ({"type": "auto"}, "auto", None),
        ({"type": "auto", "disable_parallel_tool_use": True}, "auto", False),
        ({"type": "any"}, "required", None),
        ({"type": "none"}, "none", None),
        ({"type": "tool", "name": "Bash"}, NamedFunction("Bash"), None),
    ],
)
def test_tool_choice(choice: Any, neutral: Any, parallel: bool | None) -> None:
    request = build(tools=[TOOL], tool_choice=choice)
    assert request.tool_choice == neutral and request.parallel_tool_calls is parallel
    assert request.tools is not None and request.tools[0].parameters == {"type": "object"}


@pytest.mark.parametrize(
    ("choice", "param"),
    [
        ({"type": "tool"}, "tool_choice.name"),
        ({"type": "tool", "name": "Nope"}, "tool_choice.name"),
        ({"type": "auto", "name": "Bash"}, "tool_choice.name"),
    ],
)
def test_a_bad_tool_choice_is_named(choice: Any, param: str) -> None:
    with pytest.raises(InvalidRequestError) as info:
        build(tools=[TOOL], tool_choice=choice)
    assert info.value.param == param


def test_hosted_tools_and_images_are_refused_where_they_are() -> None:
    with pytest.raises(UnsupportedFeatureError) as hosted:
        build(tools=[TOOL, {"type": "bash_20250124", "name": "bash"}])
    assert hosted.value.param == "tools.1.type"
    with pytest.raises(InvalidRequestError) as schema:
        build(tools=[{"name": "x", "input_schema": "no"}])
    assert schema.value.param == "tools.0.input_schema"
    image = {"type": "image", "source": {"type": "url", "url": "http://x/y.png"}}
    with pytest.raises(UnsupportedFeatureError) as picture:
        build(messages=[{"role": "user", "content": [{"type": "text", "text": "see"}, image]}])
    assert picture.value.param == "messages.0.content.1"
    result = {"type": "tool_result", "tool_use_id": "t", "content": [image]}
    with pytest.raises(UnsupportedFeatureError) as inner:
        build(messages=[{"role": "user", "content": [result]}])
    assert inner.value.param == "messages.0.content.0.content.0"


def test_blocks_in_the_wrong_turn_and_a_prefill_are_refused() -> None:
    use = {"type": "tool_use", "id": "t", "name": "Bash", "input": {}}
    with pytest.raises(InvalidRequestError) as wrong:
        build(messages=[{"role": "user", "content": [use]}])
    assert wrong.value.param == "messages.0.content.0"
    with pytest.raises(UnsupportedFeatureError) as prefill:
        build(
            messages=[{"role": "user", "content": "hi"}, {"role": "assistant", "content": "Sure"}]
        )
    assert prefill.value.param == "messages.1"


def test_structured_output() -> None:
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}}
    request = build(
        output_config={"format": {"type": "json_schema", "schema": schema}, "effort": "low"}
    )
    assert request.format is not None and request.format.schema == schema
    assert request.paths.format == "output_config.format"
    beta = build(output_format={"type": "json_schema", "schema": schema})
    assert beta.format is not None and beta.paths.format == "output_format"


def test_count_tokens_builds_the_same_prompt_without_a_limit() -> None:
    body = {"model": "m", "system": "s", "messages": [{"role": "user", "content": "hi"}]}
    request = messages_generation(parse_count_tokens_request(body))
    assert request.max_tokens is None
    assert request.conversation == (Message("system", ("s",)), Message("user", ("hi",)))
