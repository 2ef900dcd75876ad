"""`realtime serve` with the engine in a process of its own: it serves, and when the engine
process is killed (-9) under load, every request in flight gets a retryable
`engine_unavailable` error, and the server exits with status 5 and one log line."""

from __future__ import annotations

import asyncio
import json
import os
import signal
from pathlib import Path

import httpx
import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosedError

from realtime.server import EXIT_ENGINE_DIED
from tests.conftest import ServerProcess, niceness, spawn_server, wait_until

pytest.importorskip("torch")


def children(pid: int) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", encoding="ascii") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            found.append(int(entry))
    return found


def engine_pid(server: ServerProcess) -> int:
    """The server's engine process (by its command line)."""
    found = []
    for pid in children(server.proc.pid):
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            if b"realtime.engine.process.main" in f.read():
                found.append(pid)
    assert len(found) == 1, found
    return found[0]


def serve_cpu(model_dir: Path, *args: str) -> ServerProcess:
    return spawn_server(
        "--engine", "cpu", "--model", str(model_dir), "--model-name", "tiny", *args, timeout=90
    )


BODY = {
    "model": "tiny",
    "messages": [{"role": "user", "content": "tell me a long story"}],
    "max_tokens": 3000,
    "ignore_eos": True,
    "stream": True,
}


async def _sse_error(url: str, started: asyncio.Event) -> dict[str, object]:
    async with httpx.AsyncClient(timeout=60) as client:
        async with client.stream("POST", url + "/v1/chat/completions", json=BODY) as response:
            assert response.status_code == 200
            async for line in response.aiter_lines():
                if not line.startswith("data: ") or line == "data: [DONE]":
                    continue
                event = json.loads(line[6:])
                if "error" in event:
                    return event["error"]  # type: ignore[no-any-return]
                started.set()
    raise AssertionError("the stream ended without an error event")


async def _socket_error(url: str, started: asyncio.Event) -> tuple[dict[str, object], int | None]:
    async with connect(url) as ws:
        await ws.send(json.dumps({**BODY, "request_id": "r1"}))
        error: dict[str, object] = {}
        try:
            async for text in ws:
                frame = json.loads(text)
                if frame.get("type") == "error":
                    error = frame["error"]
                else:
                    started.set()
        except ConnectionClosedError:
            pass  # 1011, read below
        return error, ws.close_code


def test_a_served_engine_process_answers_and_stops_with_the_server(tiny_model_dir: Path) -> None:
    server = serve_cpu(tiny_model_dir)
    engine = engine_pid(server)
    # The front end yields the CPU to the engine on a busy machine (--front-end-niceness).
    assert niceness(server.proc.pid) == min(19, niceness(engine) + 5)
    body = {**BODY, "stream": False, "max_tokens": 5}
    answer = httpx.post(server.http_url + "/v1/chat/completions", json=body, timeout=60).json()
    assert answer["usage"]["completion_tokens"] == 5
    assert httpx.get(server.http_url + "/ready").json()["engine_ready"] is True
    # Ctrl-C and a closing terminal signal the whole group: the engine leaves them to
    # the server, which drains before it stops the engine.
    os.kill(engine, signal.SIGINT)
    os.kill(engine, signal.SIGHUP)
    again = httpx.post(server.http_url + "/v1/chat/completions", json=body, timeout=60)
    assert again.json()["usage"]["completion_tokens"] == 5
    assert server.stop() == 0
    wait_until(lambda: not os.path.exists(f"/proc/{engine}"), timeout=15)


def test_front_end_niceness_0_keeps_the_engine_s_priority(tiny_model_dir: Path) -> None:
    server = serve_cpu(tiny_model_dir, "--front-end-niceness", "0")
    try:
        assert niceness(server.proc.pid) == niceness(engine_pid(server))
    finally:
        assert server.stop() == 0


def test_kill_9_of_the_engine_under_load(tiny_model_dir: Path) -> None:
    server = serve_cpu(tiny_model_dir)
    engine = engine_pid(server)

    async def load() -> list[object]:
        started = [asyncio.Event() for _ in range(4)]
        tasks = [
            asyncio.create_task(_sse_error(server.http_url, started[0])),
            asyncio.create_task(_sse_error(server.http_url, started[1])),
            asyncio.create_task(_socket_error(server.ws_url, started[2])),
            asyncio.create_task(_socket_error(server.ws_url, started[3])),
        ]
        await asyncio.wait_for(asyncio.gather(*(s.wait() for s in started)), 60)
        os.kill(engine, signal.SIGKILL)
        return await asyncio.wait_for(asyncio.gather(*tasks), 60)

    results = asyncio.run(load())
    for error in results[:2]:
        assert isinstance(error, dict)
        assert error["code"] == "engine_unavailable"
        assert "retry" in str(error["message"])
    for result in results[2:]:
        assert isinstance(result, tuple)
        error, close_code = result
        assert error["code"] == "engine_unavailable"
        assert close_code == 1011
    assert server.proc.wait(30) == EXIT_ENGINE_DIED
    errors = [line for line in server.stderr().splitlines() if " ERROR " in f" {line} "]
    assert len(errors) == 1, errors
    assert "the engine process exited" in errors[0]
    assert "Traceback" not in server.stderr()
