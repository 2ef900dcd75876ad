"""`EngineProxy`: the front end's `Engine` for an engine core in another process.

The pipeline sees an engine like any other: `generate()` yields `EngineOutput`s and
stops the request when closed; `info`, `ready`, `grammar_binding`, `end_session`
and `schedules_background` mean what they mean in-process.

    front end (event loop)                          engine process (core_server.py)
    generate() --ADD------------------------------>  backend.add
    close/cancel --CANCEL------------------------->  backend.cancel, before its next step
    a full channel --PAUSE / a drained one RESUME->  backend.pause / resume
    OutputChannel <--OUTPUTS (one message a step)--  backend.step()

The data connection is read on the event loop (`add_reader`): one wake-up takes
every message waiting, for every request. Each request's outputs go into an
`OutputChannel`, bounded as in-process: a reader that lags has its request paused
in the engine (or its outputs folded, for a backend that cannot pause).

State is read from the engine process on a second, blocking connection (`query`),
from any thread: `stats` and `core.stats` are copies of the engine's counters, read
when asked, so tests and metrics see what the engine process computed.

When the engine process dies, the connection ends: every request in flight fails
with `EngineUnavailable` (a retryable 503 `engine_unavailable` for its client),
`ready` turns false, and the callbacks given to `on_death` run once.
"""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import logging
import socket
import threading
from collections.abc import AsyncGenerator, Callable
from typing import TYPE_CHECKING, Any

from realtime.engine.base import EngineOutput, EngineRequest
from realtime.engine.errors import EngineUnavailable
from realtime.engine.grammar import NOT_LOADED, GrammarSupport, bind_grammar
from realtime.engine.output_channel import OutputChannel
from realtime.engine.process import wire
from realtime.engine.process.launcher import EngineProcess
from realtime.engine.process.main import Handshake
from realtime.engine.process.spec import EngineSpec
from realtime.engine.snapshot import EngineSnapshot
from realtime.model.info import ModelInfo
from realtime.model.model_dir import load_model_dir

if TYPE_CHECKING:
    from realtime.constrain.tokenizer import TokenizerBinding

log = logging.getLogger("realtime.engine.process")

_RECV_BYTES = 1 << 18

#: What a client is told when the engine process is gone (retryable: 503, close 1011).
ENGINE_EXITED = "engine unavailable: the engine process exited; retry the request"


#: Seconds a reported engine state is served before a scrape asks for a new one.
SNAPSHOT_SECONDS = 1.0


class RemoteCore:
    """`engine.core` across the boundary: the engine loop's counters, read when asked."""

    def __init__(self, proxy: EngineProxy):
        self._proxy = proxy

    @property
    def stats(self) -> Any:
        return self._proxy.query("core.stats")

    @property
    def running(self) -> bool:
        return self._proxy.ready


