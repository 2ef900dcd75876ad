"""`--api-servers N`: N front-end processes on one listening socket, one engine process.

    realtime serve (this supervisor)
      |- engine process (`realtime.engine.process`), started first, loads the model
      |- front end 0 .. N-1: uvicorn + the app, each with an `EngineProxy` attached
           to the engine's socket, all accepting on the listening sockets the
           supervisor bound (the kernel hands each connection to one of them)

With the echo or scripted engine there is no engine process: each front end runs
its own (they hold no model). Each front end is the single-process server in
every respect but two: its
`/metrics` answers for all of them (`FleetMetrics`: every front end serves its own
exposition on a private Unix socket, and the one scraped merges them), and the
response store is one SQLite file they all open (`--response-store`, or one in a
private temporary directory that goes when the server stops, like the memory
store's records).

Shutdown: SIGTERM, SIGINT or SIGHUP is passed to every front end, which drains as
the single-process server does (terminal frames, 1001), then the engine process
stops. When the engine process dies, every front end fails its requests in flight
and exits 5, and so does the supervisor, which logs the one line that says so.
A front end that dies of anything else takes the server down too (exit 1): a
process manager restarts the whole, as it would the single process.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import multiprocessing
import os
import queue
import shutil
import signal
import socket
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import Any

from realtime.config import ServerConfig
from realtime.engine.process.launcher import EngineProcess
from realtime.observability.merge import merge_expositions
from realtime.observability.metrics import Metrics

log = logging.getLogger("realtime")

#: Seconds a scrape waits for each sibling's exposition.
SIBLING_TIMEOUT_SECONDS = 2.0
#: Exit status when a front end died of something other than the engine's death.
EXIT_FRONT_END_DIED = 1


class FleetMetrics(Metrics):
    """This front end's metrics; `render()` answers for every front end of the server."""

    def __init__(self, directory: str, index: int, count: int):
        super().__init__()
        self._directory = Path(directory)
        self._index = index
        self._count = count
        self._listener: socket.socket | None = None

    def own(self) -> bytes:
        return super().render()

    def render(self) -> bytes:
        texts = [self.own().decode()]
        for index in range(self._count):
            if index != self._index:
                text = self._sibling(index)
                if text is not None:
                    texts.append(text)
        return merge_expositions(texts).encode()

    def _sibling(self, index: int) -> str | None:
        path = self._directory / f"metrics-{index}.sock"
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
                sock.settimeout(SIBLING_TIMEOUT_SECONDS)
                sock.connect(str(path))
                chunks = []
                while chunk := sock.recv(1 << 16):
                    chunks.append(chunk)
        except OSError:
            return None  # gone or stopping: its counts are not in this scrape
        return b"".join(chunks).decode()

    def serve_siblings(self) -> None:
        """Answer the other front ends' scrapes with this one's exposition (a thread)."""
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        listener.bind(str(self._directory / f"metrics-{self._index}.sock"))
        listener.listen(16)
        self._listener = listener
        threading.Thread(target=self._answer, name="realtime-fleet-metrics", daemon=True).start()

    def _answer(self) -> None:
        assert self._listener is not None
        while True:
            try:
                conn, _ = self._listener.accept()
            except OSError:
                return
            with conn, contextlib.suppress(OSError):
                conn.sendall(self.own())


def run_front_end(
    config: ServerConfig,
    address: str | None,
    sockets: list[socket.socket],
    index: int,
    directory: str,
    started: Any,
) -> None:
    """One front end (the target of its process): serve until told to stop. It puts its
    index on `started` (a multiprocessing queue) once it listens."""
    from realtime.app import build_app, engine_from_config
    from realtime.http.background_runs import default_runner_id
    from realtime.observability.logs import configure_logging
    from realtime.server import EXIT_ENGINE_DIED, RealtimeServer, tune_gc, uvicorn_config

    configure_logging(config.log_level, config.log_format, config.api_keys)
    # Each front end runs its own background responses: a runner id of its own.
    runner = config.runner_id or default_runner_id()
    config = dataclasses.replace(config, runner_id=f"{runner}/front-end-{index}")
    engine = engine_from_config(config, engine_address=address)
    metrics = FleetMetrics(directory, index, config.api_servers)
    app = build_app(config, engine, metrics=metrics)
    server = RealtimeServer(
        uvicorn_config(config, app),
        app,
        config.shutdown_grace_seconds,
        on_listening=lambda port: started.put(index),
        engine_death_level=logging.WARNING,  # the supervisor says it once
    )
    metrics.serve_siblings()
    tune_gc(config.gc_threshold)
    server.run(sockets=sockets)
    sys.exit(EXIT_ENGINE_DIED if server.engine_died else 0)


def serve_front_ends(
    config: ServerConfig,
    sockets: list[socket.socket],
    engine: EngineProcess | None,
    announce: Callable[[int | None], None],
) -> int:
    """Run `config.api_servers` front ends until a signal or a death; the exit status.
    Without an engine process (echo, scripted), each front end runs its own engine."""
    from realtime.server import EXIT_ENGINE_DIED

    directory = tempfile.mkdtemp(prefix="realtime-fleet-")
    os.chmod(directory, 0o700)
    if config.response_store_dir is None:
        config = dataclasses.replace(config, response_store_dir=str(Path(directory) / "responses"))
    context = multiprocessing.get_context("spawn")
    started = context.Queue()
    processes = [
        context.Process(
            target=run_front_end,
            args=(config, engine and engine.address, sockets, index, directory, started),
            name=f"realtime-front-end-{index}",
        )
        for index in range(config.api_servers)
    ]
    stopping = False

    def stop(signum: int, frame: FrameType | None) -> None:
        nonlocal stopping
        stopping = True
        for process in processes:
            if process.pid is not None and process.exitcode is None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(process.pid, signal.SIGTERM)

    previous = {
        sig: signal.signal(sig, stop) for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
    }
    status = 0
    try:
        for process in processes:
            process.start()
        listening = 0
        engine_reported = False
        while any(p.exitcode is None for p in processes):
            if listening < len(processes):
                with contextlib.suppress(queue.Empty):
                    started.get(timeout=0.1)
                    listening += 1
                    if listening == len(processes):  # every front end takes connections
                        announce(sockets[0].getsockname()[1] if sockets else None)
            else:
                time.sleep(0.1)
            died = engine is not None and engine.returncode is not None
            if not engine_reported and not stopping and died:
                assert engine is not None
                engine_reported = True
                status = EXIT_ENGINE_DIED
                log.error(
                    "the engine process exited (status %s): every request in flight was"
                    " answered engine_unavailable; the server exits with status %d so its"
                    " process manager can restart it",
                    engine.returncode,
                    EXIT_ENGINE_DIED,
                )
            for process in processes:
                code = process.exitcode
                if code is None or code in (0, EXIT_ENGINE_DIED) or stopping:
                    continue
                log.error(
                    "front end %s exited with status %s; stopping the server", process.name, code
                )
                status = status or EXIT_FRONT_END_DIED
                stop(signal.SIGTERM, None)
        for process in processes:
            process.join()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        for process in processes:
            if process.exitcode is None:
                process.kill()
                process.join()
        if engine is not None:
            engine.stop_sync()
        shutil.rmtree(directory, ignore_errors=True)
    return status
