"""The engine core's loop: commands in from every front end, one step, outputs out.

It runs on the engine process's main thread, which owns the model (the backend of a
`ThreadedEngineCore`-based engine, built here rather than on a thread of its own),
with no event loop beside it:

    while serving:
        handle every command waiting on any connection (add, cancel, pause, ...),
            without blocking while there is work, blocking while there is none
        step the backend once; send each front end its outputs of that step, as one
            message

So a cancel that reached the socket before a step is handled before that step:
a cancelled request costs at most the step already running, as in-process. A
front end whose connection closes has its requests cancelled. Grammars are
compiled on a worker thread (llguidance releases the GIL), so a new schema never
holds up the steps of everyone else; a cached one is ready at once.

Control connections answer queries for engine state (`QUERY`, a copy by pickle)
between steps, after the data connections' commands of the same wake-up, so a
counter read after a cancel was sent sees the cancel handled.
"""

from __future__ import annotations

import importlib
import itertools
import logging
import os
import selectors
import socket
import struct
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from realtime.engine.base import EngineOutput, EngineRequest, SessionAwareEngine
from realtime.engine.errors import EngineRequestError, EngineUnavailable, GenerationError
from realtime.engine.process import wire
from realtime.engine.threaded import CoreStats, PausableBackend, StepBackend

if TYPE_CHECKING:
    from realtime.constrain.matcher import CompiledConstraint, ConstraintCompiler

log = logging.getLogger("realtime.engine.process")

#: Bytes one front end may leave unread before it is taken for dead and dropped.
MAX_UNSENT_BYTES = 64 * 1024 * 1024
_RECV_BYTES = 1 << 18
_UCRED = struct.Struct("3i")


@dataclass(eq=False)
class Connection:
    sock: socket.socket
    role: str | None = None
    reader: wire.FrameReader = field(default_factory=wire.FrameReader)
    unsent: bytearray = field(default_factory=bytearray)
    #: the front end's job ids -> the engine's
    jobs: dict[int, int] = field(default_factory=dict)
    closed: bool = False


@dataclass(eq=False)
class EngineJob:
    connection: Connection
    front_id: int
    request_id: str


