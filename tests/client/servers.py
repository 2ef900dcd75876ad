"""Servers for the client tests: the real app on a chosen port, and a scripted endpoint.

`serve_realtime(port=...)` exists because tests/conftest.py always binds a fresh
port, and a reconnect test must bring the server back on the same one.

`ScriptedServer` speaks /v1/realtime with canned answers for what the echo
engine cannot produce (reasoning, tool calls) and stands in for the API-key
handshake that the server does not have yet: it records the `Authorization`
header and the offered subprotocols, selects `realtime` when offered (as
browsers require), and refuses the handshake (HTTP 403) when `require_key` is
set and the key is missing.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import socket
import threading
from dataclasses import dataclass, field
from typing import Any

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import BaseRoute, Route, WebSocketRoute
from starlette.websockets import WebSocket, WebSocketDisconnect

from realtime.app import build_app
from realtime.chat.conversation import template_messages
from realtime.config import ServerConfig
from realtime.engine.echo import EchoEngine
from realtime.http.ui import ui_routes
from realtime.server import RealtimeServer, ServerThread, loopback_socket, uvicorn_config

try:  # the server's own protocol: it completes a refused handshake without an error log
    from realtime.ws.transport import RealtimeWebSocketProtocol as _WS_PROTOCOL
except ImportError:  # pragma: no cover - an older server
    _WS_PROTOCOL = "websockets-sansio"  # type: ignore[assignment,misc]


@dataclass
class Served:
    server: uvicorn.Server
    thread: threading.Thread
    port: int
    app: Any
    loop: asyncio.AbstractEventLoop

    @property
    def http_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def ws_url(self) -> str:
        return f"ws://127.0.0.1:{self.port}/v1/realtime"

    def stop(self, timeout: float = 15.0) -> None:
        self.server.should_exit = True
        self.thread.join(timeout)
        assert not self.thread.is_alive(), "server thread did not stop"

    def kill(self) -> None:
        """Drop every connection without a Close frame (clients see 1006), then stop.

        As close to `kill -9` as an in-process server gets: the network just ends.
        """

        def abort() -> None:
            for listener in self.server.servers:
                listener.close()  # refuse new connections from now on
            for connection in list(self.server.server_state.connections):
                transport = getattr(connection, "transport", None)
                if transport is not None:
                    transport.abort()

        self.loop.call_soon_threadsafe(abort)
        self.stop()


def _run(server: uvicorn.Server, sock: socket.socket, app: Any) -> Served:
    runner = ServerThread(server, sock, name="uvicorn-test").start(timeout=10)
    return Served(server, runner.thread, runner.port, app, runner.loop)


def with_ui(app: Starlette) -> Starlette:
    """Add the page's routes unless the app already serves `/` (once app.py mounts them).

    With API keys on, the page's paths are opened too: it loads before a key is typed.
    """
    routes = ui_routes()
    if not any(getattr(route, "path", None) == "/" for route in app.routes):
        app.router.routes.extend(routes)
    open_paths = getattr(app.state, "open_paths", None)
    if isinstance(open_paths, set):
        open_paths.update(route.path for route in routes)
    return app


def server_has_api_keys() -> bool:
    """Whether this server version checks API keys (the auth work may not be merged yet)."""
    return "api_keys" in {f.name for f in dataclasses.fields(ServerConfig)}


@dataclass
class RealServer(Served):
    engine: EchoEngine = field(default_factory=EchoEngine)


def serve_realtime(
    port: int = 0, config: ServerConfig | None = None, engine: EchoEngine | None = None
) -> RealServer:
    """The real app (plus the page) on `port`; the same port again after a restart."""
    config = config or ServerConfig(log_level="warning")
    engine = engine or EchoEngine(delay=config.echo_delay)
    sock = loopback_socket(port)
    app = with_ui(build_app(config, engine))
    server = RealtimeServer(uvicorn_config(config, app), app, config.shutdown_grace_seconds)
    served = _run(server, sock, app)
    return RealServer(served.server, served.thread, served.port, app, served.loop, engine)


# --- the scripted server ---


def _chunk(request_id: str, delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
    return {
        "id": "chatcmpl-" + "0" * 32,
        "object": "chat.completion.chunk",
        "created": 1700000000,
        "model": "scripted",
        "system_fingerprint": "fp_scripted",
        "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}],
        "request_id": request_id,
    }


def script_for(text: str) -> list[tuple[dict[str, Any], str | None]]:
    """Deltas answering a message: `think ...` reasons first, `weather ...` calls a tool."""
    if text.startswith("think"):
        return [
            ({"role": "assistant", "reasoning_content": "The user wants"}, None),
            ({"reasoning_content": " a number."}, None),
            ({"content": "The answer"}, None),
            ({"content": " is 42."}, None),
            ({}, "stop"),
        ]
    if text.startswith("weather"):
        return [
            ({"role": "assistant", "content": "Let me check."}, None),
            (
                {
                    "tool_calls": [
                        {
                            "index": 0,
                            "id": "call_1",
                            "type": "function",
                            "function": {"name": "get_weather", "arguments": ""},
                        }
                    ]
                },
                None,
            ),
            ({"tool_calls": [{"index": 0, "function": {"arguments": '{"city": '}}]}, None),
            ({"tool_calls": [{"index": 0, "function": {"arguments": '"Paris"}'}}]}, None),
            ({}, "tool_calls"),
        ]
    words = text.split(" ")
    deltas: list[tuple[dict[str, Any], str | None]] = [
        ({"content": (" " if i else "") + w} | ({"role": "assistant"} if i == 0 else {}), None)
        for i, w in enumerate(words)
    ]
    return [*deltas, ({}, "stop")]


@dataclass
class ScriptedServer:
    """A /v1/realtime endpoint with canned answers; see the module docstring."""

    delay: float = 0.02
    first_delay: float = 0.0
    require_key: str | None = None
    frames: list[dict[str, Any]] = field(default_factory=list)
    authorization: list[str | None] = field(default_factory=list)
    subprotocols: list[list[str]] = field(default_factory=list)
    served: Served | None = None

    @property
    def ws_url(self) -> str:
        assert self.served is not None
        return self.served.ws_url

    @property
    def http_url(self) -> str:
        assert self.served is not None
        return self.served.http_url

    def routes(self) -> list[BaseRoute]:
        return [
            Route("/v1/models", self._models),
            WebSocketRoute("/v1/realtime", self._endpoint),
        ]

    async def _models(self, request: Request) -> JSONResponse:
        card = {"id": "scripted", "object": "model", "created": 0, "owned_by": "tests"}
        return JSONResponse({"object": "list", "data": [card]})

    async def _endpoint(self, websocket: WebSocket) -> None:
        offered = list(websocket.scope.get("subprotocols") or [])
        authorization = websocket.headers.get("authorization")
        self.subprotocols.append(offered)
        self.authorization.append(authorization)
        keys = [p[len("realtime-key.") :] for p in offered if p.startswith("realtime-key.")]
        bearer = authorization[len("Bearer ") :] if authorization else None
        if self.require_key is not None and self.require_key not in (*keys, bearer):
            # Refused like the real server does: HTTP 401 with the OpenAI error body.
            body = {
                "error": {
                    "message": "invalid API key",
                    "type": "invalid_request_error",
                    "param": None,
                    "code": "invalid_api_key",
                }
            }
            await websocket.send_denial_response(JSONResponse(body, status_code=401))
            return
        await websocket.accept(subprotocol="realtime" if "realtime" in offered else None)
        cancelled: set[str] = set()
        tasks: set[asyncio.Task[None]] = set()
        lock = asyncio.Lock()
        try:
            while True:
                frame = json.loads(await websocket.receive_text())
                self.frames.append(frame)
                request_id = frame.get("request_id") or "req_1"
                if frame.get("type") == "response.cancel":
                    cancelled.add(request_id)
                    continue
                task = asyncio.create_task(self._answer(websocket, lock, frame, cancelled))
                tasks.add(task)
                task.add_done_callback(tasks.discard)
        except WebSocketDisconnect:
            for task in tasks:
                task.cancel()

    async def _answer(
        self, websocket: WebSocket, lock: asyncio.Lock, frame: dict[str, Any], cancelled: set[str]
    ) -> None:
        request_id = frame.get("request_id") or "req_1"
        text = str(frame["messages"][-1]["content"])
        await asyncio.sleep(self.first_delay)
        sent = 0
        for delta, finish in script_for(text):
            if request_id in cancelled:
                break
            async with lock:
                await websocket.send_text(json.dumps(_chunk(request_id, delta, finish)))
            sent += 1
            await asyncio.sleep(self.delay)
        status = "cancelled" if request_id in cancelled else "completed"
        finish = None if status == "cancelled" else script_for(text)[-1][1]
        done = {
            "type": "response.done",
            "request_id": request_id,
            "id": "chatcmpl-" + "0" * 32,
            "status": status,
            "finish_reason": finish,
            "usage": {"prompt_tokens": 3, "completion_tokens": sent, "total_tokens": 3 + sent},
        }
        async with lock:
            await websocket.send_text(json.dumps(done))

    def start(self, extra_routes: list[BaseRoute] | None = None) -> ScriptedServer:
        app = Starlette(routes=[*self.routes(), *(extra_routes or [])])
        server = uvicorn.Server(
            uvicorn.Config(app, ws=_WS_PROTOCOL, log_level="warning", lifespan="off")
        )
        self.served = _run(server, loopback_socket(), app)
        return self

    def stop(self) -> None:
        if self.served is not None and self.served.thread.is_alive():
            self.served.stop()


def record_requests(app: Any) -> list[dict[str, Any]]:
    """Every chat request the real app prepares, as the chat fields the client set (read
    back from the pipeline's neutral request: the fields these tests look at)."""
    requests: list[dict[str, Any]] = []
    pipeline = app.state.pipeline
    prepare = pipeline.prepare

    def recording_prepare(request: Any, **options: Any) -> Any:
        fields: dict[str, Any] = {
            "model": request.model,
            "messages": template_messages(request.conversation),
        }
        if request.sampling.temperature is not None:
            fields["temperature"] = request.sampling.temperature
        if request.max_tokens_explicit:
            fields["max_tokens"] = request.max_tokens
        if request.stopping.strings:
            fields["stop"] = list(request.stopping.strings)
        requests.append(fields)
        return prepare(request, **options)

    pipeline.prepare = recording_prepare
    return requests
