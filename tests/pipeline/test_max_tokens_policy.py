"""`max_tokens` beyond the context, on every API, through a real server (`--max-tokens-policy`).

The echo engine with a 12-token context and a 10-word prompt leaves room for 2
tokens, and its answer (the prompt again) is longer than that. By default every API
cuts an agent's `max_tokens: 32000` to those 2 tokens and ends the answer with its
length finish reason; `--max-tokens-policy error` refuses it as before (400
`context_length_exceeded`, or the socket's `error`). A prompt with no room at all is
refused on both policies.
"""

from __future__ import annotations

import json
from typing import Any

import httpx
import openai
import pytest
from websockets.asyncio.client import connect

from realtime.config import ServerConfig
from realtime.engine.echo import EchoEngine
from tests.conftest import RunningServer
from tests.ws.wsclient import chat, collect_until_terminal, text_of

pytestmark = pytest.mark.anyio

CONTEXT = 12
PROMPT = "one two three four five six seven eight nine ten"  # 10 tokens: room for 2
AGENT_LIMIT = 32_000  # what opencode and Claude Code send, whatever the model


def start(server_factory: Any, policy: str | None = None) -> RunningServer:
    config = ServerConfig(log_level="warning")
    if policy is not None:
        config = ServerConfig(log_level="warning", max_tokens_policy=policy)
    server: RunningServer = server_factory(config, engine=EchoEngine(context_length=CONTEXT))
    return server


def sdk(server: RunningServer) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=server.http_url + "/v1", api_key="x", max_retries=0)


def test_the_default_policy_is_clamp() -> None:
    assert ServerConfig().max_tokens_policy == "clamp"


async def test_every_http_api_clamps_by_default_and_ends_with_length(server_factory):
    server = start(server_factory)
    async with sdk(server) as client:
        chat_answer = await client.chat.completions.create(
            model="echo", messages=[{"role": "user", "content": PROMPT}], max_tokens=AGENT_LIMIT
        )
        completion = await client.completions.create(
            model="echo", prompt=PROMPT, max_tokens=AGENT_LIMIT
        )
        response = await client.responses.create(
            model="echo", input=PROMPT, max_output_tokens=AGENT_LIMIT
        )
        streamed = await client.chat.completions.create(
            model="echo",
            messages=[{"role": "user", "content": PROMPT}],
            max_completion_tokens=AGENT_LIMIT,
            stream=True,
            stream_options={"include_usage": True},
        )
        chunks = [chunk async for chunk in streamed]
    assert chat_answer.choices[0].finish_reason == "length"
    assert chat_answer.choices[0].message.content == "one two"
    assert chat_answer.usage is not None and chat_answer.usage.completion_tokens == 2
    assert completion.choices[0].finish_reason == "length"
    assert completion.usage is not None and completion.usage.completion_tokens == 2
    assert response.status == "incomplete"
    assert response.incomplete_details is not None
    assert response.incomplete_details.reason == "max_output_tokens"
    assert response.output_text == "one two"
    finishes = [c.choices[0].finish_reason for c in chunks if c.choices]
    assert finishes[-1] == "length"
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == 2


async def test_the_sockets_clamp_by_default(server_factory):
    server = start(server_factory)
    async with connect(server.ws_url) as ws:  # chat frames
        await ws.send(chat(PROMPT, request_id="big", max_tokens=AGENT_LIMIT))
        frames = await collect_until_terminal(ws)
    assert frames[-1]["finish_reason"] == "length" and text_of(frames) == "one two"

    async with sdk(server) as client, client.realtime.connect(model="echo") as conn:
        await conn.conversation.item.create(
            item={
                "type": "message",
                "role": "user",
                "content": [{"type": "input_text", "text": PROMPT}],
            }
        )
        await conn.response.create(response={"max_output_tokens": AGENT_LIMIT})
        while (event := await conn.recv()).type != "response.done":
            assert event.type != "error", event
    assert event.response.status == "incomplete"
    assert event.response.status_details is not None
    assert event.response.status_details.reason == "max_output_tokens"

    async with connect(f"ws://127.0.0.1:{server.port}/v1/responses") as ws:  # WebSocket mode
        body = {"type": "response.create", "model": "echo", "input": PROMPT}
        await ws.send(json.dumps({**body, "max_output_tokens": AGENT_LIMIT}))
        while (frame := json.loads(await ws.recv()))["type"] not in (
            "response.completed",
            "response.incomplete",
            "response.failed",
            "error",
        ):
            pass
    assert frame["type"] == "response.incomplete", frame
    assert frame["response"]["incomplete_details"] == {"reason": "max_output_tokens"}


async def test_the_cap_clamps_too(server_factory):
    server = server_factory(ServerConfig(max_tokens_cap=3, log_level="warning"))
    body = {"model": "echo", "messages": [{"role": "user", "content": PROMPT}], "max_tokens": 4}
    async with httpx.AsyncClient(base_url=server.http_url, timeout=10) as client:
        answer = (await client.post("/v1/chat/completions", json=body)).json()
    assert answer["choices"][0]["finish_reason"] == "length"
    assert answer["usage"]["completion_tokens"] == 3


async def test_the_error_policy_refuses_as_before(server_factory):
    server = start(server_factory, "error")
    async with httpx.AsyncClient(base_url=server.http_url + "/v1", timeout=10) as client:
        refused = [
            await client.post(
                "/chat/completions",
                json={
                    "model": "echo",
                    "messages": [{"role": "user", "content": PROMPT}],
                    "max_tokens": AGENT_LIMIT,
                },
            ),
            await client.post(
                "/completions", json={"model": "echo", "prompt": PROMPT, "max_tokens": AGENT_LIMIT}
            ),
            await client.post(
                "/responses",
                json={"model": "echo", "input": PROMPT, "max_output_tokens": AGENT_LIMIT},
            ),
        ]
    for response, param in zip(
        refused, ("max_tokens", "max_tokens", "max_output_tokens"), strict=True
    ):
        assert response.status_code == 400, response.text
        error = response.json()["error"]
        assert (error["code"], error["param"]) == ("context_length_exceeded", param)
    async with connect(server.ws_url) as ws:
        await ws.send(chat(PROMPT, max_tokens=AGENT_LIMIT))
        frames = await collect_until_terminal(ws)
    assert frames[0]["error"]["code"] == "context_length_exceeded"
    assert server.engine.stats.requests_started == 0


@pytest.mark.parametrize("policy", ["clamp", "error"])
async def test_a_prompt_with_no_room_is_refused_on_every_policy(server_factory, policy):
    server = start(server_factory, policy)
    body = {"model": "echo", "messages": [{"role": "user", "content": PROMPT + " x y"}]}
    async with httpx.AsyncClient(base_url=server.http_url, timeout=10) as client:
        response = await client.post("/v1/chat/completions", json={**body, "max_tokens": 5})
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "context_length_exceeded"