class EngineCoreServer:
    """Serves one backend to any number of front ends until `stop()` (or its parent goes).

    `engine` is the engine object the backend came from: it checks requests
    (`check_request`), hears `end_session`, holds the grammar binding, and is where
    `QUERY` paths start ("stats", "core.stats", ...).
    """

    def __init__(
        self,
        engine: Any,
        backend: StepBackend,
        listener: socket.socket,
        *,
        stats: CoreStats,
        parent_fd: int | None = None,
    ):
        self._engine = engine
        self._backend = backend
        self._pausable = isinstance(backend, PausableBackend)
        self._listener = listener
        self.stats = stats
        self._selector = selectors.DefaultSelector()
        self._selector.register(listener, selectors.EVENT_READ, "accept")
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._wake_w.setblocking(False)
        self._selector.register(self._wake_r, selectors.EVENT_READ, "wake")
        if parent_fd is not None:
            self._selector.register(parent_fd, selectors.EVENT_READ, "parent")
        self._parent_fd = parent_fd
        self._ids = itertools.count(1)
        #: the engine's job ids -> their jobs, for every job the backend holds
        self._active: dict[int, EngineJob] = {}
        #: jobs waiting for their grammar to compile
        self._compiling: dict[int, tuple[EngineJob, EngineRequest, Future[CompiledConstraint]]] = {}
        self._compiler: ConstraintCompiler | None = None
        self._pool: ThreadPoolExecutor | None = None
        self._connections: set[Connection] = set()
        self._stopping = False
        #: what a front end that attaches asks for first (`QUERY "handshake"`)
        self.handshake: dict[str, Any] = {}

    # --- the loop ---

    def stop(self) -> None:
        """Leave the loop after the current step (safe from a signal handler)."""
        self._stopping = True
        try:
            self._wake_w.send(b"\0")
        except OSError:
            pass

    def serve(self) -> None:
        backend = self._backend
        try:
            while not self._stopping:
                busy = backend.has_work()
                events = self._selector.select(0 if busy else None)
                if events:
                    self._handle(events)
                if not self._stopping and backend.has_work():
                    self._step()
        finally:
            self._shutdown()

    def _handle(self, events: list[tuple[selectors.SelectorKey, int]]) -> None:
        control: list[Connection] = []
        for key, mask in events:
            tag = key.data
            if tag == "accept":
                self._accept()
            elif tag == "wake":
                self._drain_wake()
            elif tag == "parent":
                if not os.read(self._parent_fd or 0, 4096):  # the parent is gone
                    log.info("engine process: the server is gone; stopping")
                    self._stopping = True
            else:
                conn: Connection = tag
                if mask & selectors.EVENT_WRITE:
                    self._flush(conn)
                if mask & selectors.EVENT_READ and not conn.closed:
                    if conn.role == wire.CONTROL:
                        control.append(conn)  # after the data connections' commands
                    else:
                        self._read(conn)
        for conn in control:
            if not conn.closed:
                self._read(conn)
        self._finish_compiles()

    def _accept(self) -> None:
        try:
            sock, _ = self._listener.accept()
        except BlockingIOError:
            return
        if not _same_user(sock):
            log.warning("engine process: refused a connection from another user")
            sock.close()
            return
        sock.setblocking(False)
        conn = Connection(sock)
        self._connections.add(conn)
        self._selector.register(sock, selectors.EVENT_READ, conn)

    def _drain_wake(self) -> None:
        try:
            while self._wake_r.recv(4096):
                pass
        except BlockingIOError:
            pass

    # --- commands ---

    def _read(self, conn: Connection) -> None:
        try:
            data = conn.sock.recv(_RECV_BYTES)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if not data:
            self._drop(conn)
            return
        try:
            for message in conn.reader.feed(data):
                self._command(conn, message)
        except Exception:
            log.exception("engine process: a broken message; dropping the connection")
            self._drop(conn)

    def _command(self, conn: Connection, message: tuple[Any, ...]) -> None:
        kind = message[0]
        if kind == wire.ADD:
            self._add(conn, message[1], message[2])
        elif kind == wire.CANCEL:
            job_id = conn.jobs.pop(message[1], None)
            if job_id is not None:
                self._cancel(job_id)
        elif kind == wire.PAUSE or kind == wire.RESUME:
            job_id = conn.jobs.get(message[1])
            if job_id is not None and job_id in self._active and self._pausable:
                backend = self._backend
                assert isinstance(backend, PausableBackend)
                if kind == wire.PAUSE:
                    backend.pause(job_id)
                    self.stats.jobs_paused += 1
                else:
                    backend.resume(job_id)
                    self.stats.jobs_resumed += 1
        elif kind == wire.END_SESSION:
            if isinstance(self._engine, SessionAwareEngine):
                self._engine.end_session(message[1])
        elif kind == wire.HELLO:
            conn.role = message[1]
        elif kind == wire.QUERY:
            self._reply(conn, lambda: _attribute(self, self._engine, message[1]))
        elif kind == wire.CALL:
            self._reply(conn, lambda: _call(message[1]))
        else:
            raise wire.ProtocolError(f"unknown message kind {kind!r}")

    def _reply(self, conn: Connection, answer: Callable[[], object]) -> None:
        try:
            message: tuple[Any, ...] = (wire.REPLY, answer())
        except Exception as exc:
            message = (wire.REPLY_ERROR, f"{type(exc).__name__}: {exc}")
        self._send(conn, wire.frame(message))

    def _add(self, conn: Connection, front_id: int, values: tuple[Any, ...]) -> None:
        request, spec = wire.decode_request(values)
        job = EngineJob(conn, front_id, request.request_id)
        check = getattr(self._engine, "check_request", None)
        try:
            if callable(check):
                check(request)
            if spec is not None:
                compiled = self._cached_constraint(spec)
                if compiled is None:  # a new grammar: compiled off this thread
                    job_id = next(self._ids)
                    conn.jobs[front_id] = job_id
                    assert self._pool is not None and self._compiler is not None
                    future = self._pool.submit(self._compiler.compile, spec)
                    future.add_done_callback(lambda _: self._wake())
                    self._compiling[job_id] = (job, request, future)
                    return
                request.constraint = compiled
        except GenerationError as exc:
            self._fail(job, exc)
            return
        job_id = next(self._ids)
        conn.jobs[front_id] = job_id
        self._start(job_id, job, request)

    def _start(self, job_id: int, job: EngineJob, request: EngineRequest) -> None:
        try:
            self._backend.add(job_id, request)
        except ValueError as exc:
            # The request's own fault (say, too large for the cache): it fails alone.
            job.connection.jobs.pop(job.front_id, None)
            self._fail(job, EngineRequestError(f"the engine cannot run this request: {exc}"))
            return
        self._active[job_id] = job
        self.stats.jobs_added += 1

    def _cancel(self, job_id: int) -> None:
        if self._compiling.pop(job_id, None) is not None:
            return
        if self._active.pop(job_id, None) is not None:
            self._backend.cancel(job_id)
            self.stats.jobs_cancelled += 1

    def _cached_constraint(self, spec: Any) -> CompiledConstraint | None:
        if self._compiler is None:
            binding = getattr(self._engine, "grammar_binding", None)
            if binding is None:
                reason = getattr(self._engine, "grammar_unavailable_reason", None)
                raise EngineRequestError(
                    f"this engine cannot enforce constraints: {reason or 'no grammar support'}"
                )
            from realtime.constrain.matcher import ConstraintCompiler
            from realtime.constrain.priority import lower_priority

            # Each spec carries its limits (bounded compile); below the steps in priority.
            self._compiler = ConstraintCompiler(binding)
            self._pool = ThreadPoolExecutor(
                1, thread_name_prefix="realtime-grammar", initializer=lower_priority
            )
        return self._compiler.cached(spec)

    def _wake(self) -> None:
        try:
            self._wake_w.send(b"\0")
        except OSError:
            pass

    def _finish_compiles(self) -> None:
        if not self._compiling:
            return
        done = [job_id for job_id, (_, _, f) in self._compiling.items() if f.done()]
        for job_id in done:
            job, request, future = self._compiling.pop(job_id)
            try:
                request.constraint = future.result()
            except Exception as exc:
                job.connection.jobs.pop(job.front_id, None)
                detail = getattr(exc, "message", None) or type(exc).__name__
                self._fail(job, EngineRequestError(f"the constraint cannot be enforced: {detail}"))
                continue
            self._start(job_id, job, request)

    # --- steps and outputs ---

    def _step(self) -> None:
        backend = self._backend
        try:
            outputs = backend.step()
        except Exception as exc:
            log.exception(
                "engine process: step failed; failing its %d active request(s)", len(self._active)
            )
            self.stats.step_failures += 1
            error = EngineUnavailable(
                f"engine unavailable: the engine failed ({type(exc).__name__})"
            )
            failed = list(self._active.values())
            self._active.clear()
            for job in failed:
                job.connection.jobs.pop(job.front_id, None)
                self._fail(job, error)
            backend.recover()
            return
        self.stats.steps += 1
        if outputs:
            self._deliver(outputs)

    def _deliver(self, outputs: list[tuple[int, EngineOutput]]) -> None:
        active = self._active
        stats = self.stats
        batches: dict[Connection, list[tuple[int, tuple[Any, ...]]]] = {}
        for job_id, output in outputs:
            job = active.get(job_id)
            if job is None:
                continue  # cancelled while the step ran
            if output.finish_reason is not None:
                del active[job_id]
                job.connection.jobs.pop(job.front_id, None)
                stats.jobs_finished += 1
            stats.outputs += 1
            batch = batches.get(job.connection)
            if batch is None:
                batch = batches[job.connection] = []
            batch.append((job.front_id, wire.encode_output(output)))
        for conn, batch in batches.items():
            self._send(conn, wire.frame((wire.OUTPUTS, batch)))

    def _fail(self, job: EngineJob, error: GenerationError) -> None:
        self._send(
            job.connection, wire.frame((wire.FAILED, job.front_id, wire.encode_error(error)))
        )

    # --- sending ---

    def _send(self, conn: Connection, data: bytes) -> None:
        if conn.closed:
            return
        if not conn.unsent:
            try:
                sent = conn.sock.send(data)
            except BlockingIOError:
                sent = 0
            except OSError:
                self._drop(conn)
                return
            if sent == len(data):
                return
            data = data[sent:]
            self._selector.modify(conn.sock, selectors.EVENT_READ | selectors.EVENT_WRITE, conn)
        conn.unsent += data
        if len(conn.unsent) > MAX_UNSENT_BYTES:
            log.warning("engine process: a front end stopped reading; dropping it")
            self._drop(conn)

    def _flush(self, conn: Connection) -> None:
        try:
            sent = conn.sock.send(conn.unsent)
        except BlockingIOError:
            return
        except OSError:
            self._drop(conn)
            return
        del conn.unsent[:sent]
        if not conn.unsent:
            self._selector.modify(conn.sock, selectors.EVENT_READ, conn)

    def _drop(self, conn: Connection) -> None:
        """The front end went away (or broke the protocol): its requests stop."""
        if conn.closed:
            return
        conn.closed = True
        for job_id in list(conn.jobs.values()):
            self._cancel(job_id)
        conn.jobs.clear()
        self._connections.discard(conn)
        try:
            self._selector.unregister(conn.sock)
        except (KeyError, ValueError):
            pass
        conn.sock.close()

    def _shutdown(self) -> None:
        for conn in list(self._connections):
            self._drop(conn)
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
        self._selector.close()
        self._listener.close()
        self._wake_r.close()
        self._wake_w.close()


def _same_user(sock: socket.socket) -> bool:
    try:
        _, uid, _ = _UCRED.unpack(sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12))
    except (OSError, AttributeError):  # not Linux: the directory's mode is the guard
        return True
    return bool(uid == os.getuid())


def _attribute(server: EngineCoreServer, engine: Any, path: str) -> object:
    """A dotted attribute of the engine ("stats", "backend.prefixes.entries"), where a
    part ending in "()" is a method called without arguments; "core.stats"
    is this loop's counters (the engine's own thread core does not run here)."""
    if path == "core.stats":
        return server.stats
    if path == "handshake":
        return server.handshake
    target = engine
    for part in path.split("."):
        call = part.endswith("()")
        name = part[:-2] if call else part
        if name.startswith("_"):
            raise AttributeError(f"{name!r} is private")
        target = getattr(target, name)
        if call:  # "snapshot()": a method's result, for state worth computing once
            target = target()
    return target


def _call(spec: str) -> object:
    module, _, name = spec.partition(":")
    target: Any = importlib.import_module(module)
    for part in name.split("."):
        target = getattr(target, part)
    return target()
