"""The Messages API against a real server, driven by the real `anthropic` SDK.

The scripted engine answers (hermes tool-call markup, `<think>` reasoning), so every
block kind and stop reason is produced on purpose: create, stream, a tool round
trip, thinking blocks sent back, count_tokens, and every error shape.
"""

from __future__ import annotations

import json
from typing import Any

import anthropic
import httpx
import pytest

from realtime.config import ServerConfig
from realtime.engine.scripted import ScriptedEngine
from tests.conftest import RunningServer, start_server

MODEL = "scripted"
KEY = "sk-messages-test"
CALL = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
SCRIPT: list[Any] = [
    {"match": "hello there", "reply": "Hi! How can I help?"},
    {"match": "weather in Paris", "reply": CALL},
    {"match": "18 degrees and sunny", "reply": "It is 18 degrees and sunny in Paris."},
    {"match": "think first", "reply": "<think>Let me weigh it.</think>Forty-two."},
    {"match": "count to ten", "reply": "one two three four five six seven eight nine ten"},
    {"match": "say STOP", "reply": "before STOP after"},
]
WEATHER = {
    "name": "get_weather",
    "description": "The weather in a city.",
    "input_schema": {
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
    },
}


@pytest.fixture(scope="module")
def server() -> Any:
    engine = ScriptedEngine(SCRIPT)
    config = ServerConfig(
        log_level="warning",
        tool_parser="hermes",
        reasoning_parser="qwen3",
        api_keys=(KEY,),
    )
    running = start_server(config, engine)
    yield running
    running.stop()


@pytest.fixture
def client(server: RunningServer) -> Any:
    with anthropic.Anthropic(base_url=server.http_url, api_key=KEY, max_retries=0) as c:
        yield c


def test_create_answers_with_a_text_block(client: anthropic.Anthropic) -> None:
    message = client.messages.create(
        model=MODEL, max_tokens=100, messages=[{"role": "user", "content": "hello there"}]
    )
    assert message.type == "message" and message.role == "assistant"
    assert message.id.startswith("msg_")
    assert [block.type for block in message.content] == ["text"]
    assert message.content[0].text == "Hi! How can I help?"  # type: ignore[union-attr]
    assert message.stop_reason == "end_turn" and message.stop_sequence is None
    usage = message.usage
    assert usage.input_tokens > 0 and usage.output_tokens > 0
    assert usage.cache_read_input_tokens is not None
    assert usage.cache_creation_input_tokens == 0


def test_stream_sends_every_event_in_order(client: anthropic.Anthropic) -> None:
    with client.messages.stream(
        model=MODEL, max_tokens=100, messages=[{"role": "user", "content": "hello there"}]
    ) as stream:
        kinds = [event.type for event in stream]
        final = stream.get_final_message()
    assert kinds[0] == "message_start"
    assert kinds[-2:] == ["message_delta", "message_stop"]
    blocks = [k for k in kinds if k.startswith("content_block")]
    assert blocks[0] == "content_block_start" and blocks[-1] == "content_block_stop"
    assert "text" in kinds  # the SDK's own event for a text delta
    assert final.content[0].text == "Hi! How can I help?"  # type: ignore[union-attr]
    assert final.stop_reason == "end_turn"
    assert final.usage.output_tokens > 0


def test_raw_sse_names_every_event(server: RunningServer) -> None:
    body = {
        "model": MODEL,
        "max_tokens": 50,
        "stream": True,
        "messages": [{"role": "user", "content": "hello there"}],
    }
    with httpx.Client() as http:
        response = http.post(
            server.http_url + "/v1/messages?beta=true",
            json=body,
            headers={"x-api-key": KEY, "anthropic-version": "2023-06-01"},
        )
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/event-stream")
    frames = [f for f in response.text.split("\n\n") if f.strip()]
    names = []
    for frame in frames:
        event_line, data_line = frame.split("\n")
        name = event_line.removeprefix("event: ")
        data = json.loads(data_line.removeprefix("data: "))
        assert data["type"] == name
        names.append(name)
    assert names[0] == "message_start" and names[-1] == "message_stop"
    assert "[DONE]" not in response.text


