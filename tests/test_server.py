"""realtime.server: the listening socket ready when the server says it started; tune_gc."""

from __future__ import annotations

import gc
import socket
import threading
from collections.abc import Iterator
from typing import Any

import pytest
import uvicorn

from realtime.app import build_app
from realtime.config import ServerConfig
from realtime.engine.echo import EchoEngine
from realtime.server import RealtimeServer, ServerThread, loopback_socket, tune_gc, uvicorn_config


def test_the_socket_listens_by_the_time_the_server_says_it_started(monkeypatch):
    # uvicorn's startup sets `started`, which `ServerThread.start` waits for, before the
    # server's own acceptors exist: a client connecting then must wait, not be refused.
    seen: list[str] = []
    tried = threading.Event()
    original = uvicorn.Server.startup

    async def startup(self: uvicorn.Server, sockets: Any = None) -> None:
        await original(self, sockets)
        assert self.started
        try:
            socket.create_connection(("127.0.0.1", port), timeout=5).close()
            seen.append("connected")
        except ConnectionRefusedError:
            seen.append("refused")
        tried.set()

    monkeypatch.setattr(uvicorn.Server, "startup", startup)
    config = ServerConfig(log_level="warning")
    app = build_app(config, EchoEngine())
    sock = loopback_socket()
    port = sock.getsockname()[1]
    runner = ServerThread(RealtimeServer(uvicorn_config(config, app), app, 1.0), sock)
    runner.start()
    try:
        # `start` returns as soon as `started` is true, maybe before the try above ran
        assert tried.wait(10)
        assert seen == ["connected"]
    finally:
        runner.stop()


@pytest.fixture
def restore_gc() -> Iterator[None]:
    threshold = gc.get_threshold()
    yield
    gc.unfreeze()
    gc.set_threshold(*threshold)


@pytest.mark.usefixtures("restore_gc")
def test_raises_the_young_threshold_keeps_the_older_ratios_and_freezes() -> None:
    gc.set_threshold(700, 10, 10)
    startup_object: list[list[int]] = [[]]  # a container the collector tracks
    assert any(o is startup_object for o in gc.get_objects())
    tune_gc(12_345)
    assert gc.get_threshold() == (12_345, 10, 10)
    assert gc.get_freeze_count() > 0
    # Still alive, but in the permanent generation: no collection scans it again.
    assert not any(o is startup_object for o in gc.get_objects())


@pytest.mark.usefixtures("restore_gc")
def test_zero_leaves_python_alone() -> None:
    gc.set_threshold(700, 10, 10)
    frozen = gc.get_freeze_count()
    tune_gc(0)
    assert gc.get_threshold() == (700, 10, 10)
    assert gc.get_freeze_count() == frozen
