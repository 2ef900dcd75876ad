"""The OpenAI Agents SDK, unmodified, runs an agent with a function tool against the server.

`OpenAIResponsesModel` talks to /v1/responses; the scripted engine (hermes tool
parser) calls the tool, the SDK runs it and sends its output back, and the final
answer depends on that output reaching the model's prompt.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

agents = pytest.importorskip("agents")

from openai import AsyncOpenAI  # noqa: E402

from realtime.config import ServerConfig  # noqa: E402
from realtime.engine.scripted import ScriptedEngine  # noqa: E402

SCRIPT = [
    {
        "match": "weather in Paris",
        "reply": "<tool_call>\n"
        '{"name": "get_weather", "arguments": {"city": "Paris"}}'
        "\n</tool_call>",
    },
    {"match": "sunny, 24 C", "reply": "It is sunny in Paris, 24 degrees."},
]


def test_an_agent_runs_a_function_tool_against_the_server(server_factory: Any) -> None:
    agents.set_tracing_disabled(True)  # no traces sent anywhere
    engine = ScriptedEngine(SCRIPT)
    server = server_factory(ServerConfig(log_level="warning", tool_parser="hermes"), engine)
    calls: list[str] = []

    @agents.function_tool
    def get_weather(city: str) -> str:
        """The current weather in a city."""
        calls.append(city)
        return "sunny, 24 C"

    async def run() -> Any:
        client = AsyncOpenAI(base_url=server.http_url + "/v1", api_key="x", max_retries=0)
        model = agents.OpenAIResponsesModel(model="scripted", openai_client=client)
        agent = agents.Agent(
            name="weather",
            instructions="Answer questions about the weather.",
            tools=[get_weather],
            model=model,
        )
        try:
            return await agents.Runner.run(agent, "What is the weather in Paris?")
        finally:
            await client.close()

    result = asyncio.run(run())
    assert calls == ["Paris"]
    assert result.final_output == "It is sunny in Paris, 24 degrees."
    # the second turn's prompt carried the tool's output and the instructions
    assert "sunny, 24 C" in engine.prompts[-1]
    assert "Answer questions about the weather." in engine.prompts[-1]
