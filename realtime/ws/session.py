"""One socket, one session: the asyncio glue around the session core.

    socket --reader--> dialect.parse --> SessionCore --actions--> this glue
    request tasks: dialect.job --> prepare, output --> dialect.render_output --> outbox
    watchdog: the core's timer (idle timeout, maximum duration, slow consumer)

Every decision - accepting, refusing, ordering, starting, cancelling, the
terminal frames, how the socket ends - is the core's (`realtime.session.core`);
every frame's shape and every request's work is the dialect's (its package under
`realtime.dialects`; the work is a job, `realtime.session.job`). This module owns
what the core cannot: the socket, the outbox (`realtime.ws.outbox`), the reader,
the request tasks and the watchdog, and does what the core's actions say. It has
no dialect of its own and knows no pipeline.

Backpressure, never growth: when the core's request queue and read-ahead are
full the reader stops reading (uvicorn then stops reading the TCP socket); when
the socket cannot take more, request tasks wait in the outbox, which stops them
pulling tokens from the engine, and text chunks held meanwhile fold into fewer
frames. A client that stops reading altogether is closed with 1008 once a frame
has waited `slow_consumer_seconds` for it.

Session identity: each socket gets a server-made, unguessable `session_id` that
every request passes to the pipeline (the engine's cache hint and isolation key).
Once the socket's request tasks have ended, however the socket ended,
`end_session` tells the engine, which cancels the session's pending warm-up and
releases its cache protection.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import Coroutine
from contextlib import aclosing
from typing import Any, Protocol

from starlette.websockets import WebSocket

from realtime.observability.fast_metrics import FastCounterChild
from realtime.observability.metrics import Metrics, RequestTimer
from realtime.pipeline.json_process import DECODE_PROCESS_BYTES
from realtime.protocol.errors import InternalError, RealtimeError
from realtime.session.actions import (
    Action,
    CancelAll,
    CancelRequest,
    EndSocket,
    RequestEnded,
    RequestRefused,
    ResumeReading,
    Send,
    StartRequest,
    StopReading,
)
from realtime.session.core import SessionCore
from realtime.session.dialect import Dialect, DialectContext, DialectFactory
from realtime.session.record import RequestRecord
from realtime.ws.bookkeeping import (
    TRANSPORT,
    new_session_id,
    record_ended,
    record_refused,
    report_violation,
    watch_read_loop,
    when_all_done,
)
from realtime.ws.large_frames import parse_large
from realtime.ws.outbox import Outbox
from realtime.ws.socket_settings import SocketSettings
from realtime.ws.transport import WRITABLE_EXTENSION

log = logging.getLogger("realtime.ws")


class ServedModel(Protocol):
    """What a session needs of what serves it (the chat pipeline is one)."""

    @property
    def model_name(self) -> str:
        """The served model's name (each dialect checks the model a client names)."""
        ...

    def end_session(self, session_id: str) -> None:
        """The socket is gone: the engine may drop its warm-ups and cache protection."""
        ...