def test_a_tool_round_trip(client: anthropic.Anthropic) -> None:
    ask = {"role": "user", "content": "What is the weather in Paris?"}
    first = client.messages.create(model=MODEL, max_tokens=200, tools=[WEATHER], messages=[ask])
    assert first.stop_reason == "tool_use"
    [call] = [block for block in first.content if block.type == "tool_use"]
    assert call.name == "get_weather" and call.input == {"city": "Paris"}
    second = client.messages.create(
        model=MODEL,
        max_tokens=200,
        tools=[WEATHER],
        messages=[
            ask,
            {"role": "assistant", "content": first.content},  # type: ignore[typeddict-item]
            {
                "role": "user",
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": call.id,
                        "content": "18 degrees and sunny",
                    }
                ],
            },
        ],
    )
    assert second.stop_reason == "end_turn"
    assert second.content[0].text == "It is 18 degrees and sunny in Paris."  # type: ignore[union-attr]


def test_a_streamed_tool_call_arrives_as_input_json_deltas(client: anthropic.Anthropic) -> None:
    with client.messages.stream(
        model=MODEL,
        max_tokens=200,
        tools=[WEATHER],
        messages=[{"role": "user", "content": "weather in Paris"}],
    ) as stream:
        events = list(stream)
        final = stream.get_final_message()
    deltas = [
        e.delta.type
        for e in events
        if e.type == "content_block_delta"  # type: ignore[union-attr]
    ]
    assert "input_json_delta" in deltas
    [call] = final.content
    assert call.type == "tool_use" and call.input == {"city": "Paris"}
    assert final.stop_reason == "tool_use"


def test_thinking_comes_back_as_a_thinking_block_and_goes_in_again(
    client: anthropic.Anthropic,
) -> None:
    ask = {"role": "user", "content": "think first: what is six times seven?"}
    message = client.messages.create(
        model=MODEL,
        max_tokens=200,
        thinking={"type": "enabled", "budget_tokens": 100},
        messages=[ask],
    )
    thinking, text = message.content
    assert thinking.type == "thinking" and thinking.thinking == "Let me weigh it."
    assert thinking.signature
    assert text.type == "text" and text.text == "Forty-two."
    # Sent back as Claude Code does (thinking and redacted thinking in an assistant turn).
    again = client.messages.create(
        model=MODEL,
        max_tokens=50,
        messages=[
            ask,
            {
                "role": "assistant",
                "content": [
                    {"type": "redacted_thinking", "data": "opaque"},
                    *[block.model_dump() for block in message.content],
                ],
            },
            {"role": "user", "content": "hello there"},
        ],
    )
    assert again.content[0].text == "Hi! How can I help?"  # type: ignore[union-attr]
    with client.messages.stream(
        model=MODEL, max_tokens=200, thinking={"type": "adaptive"}, messages=[ask]
    ) as stream:
        deltas = [
            e.delta.type  # type: ignore[union-attr]
            for e in stream
            if e.type == "content_block_delta"
        ]
    assert "thinking_delta" in deltas and "signature_delta" in deltas


def test_max_tokens_beyond_the_context_is_clamped(client: anthropic.Anthropic) -> None:
    """Far beyond the 32k context: answered (the SDK insists on a stream for that much)."""
    with client.messages.stream(
        model=MODEL, max_tokens=10_000_000, messages=[{"role": "user", "content": "hello there"}]
    ) as stream:
        message = stream.get_final_message()
    assert message.stop_reason == "end_turn"
    assert message.content[0].text == "Hi! How can I help?"  # type: ignore[union-attr]


def test_reaching_max_tokens_stops_with_max_tokens(client: anthropic.Anthropic) -> None:
    message = client.messages.create(
        model=MODEL, max_tokens=3, messages=[{"role": "user", "content": "count to ten"}]
    )
    assert message.stop_reason == "max_tokens"
    assert message.usage.output_tokens == 3


def test_a_stop_sequence_is_reported(client: anthropic.Anthropic) -> None:
    message = client.messages.create(
        model=MODEL,
        max_tokens=50,
        stop_sequences=["STOP"],
        messages=[{"role": "user", "content": "say STOP"}],
    )
    assert message.stop_reason == "stop_sequence" and message.stop_sequence == "STOP"
    assert message.content[0].text == "before "  # type: ignore[union-attr]


def test_count_tokens_counts_the_prompt_generation_sees(client: anthropic.Anthropic) -> None:
    messages: Any = [{"role": "user", "content": "hello there"}]
    counted = client.messages.count_tokens(
        model=MODEL, system="Be brief.", tools=[WEATHER], messages=messages
    )
    answer = client.messages.create(
        model=MODEL, max_tokens=20, system="Be brief.", tools=[WEATHER], messages=messages
    )
    assert counted.input_tokens > 0
    usage = answer.usage
    assert counted.input_tokens == usage.input_tokens + (usage.cache_read_input_tokens or 0)


