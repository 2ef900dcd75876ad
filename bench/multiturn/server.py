"""The real server, in-process, on a loopback port: one per mode, each with its own engine.

Why in-process: the benchmark checks `cached_tokens` in every answer's usage against
what the engine actually skipped, which only the engine's counters know. So the
server runs here (`realtime.app.build_app` under `RealtimeServer`, as `realtime
serve` runs it) in a thread with its own event loop, and the client talks to it over
TCP with the `websockets` library like any user.
"""

from __future__ import annotations

from typing import Any

from realtime.app import build_app
from realtime.config import ServerConfig
from realtime.engine.cpu.engine import CpuEngine
from realtime.pipeline import ChatPipeline
from realtime.server import RealtimeServer, ServerThread, loopback_socket, uvicorn_config


class MultiturnServer:
    """`build_app(engine)` served by `RealtimeServer` in a background thread."""

    def __init__(self, engine: CpuEngine):
        self.engine = engine
        self.config = ServerConfig(host="127.0.0.1", port=0, log_level="warning")
        sock = loopback_socket()
        self.app = build_app(self.config, engine)
        settings = uvicorn_config(self.config, self.app)
        self.server = RealtimeServer(settings, self.app, self.config.shutdown_grace_seconds)
        self._runner = ServerThread(self.server, sock, name="multiturn-server")
        self.port: int = self._runner.port

    @property
    def url(self) -> str:
        return f"ws://127.0.0.1:{self.port}/v1/realtime"

    @property
    def pipeline(self) -> ChatPipeline:
        pipeline: ChatPipeline = self.app.state.pipeline
        return pipeline

    def call(self, coro: Any, timeout: float = 120.0) -> Any:
        """Run a coroutine on the server's loop (e.g. waiting for warm-ups) and return."""
        return self._runner.call(coro, timeout)

    def __enter__(self) -> MultiturnServer:
        self._runner.start(60)
        return self

    def __exit__(self, *_exc: object) -> None:
        if self.server.started:
            self.call(self.pipeline.aclose())
        self._runner.stop(30)
