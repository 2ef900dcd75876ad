"""Large Responses work runs off the event loop: a real server, HTTP and WebSocket mode.

A 130-byte `response.create` continuing a response of 40,000 input items makes the
server rebuild 40,000 items into a conversation. The store knows each record's size
before any work, so that runs in a worker thread; on the loop it stalled every
other client for as long (issue 27: ten such frames delayed `/health` by 4.3 s).
Creating such a response (validating 40,000 items: a second) runs there too, and a
response in a conversation of 40,000 items is rebuilt there the same way.
Proven by the thread the work runs on, never by timing.
"""

from __future__ import annotations

import json
import threading
from typing import Any

import httpx
import pytest
from websockets.asyncio.client import connect

from realtime.config import ServerConfig
from realtime.dialects.responses import request, service
from tests.conftest import RunningServer

ITEMS = 40_000


@pytest.fixture
def threads(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The names of the threads that convert a history into the neutral request."""
    seen: list[str] = []
    convert = service.responses_generation

    def spy(*args: Any, **kwargs: Any) -> Any:
        seen.append(threading.current_thread().name)
        return convert(*args, **kwargs)

    monkeypatch.setattr(service, "responses_generation", spy)
    return seen


@pytest.fixture
def validating(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The names of the threads that validate a request's input items."""
    seen: list[str] = []
    normalize = request.normalize_input

    def spy(*args: Any, **kwargs: Any) -> Any:
        seen.append(threading.current_thread().name)
        return normalize(*args, **kwargs)

    monkeypatch.setattr(request, "normalize_input", spy)
    return seen


def huge_response(server: RunningServer) -> str:
    items = [{"role": "user", "content": "m"} for _ in range(ITEMS)]
    with httpx.Client(base_url=server.http_url, timeout=60) as client:
        created = client.post(
            "/v1/responses", json={"model": "echo", "input": items, "max_output_tokens": 1}
        )
    assert created.status_code == 200, created.text
    response_id: str = created.json()["id"]
    return response_id


def test_an_http_continuation_of_a_huge_response_is_rebuilt_off_the_loop(
    server_factory: Any, threads: list[str]
) -> None:
    server = server_factory(ServerConfig(log_level="warning", max_body_bytes=64 << 20))
    previous = huge_response(server)
    threads.clear()  # the create itself was large in its own right
    with httpx.Client(base_url=server.http_url, timeout=60) as client:
        continued = client.post(
            "/v1/responses",
            json={"model": "echo", "input": "next", "previous_response_id": previous},
        )
    assert continued.status_code == 200, continued.text
    assert threads and server.thread.name not in threads, threads


@pytest.mark.anyio
async def test_a_socket_continuation_of_a_huge_response_is_rebuilt_off_the_loop(
    server_factory: Any, threads: list[str]
) -> None:
    server = server_factory(ServerConfig(log_level="warning", max_body_bytes=64 << 20))
    previous = huge_response(server)
    threads.clear()
    create = {
        "type": "response.create",
        "model": "echo",
        "input": "next",
        "previous_response_id": previous,
    }
    async with connect(f"ws://127.0.0.1:{server.port}/v1/responses") as ws:
        await ws.send(json.dumps(create))  # 130 bytes
        while True:
            event = json.loads(await ws.recv())
            if event["type"] in ("response.completed", "response.failed", "error"):
                break
    assert event["type"] == "response.completed", event
    assert threads and server.thread.name not in threads, threads


def test_a_huge_http_create_is_validated_off_the_loop(
    server_factory: Any, validating: list[str]
) -> None:
    server = server_factory(ServerConfig(log_level="warning", max_body_bytes=64 << 20))
    huge_response(server)
    assert validating and server.thread.name not in validating, validating


@pytest.mark.anyio
async def test_a_huge_socket_create_is_validated_off_the_loop(
    server_factory: Any, validating: list[str]
) -> None:
    server = server_factory(ServerConfig(log_level="warning"))
    items = [{"role": "user", "content": "m"} for _ in range(ITEMS)]
    create = {"type": "response.create", "model": "echo", "input": items, "max_output_tokens": 1}
    async with connect(f"ws://127.0.0.1:{server.port}/v1/responses", max_size=None) as ws:
        await ws.send(json.dumps(create))
        while True:
            event = json.loads(await ws.recv())
            if event["type"] in ("response.completed", "response.incomplete", "error"):
                break
        assert event["type"] == "response.incomplete", event
        # a large create for another model is refused in its turn, as a small one is
        await ws.send(json.dumps({**create, "model": "other"}))
        refused = json.loads(await ws.recv())
        assert refused["type"] == "error" and refused["error"]["code"] == "model_not_found"
    assert validating and server.thread.name not in validating, validating


def huge_conversation(server: RunningServer) -> str:
    """A conversation of 40,000 items (one response's input), made over HTTP."""
    items = [{"role": "user", "content": "m"} for _ in range(ITEMS)]
    with httpx.Client(base_url=server.http_url, timeout=60) as client:
        conversation_id: str = client.post("/v1/conversations", json={}).json()["id"]
        created = client.post(
            "/v1/responses",
            json={
                "model": "echo",
                "input": items,
                "max_output_tokens": 1,
                "conversation": conversation_id,
            },
        )
    assert created.status_code == 200, created.text
    return conversation_id


def test_an_http_response_in_a_huge_conversation_is_rebuilt_off_the_loop(
    server_factory: Any, threads: list[str]
) -> None:
    server = server_factory(ServerConfig(log_level="warning", max_body_bytes=64 << 20))
    conversation_id = huge_conversation(server)
    threads.clear()
    with httpx.Client(base_url=server.http_url, timeout=60) as client:
        continued = client.post(
            "/v1/responses",
            json={"model": "echo", "input": "next", "conversation": conversation_id},
        )
        listed = client.get(f"/v1/conversations/{conversation_id}/items", params={"limit": 2})
    assert continued.status_code == 200, continued.text
    assert threads and server.thread.name not in threads, threads
    assert [item["content"][0]["text"] for item in listed.json()["data"]] == ["next", "next"]


@pytest.mark.anyio
async def test_a_socket_response_in_a_huge_conversation_is_rebuilt_off_the_loop(
    server_factory: Any, threads: list[str]
) -> None:
    server = server_factory(ServerConfig(log_level="warning", max_body_bytes=64 << 20))
    conversation_id = huge_conversation(server)
    threads.clear()
    create = {
        "type": "response.create",
        "model": "echo",
        "input": "next",
        "conversation": conversation_id,
    }
    async with connect(f"ws://127.0.0.1:{server.port}/v1/responses") as ws:
        await ws.send(json.dumps(create))
        while True:
            event = json.loads(await ws.recv())
            if event["type"] in ("response.completed", "response.failed", "error"):
                break
    assert event["type"] == "response.completed", event
    assert threads and server.thread.name not in threads, threads
