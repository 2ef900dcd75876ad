"""A tool-using conversation end to end: the model calls a tool, the client runs it,
sends the result back in history, and the model answers - over one socket, and over
HTTP with the real openai SDK."""

from __future__ import annotations

import json

import openai
import pytest

from realtime.client import RealtimeClient
from realtime.config import ServerConfig
from realtime.engine.scripted import ScriptedEngine

pytestmark = pytest.mark.anyio

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather for a city",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
        },
    },
}
CALL = (
    "Let me look that up.\n"
    '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Zürich"}}\n</tool_call>'
)
ANSWER = "It is 21 °C and sunny in Zürich."


def run_tool(name: str, arguments: str) -> str:
    assert name == "get_weather"
    return json.dumps({"city": json.loads(arguments)["city"], "celsius": 21, "sky": "sunny"})


async def test_tool_loop_over_one_socket(server_factory, tiny_model_dir):
    engine = ScriptedEngine([CALL, ANSWER], model_dir=tiny_model_dir)
    server = server_factory(ServerConfig(log_level="warning", tool_parser="hermes"), engine)
    messages: list[dict] = [{"role": "user", "content": "Weather in Zürich?"}]
    async with RealtimeClient(server.ws_url, model="scripted") as client:
        first = await client.chat(messages, tools=[WEATHER]).collect()
        assert first.finish_reason == "tool_calls"
        assert first.text.strip() == "Let me look that up."
        (call,) = first.tool_calls
        assert call.id.startswith("call_") and call.name == "get_weather"
        assert json.loads(call.arguments) == {"city": "Zürich"}

        messages.append(
            {
                "role": "assistant",
                "content": first.text,
                "tool_calls": [
                    {
                        "id": call.id,
                        "type": "function",
                        "function": {"name": call.name, "arguments": call.arguments},
                    }
                ],
            }
        )
        messages.append(
            {
                "role": "tool",
                "tool_call_id": call.id,
                "content": run_tool(call.name, call.arguments),
            }
        )
        second = await client.chat(messages, tools=[WEATHER]).collect()
        assert len(server.sessions()) == 1, "both turns ran on one socket"
    assert second.text == ANSWER and second.finish_reason == "stop" and not second.tool_calls
    assert engine.remaining == []
    # The second prompt carries the call and its result, rendered by the model's template.
    second_prompt = engine.prompts[1]
    assert '"name": "get_weather"' in second_prompt and '"celsius": 21' in second_prompt
    assert second_prompt.index("<tool_call>") < second_prompt.index("celsius")


async def test_openai_sdk_streams_a_tool_call_whose_arguments_parse(server_factory, tiny_model_dir):
    engine = ScriptedEngine([CALL], model_dir=tiny_model_dir)
    server = server_factory(ServerConfig(log_level="warning", tool_parser="hermes"), engine)
    client = openai.AsyncOpenAI(base_url=server.http_url + "/v1", api_key="unused")
    stream = await client.chat.completions.create(
        model="scripted",
        messages=[{"role": "user", "content": "Weather in Zürich?"}],
        tools=[WEATHER],
        stream=True,
    )
    arguments, names, ids, finish = "", [], [], None
    async for chunk in stream:
        choice = chunk.choices[0]
        for delta in choice.delta.tool_calls or []:
            if delta.id:
                ids.append(delta.id)
            if delta.function and delta.function.name:
                names.append(delta.function.name)
            if delta.function and delta.function.arguments:
                arguments += delta.function.arguments
        finish = choice.finish_reason or finish
    await client.close()
    assert names == ["get_weather"] and len(ids) == 1
    assert json.loads(arguments) == {"city": "Zürich"}
    assert finish == "tool_calls"


async def test_required_tool_choice_unmet_fails_only_that_request(server_factory, tiny_model_dir):
    engine = ScriptedEngine(["I would rather not call anything.", ANSWER], model_dir=tiny_model_dir)
    server = server_factory(ServerConfig(log_level="warning", tool_parser="hermes"), engine)
    client = openai.OpenAI(base_url=server.http_url + "/v1", api_key="unused", max_retries=0)
    with pytest.raises(openai.APIError) as info:
        client.chat.completions.create(
            model="scripted",
            messages=[{"role": "user", "content": "Weather?"}],
            tools=[WEATHER],
            tool_choice="required",
        )
    assert info.value.code == "tool_choice_not_satisfied"
    follow_up = client.chat.completions.create(
        model="scripted", messages=[{"role": "user", "content": "Then just say it."}]
    )
    assert follow_up.choices[0].message.content == ANSWER
