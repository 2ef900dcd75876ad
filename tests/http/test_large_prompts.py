"""A large body's prompt is rendered and encoded in a worker thread, through a real server:
while it is held there, `/health` and another client's request are answered."""

from __future__ import annotations

import asyncio
import threading
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


def _response(content: str) -> tuple[str, dict[str, Any]]:
    return "/v1/responses", {"model": "echo", "input": content, "max_output_tokens": 3}


def _background(content: str) -> tuple[str, dict[str, Any]]:
    path, body = _response(content)
    return path, {**body, "background": True}


def _text(answer: dict[str, Any]) -> str:
    if "output" in answer:
        return "".join(part["text"] for part in answer["output"][-1]["content"])
    if "choices" in answer:
        return str(answer["choices"][0]["message"]["content"])
    return "".join(block["text"] for block in answer["content"])


@pytest.mark.parametrize(
    "route",
    [_chat, _message, _response, _background],
    ids=["chat", "messages", "responses", "background response"],
)
async def test_a_large_prompt_is_prepared_off_the_loop(server_factory: Any, route: Any) -> None:
    server = server_factory(ServerConfig(log_level="warning"))
    held = HeldPrepare(server.app.state.pipeline)
    text = big_text()
    async with httpx.AsyncClient(base_url=server.http_url, timeout=30) as http:
        path, body = route(text)
        big = asyncio.create_task(http.post(path, json=body))
        assert await asyncio.to_thread(held.entered.wait, HOLD_SECONDS)
        health = await http.get("/health", timeout=HOLD_SECONDS / 2)
        path, body = (_response if route is _background else route)("meanwhile")
        small = await http.post(path, json=body, timeout=HOLD_SECONDS / 2)
        held.release.set()
        answer = await big
    assert not held.held_too_long
    assert health.status_code == 200
    assert _text(small.json()) == "meanwhile"
    if route is _background:  # answered once prepared, before it is generated
        assert answer.json()["status"] == "queued"
    else:
        assert _text(answer.json()) == " ".join(text.split()[:3])
    big_thread, small_thread = held.threads
    assert big_thread.startswith("realtime-prepare")
    assert not small_thread.startswith("realtime-prepare"), "small requests stay on the loop"


class ThreadsOf:
    """Wraps a callable: records the thread each call ran in, by whether its input was large."""

    def __init__(self, patch: pytest.MonkeyPatch, owner: Any, name: str, large: Any) -> None:
        self.threads: dict[bool, set[str]] = {True: set(), False: set()}
        original = getattr(owner, name)

        def recorded(*args: Any, **kwargs: Any) -> Any:
            self.threads[bool(large(*args))].add(threading.current_thread().name)
            return original(*args, **kwargs)

        patch.setattr(owner, name, recorded)

    def assert_only_large_off_the_loop(self) -> None:
        assert self.threads[True], "the large input was never seen"
        assert all(name.startswith("realtime-prepare") for name in self.threads[True])
        assert self.threads[False], "the small input was never seen"
        assert not any(name.startswith("realtime-prepare") for name in self.threads[False])


async def test_count_tokens_renders_a_large_body_off_the_loop(
    server_factory: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    server = server_factory(ServerConfig(log_level="warning"))
    pipeline = server.app.state.pipeline
    render = ThreadsOf(
        monkeypatch,
        pipeline,
        "render_prompt",
        lambda request, *_: len(str(request.conversation)) > 10_000,
    )
    async with httpx.AsyncClient(base_url=server.http_url, timeout=30) as http:
        for text in (big_text(), "small"):
            body = {"model": "echo", "messages": [{"role": "user", "content": text}]}
            answer = await http.post("/v1/messages/count_tokens", json=body)
            assert answer.status_code == 200, answer.text
            assert answer.json()["input_tokens"] > 0
    render.assert_only_large_off_the_loop()


async def test_compact_validates_a_large_body_off_the_loop(
    server_factory: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from realtime.dialects.responses import service

    server = server_factory(ServerConfig(log_level="warning"))
    parse = ThreadsOf(
        monkeypatch, service, "parse_compact_request", lambda data: len(str(data)) > 10_000
    )
    async with httpx.AsyncClient(base_url=server.http_url, timeout=30) as http:
        for text in (big_text(), "small"):
            body = {"model": "echo", "input": [{"role": "user", "content": text}]}
            answer = await http.post("/v1/responses/compact", json=body)
            assert answer.status_code == 200, answer.text
            assert answer.json()["object"] == "response.compaction"
    parse.assert_only_large_off_the_loop()
