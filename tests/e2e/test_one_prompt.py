"""One conversation, five transports, one prompt: the token ids the engine is asked to run.

The same conversation (a system prompt, a user message of two text parts, an
assistant answer with its reasoning and a function call, the call's output) is
sent through chat completions over HTTP and over the socket's chat frames, the
Responses API over HTTP and in WebSocket mode, and the Realtime events, to a real
server on the tiny model (a real tokenizer and a Qwen-style template that renders
reasoning and tool calls). The engine records the prompt token ids of every
request; they must be byte-identical, so a prefix cached through one API is found
by every other. The Realtime API has no reasoning item, so it sends the same
conversation without the reasoning, and is compared with chat completions sent
that way too.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncGenerator, Iterator
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

import openai  # noqa: E402
import websockets  # noqa: E402

from realtime.config import ServerConfig  # noqa: E402
from realtime.engine.base import EngineOutput, EngineRequest  # noqa: E402
from realtime.engine.cpu.engine import CpuEngine  # noqa: E402
from tests.conftest import RunningServer, start_server  # noqa: E402

MODEL = "tiny"
SYSTEM = "You are terse."
PARTS = ("What is the weather", "in Oslo today?")
REASONING = "They want today's weather; call the tool."
ANSWER = "Let me look that up."
CALL = ("call_1", "weather", '{"city": "Oslo"}')
OUTPUT = "Sunny, 21 degrees."
PARAMETERS = {"type": "object", "properties": {"city": {"type": "string"}}}


class RecordingEngine(CpuEngine):
    """The cpu engine, noting each request's prompt token ids by its request id."""

    prompts: list[list[int]]

    async def generate(self, request: EngineRequest) -> AsyncGenerator[EngineOutput, None]:
        self.prompts.append(list(request.prompt_token_ids))
        async for output in super().generate(request):
            yield output


@pytest.fixture(scope="module")
def server(tiny_model_dir: Path) -> Iterator[RunningServer]:
    engine = RecordingEngine(tiny_model_dir, model_name=MODEL)
    engine.prompts = []
    running = start_server(ServerConfig(log_level="warning"), engine)  # type: ignore[arg-type]
    yield running
    running.stop()


def chat_messages(reasoning: bool) -> list[dict[str, Any]]:
    assistant: dict[str, Any] = {
        "role": "assistant",
        "content": ANSWER,
        "tool_calls": [
            {"id": CALL[0], "type": "function", "function": {"name": CALL[1], "arguments": CALL[2]}}
        ],
    }
    if reasoning:
        assistant["reasoning_content"] = REASONING
    return [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": [{"type": "text", "text": text} for text in PARTS]},
        assistant,
        {"role": "tool", "tool_call_id": CALL[0], "content": OUTPUT},
    ]


CHAT_TOOLS = [
    {"type": "function", "function": {"name": CALL[1], "parameters": PARAMETERS}},
]
RESPONSES_TOOLS = [{"type": "function", "name": CALL[1], "parameters": PARAMETERS}]
RESPONSES_INPUT: list[dict[str, Any]] = [
    {"role": "system", "content": SYSTEM},
    {"role": "user", "content": [{"type": "input_text", "text": text} for text in PARTS]},
    {
        "type": "reasoning",
        "summary": [],
        "content": [{"type": "reasoning_text", "text": REASONING}],
    },
    {"role": "assistant", "content": [{"type": "output_text", "text": ANSWER}]},
    {"type": "function_call", "call_id": CALL[0], "name": CALL[1], "arguments": CALL[2]},
    {"type": "function_call_output", "call_id": CALL[0], "output": OUTPUT},
]


def last_prompt(server: RunningServer, before: int) -> list[int]:
    prompts = server.engine.prompts
    assert len(prompts) == before + 1, "one request, one engine run"
    return prompts[-1]


def sdk(server: RunningServer) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=server.http_url + "/v1", api_key="x", max_retries=0)


async def chat_http(server: RunningServer, reasoning: bool) -> None:
    async with sdk(server) as client:
        await client.chat.completions.create(
            model=MODEL, messages=chat_messages(reasoning), tools=CHAT_TOOLS, max_tokens=1
        )


async def chat_socket(server: RunningServer) -> None:
    body = {
        "model": MODEL,
        "messages": chat_messages(True),
        "tools": CHAT_TOOLS,
        "max_tokens": 1,
        "request_id": "r1",
    }
    async with websockets.connect(server.ws_url) as ws:
        await ws.send(json.dumps(body))
        while json.loads(await ws.recv()).get("type") != "response.done":
            pass


async def responses_http(server: RunningServer) -> None:
    async with sdk(server) as client:
        await client.responses.create(
            model=MODEL, input=RESPONSES_INPUT, tools=RESPONSES_TOOLS, max_output_tokens=1
        )


async def responses_socket(server: RunningServer) -> None:
    async with sdk(server) as client, client.responses.connect() as connection:
        await connection.send(
            {
                "type": "response.create",
                "model": MODEL,
                "input": RESPONSES_INPUT,
                "tools": RESPONSES_TOOLS,
                "max_output_tokens": 1,
            }
        )
        async for event in connection:
            if event.type in ("response.completed", "response.incomplete", "response.failed"):
                return


async def realtime_events(server: RunningServer) -> None:
    items = [
        {"type": "message", "role": "system", "content": [{"type": "input_text", "text": SYSTEM}]},
        {
            "type": "message",
            "role": "user",
            "content": [{"type": "input_text", "text": text} for text in PARTS],
        },
        {
            "type": "message",
            "role": "assistant",
            "content": [{"type": "output_text", "text": ANSWER}],
        },
        {"type": "function_call", "call_id": CALL[0], "name": CALL[1], "arguments": CALL[2]},
        {"type": "function_call_output", "call_id": CALL[0], "output": OUTPUT},
    ]
    async with sdk(server) as client, client.realtime.connect(model=MODEL) as conn:
        assert (await conn.recv()).type == "session.created"
        await conn.session.update(
            session={
                "type": "realtime",
                "tools": [{"type": "function", "name": CALL[1], "parameters": PARAMETERS}],
            }
        )
        for item in items:
            await conn.conversation.item.create(item=item)  # type: ignore[arg-type]
        await conn.response.create(response={"max_output_tokens": 1})
        while (event := await conn.recv()).type != "response.done":
            assert event.type != "error", event


def test_every_api_renders_the_same_prompt(server: RunningServer) -> None:
    prompts: dict[str, list[int]] = {}
    for name, send in (
        ("chat over HTTP", lambda: chat_http(server, True)),
        ("chat frames", lambda: chat_socket(server)),
        ("Responses over HTTP", lambda: responses_http(server)),
        ("Responses WebSocket mode", lambda: responses_socket(server)),
    ):
        before = len(server.engine.prompts)
        asyncio.run(send())
        prompts[name] = last_prompt(server, before)
    reference = prompts["chat over HTTP"]
    tokenizer = server.engine.info.tokenizer
    assert REASONING in tokenizer.decode(reference, skip_special_tokens=False)
    for name, prompt in prompts.items():
        assert prompt == reference, name

    before = len(server.engine.prompts)
    asyncio.run(chat_http(server, False))
    without_reasoning = last_prompt(server, before)
    assert without_reasoning != reference
    before = len(server.engine.prompts)
    asyncio.run(realtime_events(server))
    assert last_prompt(server, before) == without_reasoning, "Realtime events"
