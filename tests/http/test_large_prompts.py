"""A large body's prompt is rendered and encoded in a worker thread, through a real server:
while it is held there, `/health` and another client's request are answered."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest

from realtime.config import ServerConfig
from tests.ws.test_large_frames import HOLD_SECONDS, HeldPrepare, big_text

pytestmark = pytest.mark.anyio


def _chat(content: str) -> tuple[str, dict[str, Any]]:
    messages = [{"role": "user", "content": content}]
    return "/v1/chat/completions", {"model": "echo", "messages": messages, "max_tokens": 3}


def _message(content: str) -> tuple[str, dict[str, Any]]:
    messages = [{"role": "user", "content": content}]
    return "/v1/messages", {"model": "echo", "messages": messages, "max_tokens": 3}


def _text(answer: dict[str, Any]) -> str:
    if "choices" in answer:
        return str(answer["choices"][0]["message"]["content"])
    return "".join(block["text"] for block in answer["content"])


@pytest.mark.parametrize("route", [_chat, _message], ids=["chat", "messages"])
async def test_a_large_prompt_is_prepared_off_the_loop(server_factory: Any, route: Any) -> None:
    server = server_factory(ServerConfig(log_level="warning"))
    held = HeldPrepare(server.app.state.pipeline)
    text = big_text()
    async with httpx.AsyncClient(base_url=server.http_url, timeout=30) as http:
        path, body = route(text)
        big = asyncio.create_task(http.post(path, json=body))
        assert await asyncio.to_thread(held.entered.wait, HOLD_SECONDS)
        health = await http.get("/health", timeout=HOLD_SECONDS / 2)
        path, body = route("meanwhile")
        small = await http.post(path, json=body, timeout=HOLD_SECONDS / 2)
        held.release.set()
        answer = await big
    assert not held.held_too_long
    assert health.status_code == 200
    assert _text(small.json()) == "meanwhile"
    assert _text(answer.json()) == " ".join(text.split()[:3])
    big_thread, small_thread = held.threads
    assert big_thread.startswith("realtime-prepare")
    assert not small_thread.startswith("realtime-prepare"), "small requests stay on the loop"