def test_the_key_may_come_as_a_bearer_token(server: RunningServer) -> None:
    with anthropic.Anthropic(
        base_url=server.http_url, auth_token=KEY, api_key=None, max_retries=0
    ) as client:
        message = client.messages.create(
            model=MODEL, max_tokens=20, messages=[{"role": "user", "content": "hello there"}]
        )
    assert message.content[0].text == "Hi! How can I help?"  # type: ignore[union-attr]


def _error(exc: anthropic.APIStatusError) -> dict[str, Any]:
    body = exc.response.json()
    assert set(body) == {"type", "error"} and body["type"] == "error"
    assert set(body["error"]) == {"type", "message"}
    return body["error"]  # type: ignore[no-any-return]


def test_errors_come_in_anthropics_shape(
    server: RunningServer, client: anthropic.Anthropic
) -> None:
    hello: Any = [{"role": "user", "content": "hello there"}]
    with pytest.raises(anthropic.AuthenticationError) as auth:
        with anthropic.Anthropic(base_url=server.http_url, api_key="wrong", max_retries=0) as c:
            c.messages.create(model=MODEL, max_tokens=5, messages=hello)
    assert _error(auth.value)["type"] == "authentication_error"

    with pytest.raises(anthropic.NotFoundError) as missing:
        client.messages.create(model="no-such-model", max_tokens=5, messages=hello)
    assert _error(missing.value)["type"] == "not_found_error"

    with pytest.raises(anthropic.BadRequestError) as unknown:
        client.messages.create(
            model=MODEL, max_tokens=5, messages=hello, extra_body={"not_a_field": 1}
        )
    error = _error(unknown.value)
    assert error["type"] == "invalid_request_error" and "not_a_field" in error["message"]

    with pytest.raises(anthropic.BadRequestError) as image:
        client.messages.create(
            model=MODEL,
            max_tokens=5,
            messages=[
                {
                    "role": "user",
                    "content": [
                        {
                            "type": "image",
                            "source": {"type": "base64", "media_type": "image/png", "data": "AA=="},
                        }
                    ],
                }
            ],
        )
    assert _error(image.value)["message"].startswith("messages.0.content.0:")

    with pytest.raises(anthropic.BadRequestError) as hosted:
        client.messages.create(
            model=MODEL,
            max_tokens=5,
            messages=hello,
            tools=[{"type": "web_search_20250305", "name": "web_search"}],
        )
    assert _error(hosted.value)["message"].startswith("tools.0.type:")

    with pytest.raises(anthropic.BadRequestError) as too_long:
        client.messages.create(
            model=MODEL, max_tokens=5, messages=[{"role": "user", "content": "word " * 40_000}]
        )
    message = _error(too_long.value)["message"]
    assert message.startswith("prompt is too long: ") and message.endswith(" maximum")

    with pytest.raises(anthropic.NotFoundError) as no_route:
        client.get("/v1/messages/nope", cast_to=object)
    assert no_route.value.status_code == 404


def test_a_late_failure_is_an_error_event(server: RunningServer) -> None:
    """The script has no reply for this prompt: the engine fails mid-request."""
    body = {
        "model": MODEL,
        "max_tokens": 50,
        "stream": True,
        "messages": [{"role": "user", "content": "nothing in the script matches this"}],
    }
    with httpx.Client() as http:
        response = http.post(
            server.http_url + "/v1/messages", json=body, headers={"x-api-key": KEY}
        )
    assert response.status_code == 200
    last = [f for f in response.text.split("\n\n") if f.strip()][-1]
    event_line, data_line = last.split("\n")
    assert event_line == "event: error"
    data = json.loads(data_line.removeprefix("data: "))
    assert data["type"] == "error" and data["error"]["type"] == "api_error"
    assert "Traceback" not in response.text


def test_refusals_before_any_route_are_in_anthropics_shape_too(server: RunningServer) -> None:
    """The access guard (no key) and the body limit answer before the route runs."""
    url = server.http_url + "/v1/messages"
    with httpx.Client() as http:
        no_key = http.post(url, json={"model": MODEL})
        too_big = http.post(url, content=b"x" * (9 * 1024 * 1024), headers={"x-api-key": KEY})
        elsewhere = http.post(server.http_url + "/v1/chat/completions", json={})
    assert no_key.status_code == 401
    assert no_key.json()["error"]["type"] == "authentication_error"
    assert too_big.status_code == 413
    assert too_big.json() == {
        "type": "error",
        "error": {"type": "request_too_large", "message": too_big.json()["error"]["message"]},
    }
    # the other APIs keep OpenAI's body
    assert elsewhere.json()["error"]["code"] == "missing_api_key"
