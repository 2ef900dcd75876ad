"""A prompt beyond the context whatever it encodes to is refused before it is encoded, on
every API, through a real server: the error each API words its own way, the tokenizer
never handed the text, and the next request served."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import anthropic
import openai
import pytest
from websockets.asyncio.client import connect

from realtime.config import ServerConfig
from realtime.engine.echo import EchoEngine
from tests.conftest import RunningServer
from tests.ws.wsclient import chat, collect_until_terminal, text_of

CONTEXT = 32768
#: 300,000 characters: at least 50,000 echo tokens (six characters at most a token).
HUGE = "x" * 300_000
FLOOR = len(HUGE) // 6
KEY = "sk-test"


@pytest.fixture
def server(server_factory: Callable[..., RunningServer]) -> RunningServer:
    return server_factory(ServerConfig(log_level="warning"), engine=EchoEngine())


@pytest.fixture
def encoded(server: RunningServer, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The length of every text the server's tokenizer encodes."""
    tokenizer = server.engine.info.tokenizer
    encode, lengths = tokenizer.encode, []

    def counting(text: str) -> list[int]:
        lengths.append(len(text))
        return list(encode(text))

    monkeypatch.setattr(tokenizer, "encode", counting)
    return lengths


@pytest.fixture
def rendered(server: RunningServer, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The length of every prompt the server itself renders."""
    template = server.engine.info.chat_template
    render, lengths = template.render, []

    def counting(*args: Any, **kwargs: Any) -> str:
        prompt = render(*args, **kwargs)
        lengths.append(len(prompt))
        return prompt

    monkeypatch.setattr(template, "render", counting)
    return lengths


def _openai(server: RunningServer) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.http_url + "/v1", api_key=KEY, max_retries=0)


def test_chat_completions(server: RunningServer, encoded: list[int], rendered: list[int]) -> None:
    with _openai(server) as client:
        with pytest.raises(openai.BadRequestError) as refused:
            client.chat.completions.create(
                model="echo", messages=[{"role": "user", "content": HUGE}]
            )
        answer = client.chat.completions.create(
            model="echo", messages=[{"role": "user", "content": "after"}]
        )
    error: Any = refused.value.body
    assert error["code"] == "context_length_exceeded" and error["param"] == "messages"
    assert error["message"] == (
        f"the prompt is at least {FLOOR} tokens ({len(HUGE)} characters); "
        f"the model's context is {CONTEXT} tokens"
    )
    assert answer.choices[0].message.content == "after"
    assert max(encoded) < len(HUGE)
    # The body is large, so the decode process refused it; the server never rendered it.
    assert max(rendered) < len(HUGE)


def test_completions(server: RunningServer, encoded: list[int]) -> None:
    with _openai(server) as client:
        with pytest.raises(openai.BadRequestError) as refused:
            client.completions.create(model="echo", prompt=["fine", HUGE])
    error: Any = refused.value.body
    assert error["code"] == "context_length_exceeded" and error["param"] == "prompt"
    assert error["message"].startswith(f"prompt 1 is at least {FLOOR} tokens")
    assert max(encoded, default=0) < len(HUGE)


def test_responses(server: RunningServer, encoded: list[int]) -> None:
    with _openai(server) as client:
        with pytest.raises(openai.BadRequestError) as refused:
            client.responses.create(model="echo", input=HUGE, truncation="auto")
    error: Any = refused.value.body
    assert error["code"] == "context_length_exceeded"
    assert f"at least {FLOOR} tokens" in error["message"]
    assert max(encoded, default=0) < len(HUGE)


def test_messages(server: RunningServer, encoded: list[int], rendered: list[int]) -> None:
    with anthropic.Anthropic(base_url=server.http_url, api_key=KEY, max_retries=0) as client:
        with pytest.raises(anthropic.BadRequestError) as refused:
            client.messages.create(
                model="echo", max_tokens=5, messages=[{"role": "user", "content": HUGE}]
            )
    body: Any = refused.value.body
    # Claude Code reads the first number to decide how much to compact.
    assert body["error"]["message"] == f"prompt is too long: {FLOOR} tokens > {CONTEXT} maximum"
    assert max(encoded, default=0) < len(HUGE)
    assert max(rendered, default=0) < len(HUGE)  # refused in the decode process


@pytest.mark.anyio
async def test_the_chat_socket(
    server: RunningServer, encoded: list[int], rendered: list[int]
) -> None:
    async with connect(server.ws_url, max_size=None) as ws:
        await ws.send(chat(HUGE, request_id="huge"))
        (error,) = await collect_until_terminal(ws)
        await ws.send(chat("after"))
        after = await collect_until_terminal(ws)
    assert error["type"] == "error" and error["request_id"] == "huge"
    assert error["error"]["code"] == "context_length_exceeded"
    assert f"at least {FLOOR} tokens" in error["error"]["message"]
    assert text_of(after) == "after"
    assert max(encoded) < len(HUGE)
    assert max(rendered) < len(HUGE)  # refused in the decode process
