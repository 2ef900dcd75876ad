"""The library API: an engine object served as an ASGI app (mounted in another app, under a
plain uvicorn) and by `serve()`, the blocking form `realtime serve` uses."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path

import httpx
import openai
import pytest
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse
from starlette.routing import Mount, Route
from websockets.sync.client import connect

import realtime
from realtime.engine.echo import EchoEngine
from realtime.server import ServerThread, loopback_socket
from tests.conftest import wait_until


async def hello(request: Request) -> PlainTextResponse:
    return PlainTextResponse("the host app")


@pytest.fixture
def mounted() -> Iterator[tuple[str, EchoEngine]]:
    """The realtime app mounted at /llm in someone's Starlette app, under plain uvicorn."""
    engine = EchoEngine()
    config = realtime.ServerConfig(api_keys=("sk-test",), max_body_bytes=4096)
    llm = realtime.create_app(engine, config)

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        async with llm.router.lifespan_context(llm):  # starts and closes the engine
            yield

    host = Starlette(routes=[Route("/", hello), Mount("/llm", app=llm)], lifespan=lifespan)
    server = uvicorn.Server(uvicorn.Config(host, lifespan="on", log_level="warning"))
    runner = ServerThread(server, loopback_socket()).start()
    try:
        yield f"http://127.0.0.1:{runner.port}", engine
    finally:
        runner.stop()
    assert not engine.ready  # the host's shutdown closed it


def test_mounted_in_a_host_app_serves_http_and_the_socket(
    mounted: tuple[str, EchoEngine],
) -> None:
    base, engine = mounted
    assert engine.ready
    assert httpx.get(base + "/", timeout=5).text == "the host app"
    assert httpx.get(base + "/llm/health", timeout=5).status_code == 200  # open, as at /
    assert httpx.get(base + "/llm/v1/models", timeout=5).status_code == 401
    client = openai.OpenAI(base_url=base + "/llm/v1", api_key="sk-test", max_retries=0)
    stream = client.chat.completions.create(
        model="echo", messages=[{"role": "user", "content": "mounted and streaming"}], stream=True
    )
    text = "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
    assert text == "mounted and streaming"
    url = base.replace("http", "ws") + "/llm/v1/realtime"
    with connect(url, additional_headers={"Authorization": "Bearer sk-test"}) as socket:
        request = {
            "request_id": "a",
            "model": "echo",
            "messages": [{"role": "user", "content": "hi"}],
        }
        socket.send(json.dumps(request))
        frames = [json.loads(socket.recv(timeout=10))]
        while frames[-1].get("type") not in ("response.done", "error"):
            frames.append(json.loads(socket.recv(timeout=10)))
    deltas = [f["choices"][0]["delta"].get("content") or "" for f in frames if f.get("choices")]
    assert "".join(deltas) == "hi" and frames[-1]["status"] == "completed"
    assert engine.stats.requests_finished == 2


def test_mounted_under_another_server_the_app_bounds_the_body(
    mounted: tuple[str, EchoEngine],
) -> None:
    base, engine = mounted
    url, auth = base + "/llm/v1/chat/completions", {"Authorization": "Bearer sk-test"}
    declared = httpx.post(url, content=b"{" + b" " * 5000, headers=auth, timeout=10)
    assert declared.status_code == 413
    assert declared.json()["error"]["code"] == "request_too_large"

    def chunked() -> Iterator[bytes]:  # no Content-Length: refused once past the limit
        for _ in range(10):
            yield b" " * 1000

    streamed = httpx.post(url, content=chunked(), headers=auth, timeout=10)
    assert streamed.status_code == 413
    assert "larger than 4096 bytes" in streamed.json()["error"]["message"]
    assert engine.stats.requests_started == 0


def test_create_app_refuses_what_is_not_an_engine() -> None:
    with pytest.raises(TypeError, match=r"create_app\(\) needs an engine, got a str, not an"):
        realtime.create_app("echo")  # type: ignore[arg-type]


def test_create_app_checks_its_settings_before_serving() -> None:
    bad = realtime.ServerConfig(tool_parser="hermes2")
    with pytest.raises(ValueError, match="unknown tool parser 'hermes2'"):
        realtime.create_app(EchoEngine(), bad)


SERVE = """
import realtime
from realtime.engine.echo import EchoEngine

config = realtime.ServerConfig(port=0, shutdown_grace_seconds=2)
realtime.serve(EchoEngine(model_name="lib"), config)
"""


def test_serve_blocks_serves_and_drains_on_sigterm(tmp_path: Path) -> None:
    log = tmp_path / "stderr.log"
    with open(log, "w", encoding="utf-8") as stderr:
        proc = subprocess.Popen(
            [sys.executable, "-c", SERVE], stderr=stderr, stdout=subprocess.DEVNULL
        )
    try:
        announced = r"serving model 'lib' on http://127\.0\.0\.1:(\d+)/v1"
        wait_until(lambda: re.search(announced, log.read_text()) is not None, timeout=60)
        found = re.search(announced, log.read_text())
        assert found is not None
        client = openai.OpenAI(
            base_url=f"http://127.0.0.1:{found[1]}/v1", api_key="x", max_retries=0
        )
        answer = client.chat.completions.create(
            model="lib", messages=[{"role": "user", "content": "from the library"}]
        )
        assert answer.choices[0].message.content == "from the library"
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
        assert "server.drain" in log.read_text()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_serve_reports_a_taken_port_as_oserror() -> None:
    sock = loopback_socket()
    port = sock.getsockname()[1]
    sock.listen()
    try:
        with pytest.raises(OSError):
            realtime.serve(EchoEngine(), realtime.ServerConfig(port=port))
    finally:
        sock.close()
