"""Running the app under uvicorn, with a graceful shutdown that drains before it closes.

uvicorn's own shutdown closes WebSockets with 1012 (service restart) straight
away and gives HTTP requests its graceful timeout. Here shutdown (SIGTERM,
SIGINT, and SIGHUP, which uvicorn leaves to kill the process) goes in steps,
all within `--shutdown-grace`:

1. stop listening, and close idle HTTP keep-alive connections;
2. drain: sockets refuse new requests (`error` frame `shutting_down`) and close
   with 1001 as soon as their accepted requests are answered; HTTP requests in
   flight carry on, new ones get 503; background responses run on (the drain
   waits for them too);
3. when the grace runs out, whatever still runs is cancelled with a terminal
   frame (`response.done` cancelled, an SSE error event, a 503), and sockets
   close with 1001; background responses still running are failed
   (`shutting_down`) and stored so;
4. uvicorn's own shutdown then finds nothing left to wait for, and the process
   exits 0.

`tune_gc` sets Python's garbage collector for a process that holds thousands of
sockets (`realtime serve` calls it once the app is built).
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import signal
import socket
import threading
import time
from collections.abc import Callable, Coroutine, Iterator
from types import FrameType
from typing import Any, TypeVar

import uvicorn
from starlette.applications import Starlette

from realtime.accept import Acceptor
from realtime.asgi.lifecycle import Lifecycle
from realtime.config import ServerConfig
from realtime.http.background_runs import BackgroundRuns
from realtime.http.protocol import LimitedHttpToolsProtocol
from realtime.http.request_limits import HttpLimits
from realtime.observability.logs import event, protect_uvicorn_logs
from realtime.observability.metrics import Metrics
from realtime.protocol.errors import RealtimeError
from realtime.ws.hub import CLOSE_SECONDS, SessionHub
from realtime.ws.transport import RealtimeWebSocketProtocol

log = logging.getLogger("realtime")

#: `realtime serve`'s exit status after its engine process died.
EXIT_ENGINE_DIED = 5

#: uvicorn's last wait after our own drain: only stragglers are left by then.
_UVICORN_FINAL_SECONDS = 2


def uvicorn_config(config: ServerConfig, app: Starlette) -> uvicorn.Config:
    result = uvicorn.Config(
        app,
        host=config.host,
        port=config.port,
        ws=RealtimeWebSocketProtocol,
        ws_max_size=config.max_frame_bytes,
        ws_per_message_deflate=config.ws_compression,
        ws_ping_interval=config.ws_ping_interval or None,
        ws_ping_timeout=config.ws_ping_timeout or None,
        log_level=config.log_level,
        # Logging is set up by `realtime serve` (text or JSON); embedders bring their own.
        log_config=None,
        timeout_graceful_shutdown=_UVICORN_FINAL_SECONDS,
        lifespan="on",
        http=http_protocol(config, app),
        forwarded_allow_ips=config.forwarded_allow_ips,
    )
    protect_uvicorn_logs(config.api_keys)
    return result


def http_protocol(config: ServerConfig, app: Starlette) -> type[LimitedHttpToolsProtocol]:
    """uvicorn's httptools protocol bound to the config's request limits."""
    limits = HttpLimits(
        max_header_bytes=config.max_header_bytes,
        max_header_count=config.max_header_count,
        header_timeout=config.header_timeout_seconds,
        max_body_bytes=config.max_body_bytes,
        body_timeout=config.body_timeout_seconds,
    )
    metrics: Metrics | None = getattr(app.state, "metrics", None)

    def count(error: RealtimeError) -> None:
        if metrics is not None:  # refused before routing: no route template to name
            metrics.http_responses.labels("unparsed", str(error.status)).inc()

    return LimitedHttpToolsProtocol.with_limits(limits, on_refusal=count)


T = TypeVar("T")


class RealtimeServer(uvicorn.Server):
    def __init__(
        self,
        config: uvicorn.Config,
        app: Starlette,
        grace_seconds: float,
        on_listening: Callable[[int | None], None] | None = None,
        *,
        engine_death_level: int = logging.ERROR,
    ):
        super().__init__(config)
        self._engine_death_level = engine_death_level
        self._app = app
        self._grace = grace_seconds
        self._on_listening = on_listening
        #: Why the engine process died, when it did: the server then exits non-zero.
        self.engine_died: str | None = None
        pipeline = getattr(app.state, "pipeline", None)
        on_death = getattr(getattr(pipeline, "engine", None), "on_death", None)
        if callable(on_death):
            on_death(self._engine_died)

    def _engine_died(self, reason: str) -> None:
        """The engine process is gone: its requests have their errors already (503
        `engine_unavailable`, retryable) and /ready says false; drain and exit non-zero,
        leaving the restart to the process manager."""
        self.engine_died = reason
        log.log(
            self._engine_death_level,
            "%s: every request in flight was answered engine_unavailable; the server exits"
            " with status %d so its process manager can restart it",
            reason,
            EXIT_ENGINE_DIED,
        )
        self.should_exit = True

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        if sockets is None or self.config.ssl is not None:
            await super().startup(sockets)
        else:
            # uvicorn's startup without its servers (the lifespan, the app's state), then
            # an `Acceptor` per socket: uvloop's own accepts one connection per loop pass.
            # Listening first: `started` turns true inside uvicorn's startup, and a
            # client that connects then waits in the backlog instead of being refused.
            for sock in sockets:
                sock.listen(self.config.backlog)
            await super().startup([])
            if self.started:
                self.servers = [self._acceptor(sock) for sock in sockets]  # type: ignore[misc]
        if self.started and sockets:  # uvicorn names the address only for sockets it bound
            log_started = getattr(self, "_log_started_message", None)
            if callable(log_started):
                log_started(sockets)
        if self.started and self._on_listening is not None:
            self._on_listening(self.bound_port)

    def _acceptor(self, sock: socket.socket) -> Acceptor:
        config, loop = self.config, asyncio.get_running_loop()

        def create_protocol() -> asyncio.Protocol:  # as uvicorn's startup makes them
            return config.http_protocol_class(  # type: ignore[call-arg]
                config=config,
                server_state=self.server_state,
                app_state=self.lifespan.state,
                _loop=loop,
            )

        return Acceptor(sock, create_protocol, backlog=config.backlog)

    @property
    def bound_port(self) -> int | None:
        """The port actually listened on (differs from the configured one for port 0)."""
        for server in self.servers:
            for sock in server.sockets:
                return int(sock.getsockname()[1])
        return None

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        """uvicorn's SIGINT/SIGTERM, plus SIGHUP: a closed terminal or a process manager's
        reload drains like SIGTERM instead of killing the process mid-answer."""
        with super().capture_signals():
            hangup = getattr(signal, "SIGHUP", None)
            if hangup is None or threading.current_thread() is not threading.main_thread():
                yield
                return
            previous = signal.signal(hangup, self.handle_exit)
            try:
                yield
            finally:
                signal.signal(hangup, previous)

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        super().handle_exit(sig, frame)
        # uvicorn re-raises the captured signal after shutting down, so the process
        # dies "by SIGTERM"; a server that shut down gracefully should exit 0.
        self._captured_signals.clear()

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._grace
        hub: SessionHub = self._app.state.hub
        lifecycle: Lifecycle = self._app.state.lifecycle
        for server in self.servers:
            server.close()
        event(log, "server.drain", sockets=len(hub), grace_seconds=self._grace)
        lifecycle.begin_drain()
        hub.begin_shutdown()
        for connection in self._http_connections():
            connection.shutdown()  # idle keep-alive: closed; busy: closed after its response
        background: BackgroundRuns = self._app.state.background
        drain = asyncio.gather(
            hub.wait_closed(deadline - loop.time()),
            self._wait_http(deadline),
            background.drain(deadline - loop.time()),
        )
        while not drain.done() and not self.force_exit:  # a second Ctrl-C skips the grace
            await asyncio.wait({drain}, timeout=0.1)
        if not drain.done():
            drain.cancel()
            await asyncio.gather(drain, return_exceptions=True)
        if not drain.done() or drain.cancelled() or not all(drain.result()):
            event(
                log,
                "server.grace_over",
                logging.WARNING,
                sockets=len(hub),
                http=len(self._http_connections()),
            )
            lifecycle.expire()
            hub.end_grace()
            await background.stop()  # each still running ends failed (`shutting_down`)
            await hub.wait_closed(CLOSE_SECONDS)
        await super().shutdown(sockets)

    def _http_connections(self) -> list[Any]:
        return [
            c
            for c in list(self.server_state.connections)
            if not isinstance(c, RealtimeWebSocketProtocol)
        ]

    async def _wait_http(self, deadline: float) -> bool:
        loop = asyncio.get_running_loop()
        while self._http_connections():
            if loop.time() >= deadline:
                return False
            await asyncio.sleep(0.05)
        return True


def listening_sockets(host: str, port: int) -> list[socket.socket]:
    """Bound, listening sockets for `host:port`, as uvicorn's own binding would make them.

    Every address the host resolves to (`localhost`: 127.0.0.1 and ::1), with
    SO_REUSEADDR and IPv6-only IPv6 sockets, as asyncio's `create_server` does. Made
    before the app starts, so an address that cannot be had is an error (OSError)
    before anything is loaded. With port 0, every address gets the first one's port.
    """
    infos = socket.getaddrinfo(host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    sockets: list[socket.socket] = []
    try:
        for family, kind, proto, _, address in dict.fromkeys(infos):
            sock = socket.socket(family, kind, proto)
            sockets.append(sock)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6:
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            if port == 0 and len(sockets) > 1:
                address = (address[0], sockets[0].getsockname()[1], *address[2:])
            sock.bind(address)
            sock.listen(2048)
    except OSError:
        for sock in sockets:
            sock.close()
        raise
    return sockets


def loopback_socket(port: int = 0, *, buffer_bytes: int | None = None) -> socket.socket:
    """A bound 127.0.0.1 listening socket for `ServerThread` (port 0 = any free port).

    It names IPPROTO_TCP: asyncio sets TCP_NODELAY only on sockets that do, and
    without it every keep-alive request after the first stalls ~40 ms (Nagle).
    `buffer_bytes` fixes the kernel buffers accepted connections inherit, standing
    in for a slow network where a test needs backpressure to be deterministic.
    """
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if buffer_bytes is not None:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, buffer_bytes)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, buffer_bytes)
    sock.bind(("127.0.0.1", port))
    return sock


#: Allocations between collections of the youngest generation (Python's default: 700).
DEFAULT_GEN0_THRESHOLD = 10_000


def tune_gc(gen0_threshold: int = DEFAULT_GEN0_THRESHOLD) -> None:
    """Freeze what exists now and collect the young generation less often (0: leave
    Python's settings alone).

    CPython's cycle collector runs its youngest generation every 700 net
    allocations, and a streamed token allocates several objects (a chunk dict, an
    engine output, timer handles and futures of the engine's step). With thousands
    of sockets the young objects that are alive at any moment (one pending step per
    stream) keep surviving into older generations, so older collections, which scan
    every long-lived object of every socket, keep being triggered. Measured with
    2,000 streaming sockets (`bench/`), that was about a third of the server's CPU.

    So the youngest generation's threshold is raised (the older generations' ratios
    stay as they are), and everything that exists once the app is built - modules,
    schemas, templates - is frozen, so no collection scans it again. Reference
    counting still frees almost everything at once; only garbage that forms cycles
    waits longer. Embedders who build their own process keep Python's settings
    unless they call this themselves.
    """
    if gen0_threshold <= 0:
        return
    gc.collect()
    gc.freeze()
    _, gen1, gen2 = gc.get_threshold()
    gc.set_threshold(gen0_threshold, gen1, gen2)


class ServerThread:
    """A uvicorn server running in a background thread with its own event loop.

    For embedding the server next to other code (tests, benchmarks): the caller
    keeps direct access to the app and its engine while clients talk to it over
    real TCP. `call()` runs a coroutine on the server's loop.
    """

    def __init__(self, server: uvicorn.Server, sock: socket.socket, *, name: str = "uvicorn"):
        self.server = server
        self.sock = sock
        self.port: int = sock.getsockname()[1]
        # The loop `realtime serve` runs on (uvloop when installed), so embedders and
        # tests exercise the same event loop as production.
        factory = server.config.get_loop_factory()
        self.loop = factory() if factory is not None else asyncio.new_event_loop()
        self.thread = threading.Thread(target=self._run, name=name, daemon=True)

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_until_complete(self.server.serve(sockets=[self.sock]))

    def start(self, timeout: float = 15.0) -> ServerThread:
        self.thread.start()
        deadline = time.monotonic() + timeout
        while not self.server.started:
            if not self.thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("the server did not start")
            time.sleep(0.01)
        return self

    def call(self, coro: Coroutine[Any, Any, T], timeout: float = 120.0) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def stop(self, timeout: float = 15.0) -> None:
        """Shut down as on SIGTERM (draining), then release the loop and the socket."""
        self.server.should_exit = True
        self.thread.join(timeout)
        if self.thread.is_alive():
            raise RuntimeError("the server thread did not stop")
        if not self.loop.is_closed():
            self.loop.close()
        self.sock.close()
