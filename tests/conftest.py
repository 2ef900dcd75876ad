"""Shared fixtures: a real uvicorn server on an ephemeral loopback port.

The server runs in a background thread with its own event loop, so tests talk to
it over real TCP with real clients (websockets, httpx, openai) while still being
able to read the echo engine's counters to prove that work started and stopped.
"""

from __future__ import annotations

import asyncio
import os
import re
import select
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from realtime.app import SOCKET_PROTOCOLS, SocketProtocol, build_app
from realtime.config import ServerConfig
from realtime.engine.base import Engine
from realtime.engine.echo import EchoEngine
from realtime.server import RealtimeServer, ServerThread, loopback_socket, uvicorn_config
from tests.postgres_fixtures import postgres_cluster, postgres_url  # noqa: F401 (fixtures)

#: The tiny random-weight model (`tiny_model_dir`, `tiny_model_factory`) for every test,
#: and tokenizers bound to the grammar engine (`binding`, `compiler`, `marker_*`).
pytest_plugins = ["tests.model_fixtures", "tests.grammar_fixtures", "tests.engine.process_fixtures"]


@dataclass
class RunningServer:
    #: The echo engine unless a test passed another; tests read engine-specific counters.
    engine: Any
    config: ServerConfig
    port: int
    app: Any
    server: RealtimeServer
    thread: threading.Thread
    loop: asyncio.AbstractEventLoop = field(repr=False)
    runner: ServerThread = field(repr=False)

    @property
    def http_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def ws_url(self) -> str:
        return f"ws://127.0.0.1:{self.port}/v1/realtime"

    def sessions(self) -> list[Any]:
        return list(self.app.state.hub._sessions)

    def stop(self, timeout: float = 15.0) -> None:
        self.runner.stop(timeout)


def start_server(
    config: ServerConfig | None = None,
    engine: Engine | None = None,
    socket_buffer_bytes: int | None = None,
    protocols: Sequence[SocketProtocol] = SOCKET_PROTOCOLS,
) -> RunningServer:
    """Serve `engine` on a free loopback port.

    `socket_buffer_bytes` fixes the kernel buffers of accepted connections (they
    inherit them from the listening socket), standing in for a slow network so
    backpressure tests do not depend on the kernel's buffer autotuning. `protocols`:
    the socket protocols the app speaks (`build_app`'s).
    """
    config = config or ServerConfig(log_level="warning")
    engine = engine or EchoEngine(delay=config.echo_delay)
    sock = loopback_socket(buffer_bytes=socket_buffer_bytes)
    app = build_app(config, engine, protocols=protocols)
    server = RealtimeServer(uvicorn_config(config, app), app, config.shutdown_grace_seconds)
    runner = ServerThread(server, sock)
    server.config.port = runner.port
    runner.start(timeout=120)  # an engine process loads its model meanwhile
    return RunningServer(
        engine, config, runner.port, app, server, runner.thread, runner.loop, runner
    )


@pytest.fixture
def server_factory() -> Iterator[Callable[..., RunningServer]]:
    started: list[RunningServer] = []

    def factory(
        config: ServerConfig | None = None,
        engine: Engine | None = None,
        socket_buffer_bytes: int | None = None,
        protocols: Sequence[SocketProtocol] = SOCKET_PROTOCOLS,
    ) -> RunningServer:
        running = start_server(config, engine, socket_buffer_bytes, protocols)
        started.append(running)
        return running

    yield factory
    for running in started:
        if running.thread.is_alive():
            running.stop()


@pytest.fixture
def server(server_factory: Callable[..., RunningServer]) -> RunningServer:
    return server_factory()


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def wait_until(
    predicate: Callable[[], bool], timeout: float = 10.0, interval: float = 0.005
) -> None:
    """Poll for a condition the server reaches asynchronously (not a timing assertion)."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached within the allotted time")
        time.sleep(interval)


def niceness(pid: int) -> int:
    """A process's CPU niceness, read from `/proc` (Linux)."""
    with open(f"/proc/{pid}/stat", encoding="ascii") as f:
        return int(f.read().rsplit(")", 1)[1].split()[16])


# --- additions for the hardening tests: a server subprocess, metrics scraping ---

SERVE_STARTUP_LINE = re.compile(r"on http://127\.0\.0\.1:(?P<port>\d+)/v1 and ws://")


@dataclass
class ServerProcess:
    """`python -m realtime serve` in a subprocess (for signals, exit codes and RSS)."""

    proc: subprocess.Popen[str]
    port: int
    stderr_path: str

    @property
    def http_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def ws_url(self) -> str:
        return f"ws://127.0.0.1:{self.port}/v1/realtime"

    def rss_bytes(self) -> int:
        with open(f"/proc/{self.proc.pid}/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
        raise RuntimeError("no VmRSS line")

    def stderr(self) -> str:
        with open(self.stderr_path, encoding="utf-8", errors="replace") as f:
            return f.read()

    def stop(self, timeout: float = 15.0) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout)


def spawn_server(*args: str, tmp_path: Any = None, timeout: float = 30.0) -> ServerProcess:
    """Start `realtime serve --port 0 ARGS` and wait for its startup line."""
    directory = tempfile.mkdtemp(prefix="realtime-serve-") if tmp_path is None else str(tmp_path)
    stderr_path = os.path.join(directory, f"stderr-{time.monotonic_ns()}.log")
    stderr = open(stderr_path, "w", encoding="utf-8")  # the child writes it
    proc = subprocess.Popen(
        [sys.executable, "-m", "realtime", "serve", "--port", "0", *args],
        stdout=subprocess.PIPE,
        stderr=stderr,
        text=True,
        cwd=str(Path(__file__).resolve().parents[1]),
    )
    stderr.close()
    assert proc.stdout is not None
    deadline = time.monotonic() + timeout
    ready, _, _ = select.select([proc.stdout], [], [], timeout)
    line = proc.stdout.readline() if ready else ""
    match = SERVE_STARTUP_LINE.search(line)
    if match is None or time.monotonic() > deadline:
        proc.kill()
        proc.wait()
        with open(stderr_path, encoding="utf-8") as f:
            raise RuntimeError(f"server did not start: {line!r}\n{f.read()}")
    return ServerProcess(proc, int(match["port"]), stderr_path)


@pytest.fixture
def serve_process() -> Iterator[Callable[..., ServerProcess]]:
    started: list[ServerProcess] = []

    def factory(*args: str) -> ServerProcess:
        server = spawn_server(*args)
        started.append(server)
        return server

    yield factory
    for server in started:
        if server.proc.poll() is None:
            server.proc.kill()
            server.proc.wait()


def scrape_metrics(base_url: str, headers: dict[str, str] | None = None) -> dict[str, float]:
    """GET /metrics as {'name{label="v",...}': value} (labels sorted), for exact assertions."""
    from prometheus_client.parser import text_string_to_metric_families

    response = httpx.get(base_url + "/metrics", headers=headers or {}, timeout=10)
    response.raise_for_status()
    samples: dict[str, float] = {}
    for family in text_string_to_metric_families(response.text):
        for sample in family.samples:
            labels = ",".join(f'{k}="{v}"' for k, v in sorted(sample.labels.items()))
            samples[f"{sample.name}{{{labels}}}" if labels else sample.name] = sample.value
    return samples


async def async_wait_until(predicate: Callable[[], bool], timeout: float = 10.0) -> None:
    """`wait_until` for async tests: yields to the event loop between polls."""
    for _ in range(int(timeout / 0.01)):
        if predicate():
            return
        await asyncio.sleep(0.01)
    raise AssertionError("condition not reached within the allotted time")