class RealtimeSession:
    def __init__(
        self,
        websocket: WebSocket,
        served: ServedModel,
        settings: SocketSettings,
        *,
        dialect: DialectFactory,
        metrics: Metrics | None = None,
        conn_id: str = "",
    ):
        """`dialect` makes the socket's codec (`realtime.ws.endpoint` picks it at the
        handshake from the route's selectors)."""
        self.ws = websocket
        self.served = served
        self.settings = settings
        self.metrics = metrics if metrics is not None else Metrics()
        self.conn_id = conn_id
        self.session_id = new_session_id()
        violation = functools.partial(report_violation, self.metrics, conn_id)
        self.dialect: Dialect = dialect(
            DialectContext(
                session_id=self.session_id,
                model_name=served.model_name,
                limits=settings.input_limits,
                on_violation=violation,
            )
        )
        loop = asyncio.get_running_loop()
        self.core = SessionCore(
            self.dialect, settings.core, opened_at=loop.time(), on_violation=violation
        )
        self.finished = asyncio.Event()
        #: The close code the socket ended with (the client's, when it closed first).
        self.close_code: int | None = None
        self.requests_answered = 0
        self._sent: dict[str, FastCounterChild] = dict(self.metrics.sent)
        writable = websocket.scope.get("extensions", {}).get(WRITABLE_EXTENSION)
        self._outbox = Outbox(
            websocket.send,
            capacity=settings.outbound_queue_frames,
            on_sent=self._count_sent,
            on_gone=self._peer_gone,
            clock=loop.time,
            fold=self.dialect.fold,
            writable=writable.is_set if writable is not None else None,
        )
        #: The request tasks, by request id.
        self._running: dict[str, asyncio.Task[None]] = {}
        self._side_tasks: set[asyncio.Task[None]] = set()
        self._reader: asyncio.Task[None] | None = None
        self._room = asyncio.Event()
        self._end: asyncio.Future[EndSocket] = loop.create_future()

    # --- what the hub, the metrics and the tests read ---

    @property
    def state(self) -> str:
        return self.core.state

    @property
    def accepted(self) -> int:
        """Requests read from the socket and not yet answered (queued or running)."""
        return len(self.core.records)

    @property
    def queue_depth(self) -> int:
        return self.core.queue_depth

    @property
    def max_queue_depth(self) -> int:
        """Highest request-queue depth seen; bounded by queue size + read-ahead."""
        return self.core.max_queue_depth

    @property
    def outbound_frames(self) -> int:
        return len(self._outbox)

    @property
    def folded_chunks(self) -> int:
        """Chunks folded into an earlier held chunk while the client read slowly."""
        return self._outbox.folded

    # --- events from outside: the hub, a failed send ---

    def begin_shutdown(self) -> None:
        """Server shutdown: refuse new requests, let accepted ones finish, then close 1001."""
        self._perform_now(self.core.shutdown_started())

    def end_shutdown_grace(self) -> None:
        """The shutdown grace is over: cancel what still runs, close 1001."""
        self._perform_now(self.core.shutdown_grace_over())

    def end(self, error: RealtimeError | None) -> None:
        """End the session: the peer is gone (None), or close for `error`."""
        actions = self.core.peer_gone() if error is None else self.core.fail(error)
        self._perform_now(actions)

    def _peer_gone(self) -> None:
        """A send failed: the client is gone."""
        self.end(None)

    def _cancel(self, request_id: str) -> None:
        """What a `response.cancel` for `request_id` does."""
        self._perform_now(self.core.cancel(request_id))

    # --- running ---

    async def run(self) -> None:
        watchdog = asyncio.create_task(self._watchdog(), name="realtime-watchdog")
        reader: asyncio.Task[None] | None = None
        try:
            await self._perform(self.core.opened())  # the dialect's greeting comes first
            reader = self._reader = asyncio.create_task(self._read_loop(), name="realtime-reader")
            watch_read_loop(reader, self.conn_id, lambda: self.end(InternalError()))
            end = await self._end
            reader.cancel()
            watchdog.cancel()
            await asyncio.gather(reader, return_exceptions=True)
            while self._running:  # the tasks answered; let them finish their exits
                await asyncio.gather(*self._running.values(), return_exceptions=True)
            if end.code is None:
                return
            if end.flush_seconds > 0:
                await self._outbox.flush(end.flush_seconds)
            self._outbox.close()
            self.close_code = end.code
            try:
                await self.ws.close(end.code, end.reason)
            except Exception:  # the peer left first; nothing to tell it
                log.debug("close after peer left", exc_info=True)
            self.core.close_sent()
        finally:
            self._outbox.release()  # also breaks the session <-> outbox reference cycle
            for task in (reader, watchdog, *self._side_tasks):
                if task is not None:
                    task.cancel()
            tasks = list(self._running.values())
            for task in tasks:
                task.cancel()
            # Not before they ended: a request finishing its answer may still schedule a
            # warm-up for this session, which `end_session` must then cancel.
            when_all_done(tasks, self._end_session)
            self._reader = None
            self.finished.set()

    def _end_session(self) -> None:
        self.dialect.ended()
        try:
            self.served.end_session(self.session_id)
        except Exception:  # the socket is gone either way; never let this mask its end
            log.exception("end_session failed", extra={"conn_id": self.conn_id})

    # --- reading ---

    async def _read_loop(self) -> None:
        frames_in = self.metrics.frames_in
        loop = asyncio.get_running_loop()
        core, dialect = self.core, self.dialect
        while core.reading:
            while core.read_paused:  # queue and read-ahead full: backpressure (TCP) from here
                self._room.clear()
                await self._room.wait()
            message = await self.ws.receive()
            now = loop.time()
            if message["type"] == "websocket.disconnect":
                self.close_code = message.get("code")
                self._perform_now(core.peer_gone())
                return
            text = message.get("text")
            if text is not None:
                if len(text) >= DECODE_PROCESS_BYTES:  # decoded without holding the loop
                    limits = self.settings.input_limits
                    command = await parse_large(dialect, text, core, limits)
                else:
                    command = dialect.parse(text, core)
            else:
                command = dialect.parse_binary(message.get("bytes") or b"")
            frames_in.labels(command.label).inc()
            await self._perform(core.command(command, now=now, received_at=time.perf_counter()))

    # --- the watchdog: the core's timer ---

    async def _watchdog(self) -> None:
        tick = self.settings.watchdog_tick
        if tick is None:
            return
        loop = asyncio.get_running_loop()
        outbox = self._outbox
        while not self._end.done():
            await asyncio.sleep(tick)
            actions = self.core.timer_fired(
                loop.time(),
                sending_since=outbox.send_started,
                outbox_idle=outbox.empty,
                last_sent=outbox.last_sent,
            )
            self._perform_now(actions)

    # --- one request ---

    async def _run_request(self, request: RequestRecord) -> None:
        request.body_started = True  # from here on, this body reports how it ended
        core, request_id = self.core, request.id
        try:
            if request.cancel_pending:
                raise asyncio.CancelledError  # cancelled before its first step
            job = request.job = self.dialect.job(request)
            await job.prepare()  # store reads, the prompt: before any output
            timer = request.timer = RequestTimer(self.metrics, TRANSPORT, request.received_at)
            observe, kind = job.observer(timer), job.output_kind
            put, render = self._outbox.put, self.dialect.render_output
            # Closing the output (a cancel ends this loop) closes the engine's generator.
            async with aclosing(job.output()) as outputs:
                async for item in outputs:
                    observe(item)
                    for frame in render(request, item):
                        await put(frame, kind, request_id)
            actions = core.request_completed(request_id)
        except asyncio.CancelledError:
            actions = core.request_cancelled(request_id)
        except RealtimeError as exc:
            actions = core.request_failed(request_id, exc)
        except Exception:
            log.exception("request %s failed", request_id, extra={"conn_id": self.conn_id})
            actions = core.request_failed(request_id, InternalError())
        try:
            await self._perform(actions)
        finally:
            # Only its own entry: once answered, the id may already name a new request.
            if self._running.get(request_id) is asyncio.current_task():
                del self._running[request_id]

    def _task_done(self, request: RequestRecord, task: asyncio.Task[None]) -> None:
        """A request task ended; if it never took its first step (cancelled before), report
        the cancel its body would have reported."""
        if request.body_started:
            return
        if self._running.get(request.id) is task:
            del self._running[request.id]
        self._perform_now(self.core.request_cancelled(request.id))

    # --- doing what the core says ---

    async def _perform(self, actions: list[Action]) -> None:
        todo = actions[::-1]
        while todo:
            action = todo.pop()
            if isinstance(action, Send) and action.wait:
                more = await self._send(action)
                todo.extend(reversed(more))
            else:
                todo.extend(reversed(self._do(action)))

    def _perform_now(self, actions: list[Action]) -> None:
        """Perform without waiting (callbacks, the hub): a send that must wait goes to a
        task of its own."""
        todo = actions[::-1]
        while todo:
            action = todo.pop()
            if isinstance(action, Send) and action.wait:
                self._spawn(self._perform([action]))
            else:
                todo.extend(reversed(self._do(action)))

    async def _send(self, send: Send) -> list[Action]:
        """Hand the frames to the outbox, waiting for room; report a terminal one."""
        sent = 0
        try:
            for frame in send.frames:
                await self._outbox.put(frame, send.kind)
                sent += 1
        except asyncio.CancelledError:
            # Cut short (a teardown): hold what is left if there is room, and go on.
            for frame in send.frames[sent:]:
                self._offer(frame, send.kind)
            if send.terminal_of is not None:
                self._perform_now(self.core.terminal_sent(send.terminal_of))
            raise
        if send.terminal_of is not None:
            return self.core.terminal_sent(send.terminal_of)
        return []

    def _do(self, action: Action) -> list[Action]:
        """Perform one action that needs no waiting; returns the actions it led to."""
        if isinstance(action, Send):
            for frame in action.frames:
                self._offer(frame, action.kind)
        elif isinstance(action, StartRequest):
            request = action.request
            task = asyncio.get_running_loop().create_task(
                self._run_request(request), name=f"realtime-{request.id}"
            )
            task.add_done_callback(functools.partial(self._task_done, request))
            earlier = self._running.get(request.id)
            if earlier is not None:  # an answered request of that id, still finishing
                self._side_tasks.add(earlier)
                earlier.add_done_callback(self._side_tasks.discard)
            self._running[request.id] = task
        elif isinstance(action, RequestEnded):
            self.requests_answered += 1
            record_ended(self.metrics, self.conn_id, action)
        elif isinstance(action, CancelRequest):
            self._cancel_task(action.request.id)
        elif isinstance(action, ResumeReading):
            self._room.set()
        elif isinstance(action, CancelAll):
            self._stop_reading()
            for request_id in list(self._running):
                self._cancel_task(request_id)
            current = asyncio.current_task()
            for task in list(self._side_tasks):
                if task is not current:
                    task.cancel()
        elif isinstance(action, StopReading):
            self._stop_reading()
        elif isinstance(action, RequestRefused):
            record_refused(self.metrics, self.conn_id, action)
        elif isinstance(action, EndSocket):
            if not self._end.done():
                self._end.set_result(action)
        return []

    def _cancel_task(self, request_id: str) -> None:
        task = self._running.get(request_id)
        if task is None:
            return
        request = self.core.records.get(request_id)
        if request is not None and not request.body_started:
            # Cancelling it now would skip its body, terminal frame included: it ends
            # as soon as it starts instead.
            request.cancel_pending = True
        else:
            task.cancel()

    def _stop_reading(self) -> None:
        """Cancel the reader one loop pass from now: a message it already has (a
        disconnect after a failed send) is still read, and the core drops any other."""
        reader = self._reader
        if reader is not None and reader is not asyncio.current_task():
            asyncio.get_running_loop().call_soon(reader.cancel)

    def _spawn(self, work: Coroutine[Any, Any, None]) -> None:
        task: asyncio.Task[None] = asyncio.get_running_loop().create_task(work)
        self._side_tasks.add(task)
        task.add_done_callback(self._side_tasks.discard)

    # --- writing ---

    def _offer(self, frame: dict[str, Any], kind: str) -> None:
        """Hold a frame if there is room; used while tearing down, when waiting is wrong."""
        if not self._outbox.offer(frame, kind):
            log.debug("outbox full while ending; frame dropped with the socket")

    def _count_sent(self, kind: str) -> None:
        try:
            self._sent[kind].inc()  # once per frame: no call more than needed
        except KeyError:  # a kind this dialect added: its counter, made once
            self._sent[kind] = self.metrics.frames_out.labels(kind)
            self._sent[kind].inc()