class EngineProxy:
    """An engine in another process. Give it a spec to start (and own) that process,
    or also an `address` to attach to one already running (another front end's)."""

    def __init__(self, spec: EngineSpec, *, address: str | None = None):
        model_dir = spec.model_dir
        if model_dir is None:
            raise ValueError(f"the {spec.engine} engine needs --model DIR (a model directory)")
        self.spec = spec
        files = load_model_dir(model_dir, chat_template=spec.options.get("chat_template"))
        self._info = files.model_info(name=spec.options.get("model_name"))
        self.process: EngineProcess | None = None if address is not None else EngineProcess(spec)
        self._address = address
        self.handshake: Handshake | None = None
        self._grammar: GrammarSupport = NOT_LOADED
        self._sock: socket.socket | None = None
        self._control: socket.socket | None = None
        self._control_lock = threading.Lock()
        self._control_reader = wire.FrameReader()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._reader = wire.FrameReader()
        self._unsent = bytearray()
        self._jobs: dict[int, OutputChannel] = {}
        self._ids = itertools.count(1)
        self._dead: str | None = None
        self._closed = False
        self._death_callbacks: list[Callable[[str], None]] = []
        self.core = RemoteCore(self)
        #: The engine's last reported state (`snapshot`), when it was asked for, and
        #: the refresh under way (one at a time); None: the engine reports none.
        self._snapshot: EngineSnapshot | None = EngineSnapshot()
        self._snapshot_at = -SNAPSHOT_SECONDS
        self._refreshing: asyncio.Task[None] | None = None

    # --- the Engine protocol ---

    @property
    def info(self) -> ModelInfo:
        return self._info

    @property
    def ready(self) -> bool:
        return self._sock is not None and self._dead is None and not self._closed

    @property
    def unavailable_reason(self) -> str | None:
        if self._dead is not None:
            return self._dead
        if self._closed:
            return "the engine has stopped"
        if self._sock is None:
            return "the model is not loaded yet"
        return None

    @property
    def schedules_background(self) -> bool:
        return self.handshake is not None and self.handshake.schedules_background

    @property
    def grammar_binding(self) -> TokenizerBinding | None:
        return self._grammar.binding

    @property
    def grammar_unavailable_reason(self) -> str | None:
        return self._grammar.reason

    @property
    def pid(self) -> int | None:
        """The engine process's pid, once started."""
        return None if self.handshake is None else self.handshake.pid

    @property
    def label(self) -> str:
        """What the startup log calls this engine: the class the engine process runs."""
        if self.handshake is None:
            return type(self).__name__
        return f"{self.handshake.engine_class} in an engine process"

    @property
    def address(self) -> str:
        if self._address is not None:
            return self._address
        assert self.process is not None
        return self.process.address

    async def start(self) -> None:
        if self.process is not None:
            handshake = await self.process.start()
        self._loop = asyncio.get_running_loop()
        control = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        control.connect(self.address)
        control.sendall(wire.frame((wire.HELLO, wire.CONTROL)))
        self._control = control
        if self.process is None:
            handshake = Handshake(**await asyncio.to_thread(self.query, "handshake"))
        self.handshake = handshake
        self._info = dataclasses.replace(
            self._info,
            context_length=handshake.context_length,
            vocab_size=handshake.vocab_size or self._info.vocab_size,
        )
        self._grammar = await asyncio.to_thread(self._bind_grammar, handshake)
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.connect(self.address)
        sock.sendall(wire.frame((wire.HELLO, wire.DATA)))
        sock.setblocking(False)
        self._sock = sock
        self._loop.add_reader(sock.fileno(), self._readable)

    def _bind_grammar(self, handshake: Handshake) -> GrammarSupport:
        if not handshake.constraining:
            return GrammarSupport(None, f"the {self.spec.engine} engine does not constrain")
        if handshake.logits_width is None:
            return GrammarSupport(None, handshake.grammar_unavailable_reason or "no grammar")
        return bind_grammar(self._info.tokenizer, logits_width=handshake.logits_width)

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._disconnect()
        self._fail_all("engine unavailable: shutting down")
        if self.process is not None:
            code = await self.process.stop()
            if code not in (0, None) and self._dead is None:
                log.warning("the engine process exited with status %s", code)

    async def generate(self, request: EngineRequest) -> AsyncGenerator[EngineOutput, None]:
        if not self.ready:
            raise EngineUnavailable(f"engine unavailable: {self.unavailable_reason}")
        assert self._loop is not None and self.handshake is not None
        loop = self._loop
        job_id = next(self._ids)
        message = wire.frame((wire.ADD, job_id, wire.encode_request(request)))
        channel = OutputChannel(self.handshake.output_limit, merge=self.handshake.merge_backlog)
        self._jobs[job_id] = channel
        self._send(message)
        finished = False
        try:
            while True:
                item, resume = channel.take(loop)
                if item is None:
                    await channel.wait()
                    continue
                if resume:
                    channel.resumed()
                    self._send(wire.frame((wire.RESUME, job_id)))
                if isinstance(item, BaseException):
                    finished = True
                    raise item
                if item.finish_reason is not None:
                    finished = True
                yield item
                if finished:
                    return
        finally:
            self._jobs.pop(job_id, None)
            if not finished and self.ready:
                self._send(wire.frame((wire.CANCEL, job_id)))

    def end_session(self, session_id: str) -> None:
        if self.ready:
            self._send(wire.frame((wire.END_SESSION, session_id)))

    # --- engine state, from any thread ---

    def query(self, path: str) -> Any:
        """A copy of the engine's attribute at `path` ("stats", "core.stats", ...); a part
        ending in "()" calls that method (a snapshot method of the engine, say)."""
        return self._control_call((wire.QUERY, path))

    async def aquery(self, path: str) -> Any:
        """`query` without blocking the event loop (for a scrape, say)."""
        return await asyncio.to_thread(self.query, path)

    def snapshot(self) -> EngineSnapshot:
        """The engine's last reported state (`ReportsSnapshot`): never waits for the engine
        process; a scrape that finds it older than `SNAPSHOT_SECONDS` asks for a new one
        in the background, which the next scrape reads. An engine that reports none is
        counted from here: running = the requests streaming through this proxy."""
        snapshot = self._snapshot
        if snapshot is None:
            return EngineSnapshot(running=len(self._jobs))
        loop = self._loop
        stale = loop is not None and loop.time() - self._snapshot_at >= SNAPSHOT_SECONDS
        if stale and self._dead is None and (self._refreshing is None or self._refreshing.done()):
            assert loop is not None
            self._refreshing = loop.create_task(self._refresh_snapshot())
        return snapshot

    async def _refresh_snapshot(self) -> None:
        assert self._loop is not None
        try:
            reported = await self.aquery("snapshot()")
        except LookupError:  # the engine has no snapshot(): count requests here
            self._snapshot = None
            return
        except EngineUnavailable:
            return
        if isinstance(reported, EngineSnapshot):
            self._snapshot = reported
            self._snapshot_at = self._loop.time()

    def call(self, function: str) -> Any:
        """Run `package.module:function` in the engine process; its result (test probes)."""
        return self._control_call((wire.CALL, function))

    @property
    def stats(self) -> Any:
        """The engine's own counters (`CpuStats` for the cpu engine), copied now."""
        return self.query("stats")

    def _control_call(self, message: tuple[Any, ...]) -> Any:
        with self._control_lock:
            control = self._control
            if control is None or self._dead is not None:
                raise EngineUnavailable(f"engine unavailable: {self.unavailable_reason}")
            try:
                control.sendall(wire.frame(message))
                while True:
                    data = control.recv(_RECV_BYTES)
                    if not data:
                        raise EngineUnavailable(ENGINE_EXITED)
                    for answer in self._control_reader.feed(data):
                        if answer[0] == wire.REPLY_ERROR:
                            raise LookupError(answer[1])
                        return answer[1]
            except OSError:
                raise EngineUnavailable(ENGINE_EXITED) from None

    # --- death ---

    def on_death(self, callback: Callable[[str], None]) -> None:
        """Call `callback(reason)` once, on the event loop, if the engine process dies."""
        self._death_callbacks.append(callback)

    @property
    def died(self) -> str | None:
        """Why the engine process is gone (it died, not closed by us), or None."""
        return self._dead

    def _died(self) -> None:
        if self._dead is not None or self._closed:
            return
        code = self.process.returncode if self.process is not None else None
        detail = f" (status {code})" if code is not None else ""
        self._dead = f"the engine process exited{detail}"
        self._disconnect()
        self._fail_all(ENGINE_EXITED)
        for callback in self._death_callbacks:
            try:
                callback(self._dead)
            except Exception:
                log.exception("an engine-death callback failed")

    def _fail_all(self, message: str) -> None:
        jobs, self._jobs = self._jobs, {}
        for channel in jobs.values():
            channel.fail(EngineUnavailable(message))

    def _disconnect(self) -> None:
        sock, self._sock = self._sock, None
        if sock is not None:
            if self._loop is not None and not self._loop.is_closed():
                self._loop.remove_reader(sock.fileno())
                if self._unsent:
                    self._loop.remove_writer(sock.fileno())
            sock.close()
        self._unsent.clear()
        with self._control_lock:
            control, self._control = self._control, None
        if control is not None:
            control.close()

    # --- the data connection, on the event loop ---

    def _send(self, data: bytes) -> None:
        sock = self._sock
        if sock is None:
            return
        if not self._unsent:
            try:
                sent = sock.send(data)
            except BlockingIOError:
                sent = 0
            except OSError:
                self._died()
                return
            if sent == len(data):
                return
            data = data[sent:]
            assert self._loop is not None
            self._loop.add_writer(sock.fileno(), self._writable)
        self._unsent += data

    def _writable(self) -> None:
        sock = self._sock
        if sock is None:
            return
        try:
            sent = sock.send(self._unsent)
        except BlockingIOError:
            return
        except OSError:
            self._died()
            return
        del self._unsent[:sent]
        if not self._unsent and self._loop is not None:
            self._loop.remove_writer(sock.fileno())

    def _readable(self) -> None:
        sock = self._sock
        if sock is None:
            return
        try:
            data = sock.recv(_RECV_BYTES)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if not data:
            self._died()
            return
        assert self.handshake is not None
        pausable = self.handshake.pausable
        jobs = self._jobs
        decode = wire.decode_output
        for message in self._reader.feed(data):
            kind = message[0]
            if kind == wire.OUTPUTS:
                for job_id, values in message[1]:
                    channel = jobs.get(job_id)
                    if channel is None:
                        continue  # its reader is gone; the cancel is on its way
                    pushed = channel.push(decode(values), can_pause=pausable)
                    if pushed.wake:
                        channel.notify()
                    if pushed.pause:
                        self._send(wire.frame((wire.PAUSE, job_id)))
            elif kind == wire.FAILED:
                channel = jobs.get(message[1])
                if channel is not None:
                    channel.fail(wire.decode_error(message[2]))
