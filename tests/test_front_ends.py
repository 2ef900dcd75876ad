"""`--api-servers 2`: two front ends share the port and one engine process. Both serve (their
`x-request-id` prefixes differ), `/metrics` counts for both, a stored response is found
whichever front end is asked, a signal drains every front end (terminal frames, 1001),
and the engine's death ends the server with status 5 and one log line."""

from __future__ import annotations

import asyncio
import json
import os
import signal
from pathlib import Path
from typing import Any

import httpx
import pytest
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed

from realtime.server import EXIT_ENGINE_DIED
from tests.conftest import ServerProcess, niceness, scrape_metrics, spawn_server
from tests.engine.test_process_server import children, engine_pid

CHAT = {"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 3}
LONG = {
    "model": "tiny",
    "messages": [{"role": "user", "content": "a long story"}],
    "max_tokens": 3000,
    "ignore_eos": True,
}


def serve_two(model_dir: Path, *args: str) -> ServerProcess:
    return spawn_server(
        "--engine", "cpu", "--model", str(model_dir), "--model-name", "tiny",
        "--api-servers", "2", *args, timeout=120,
    )  # fmt: skip


def front_end(response: httpx.Response) -> str:
    """Which front end answered: the process prefix of its `x-request-id`."""
    return response.headers["x-request-id"].rsplit("-", 1)[0]


def test_echo_front_ends_each_run_their_own_engine_and_count_together() -> None:
    server = spawn_server("--api-servers", "2", "--model-name", "tiny")
    try:
        seen: set[str] = set()
        sent = 0
        while len(seen) < 2 and sent < 300:
            response = httpx.post(server.http_url + "/v1/chat/completions", json=CHAT, timeout=30)
            assert response.status_code == 200, response.text
            seen.add(front_end(response))
            sent += 1
        assert len(seen) == 2, "every request went to one front end"
        key = 'realtime_http_responses_total{route="/v1/chat/completions",status="200"}'
        assert scrape_metrics(server.http_url)[key] == sent
    finally:
        assert server.stop() == 0


def test_two_front_ends_serve_count_together_and_share_stored_responses(
    tiny_model_dir: Path,
) -> None:
    pytest.importorskip("torch")
    server = serve_two(tiny_model_dir)
    try:
        engine = engine_pid(server)  # one engine process
        # Every front end runs below the engine in CPU priority (--front-end-niceness).
        fronts = [pid for pid in children(server.proc.pid) if pid != engine]
        assert len(fronts) >= 2, fronts
        for pid in fronts:
            assert niceness(pid) == min(19, niceness(engine) + 5)
        seen: set[str] = set()
        sent = 0
        while len(seen) < 2 and sent < 300:
            response = httpx.post(server.http_url + "/v1/chat/completions", json=CHAT, timeout=60)
            assert response.status_code == 200, response.text
            seen.add(front_end(response))
            sent += 1
        assert len(seen) == 2, "every request went to one front end"
        counted = scrape_metrics(server.http_url)
        key = 'realtime_http_responses_total{route="/v1/chat/completions",status="200"}'
        assert counted[key] == sent
        created = httpx.post(
            server.http_url + "/v1/responses",
            json={"model": "tiny", "input": "hi", "max_output_tokens": 3, "store": True},
            timeout=60,
        )
        assert created.status_code == 200, created.text
        answered_by: set[str] = set()
        for _ in range(60):
            got = httpx.get(server.http_url + f"/v1/responses/{created.json()['id']}", timeout=30)
            assert got.status_code == 200, got.text
            answered_by.add(front_end(got))
            if len(answered_by) == 2:
                break
        assert len(answered_by) == 2, "every read went to one front end"
    finally:
        assert server.stop() == 0
    assert "Traceback" not in server.stderr()


async def _until_closed(ws: ClientConnection) -> tuple[list[dict[str, Any]], int | None]:
    frames = []
    try:
        async for text in ws:
            frames.append(json.loads(text))
    except ConnectionClosed:
        pass
    return frames, ws.close_code


def test_a_signal_drains_every_front_end(tiny_model_dir: Path) -> None:
    pytest.importorskip("torch")
    server = serve_two(tiny_model_dir, "--shutdown-grace", "1")

    async def run() -> list[tuple[list[dict[str, Any]], int | None]]:
        sockets = [await connect(server.ws_url) for _ in range(6)]
        for index, ws in enumerate(sockets):
            await ws.send(json.dumps({**LONG, "request_id": f"r{index}"}))
        for ws in sockets:
            json.loads(await ws.recv())  # streaming
        server.proc.send_signal(signal.SIGTERM)
        return list(await asyncio.gather(*(_until_closed(ws) for ws in sockets)))

    results = asyncio.run(run())
    assert server.proc.wait(30) == 0
    for frames, code in results:
        assert code == 1001
        terminal = [f for f in frames if f.get("type") in ("response.done", "error")]
        assert len(terminal) == 1 and frames[-1] is terminal[0]
        assert terminal[0]["status"] == "cancelled"
    assert "ERROR" not in server.stderr() and "Traceback" not in server.stderr()


def test_the_engine_dying_ends_both_front_ends_with_status_5(tiny_model_dir: Path) -> None:
    pytest.importorskip("torch")
    server = serve_two(tiny_model_dir)
    engine = engine_pid(server)

    async def run() -> list[dict[str, Any]]:
        sockets = [await connect(server.ws_url) for _ in range(4)]
        for index, ws in enumerate(sockets):
            await ws.send(json.dumps({**LONG, "request_id": f"r{index}"}))
        for ws in sockets:
            json.loads(await ws.recv())
        os.kill(engine, signal.SIGKILL)
        results = await asyncio.gather(*(_until_closed(ws) for ws in sockets))
        errors = []
        for frames, code in results:
            assert code == 1011
            errors.extend(f["error"] for f in frames if f.get("type") == "error")
        return errors

    errors = asyncio.run(run())
    assert len(errors) == 4 and {e["code"] for e in errors} == {"engine_unavailable"}
    assert server.proc.wait(30) == EXIT_ENGINE_DIED
    lines = [line for line in server.stderr().splitlines() if " ERROR " in f" {line} "]
    assert len(lines) == 1, lines
    assert "engine process exited" in lines[0]
