"""One socket, one session: the reader, the bounded request queue, the request tasks, the outbox.

    socket --reader--> [request queue, bounded] --dispatcher--> request tasks
    request tasks --> [outbox: sent at once, or held (bounded) for its writer] --> socket
    watchdog: idle timeout, maximum duration, slow consumer

Backpressure, never growth: when the request queue is full the reader stops
reading (uvicorn then stops reading the TCP socket); when the socket cannot take
more, request tasks wait in the outbox (`realtime.ws.outbox`), which stops them
pulling tokens from the engine, and text chunks held meanwhile fold into fewer
frames. A client that stops reading altogether is closed with 1008 once a frame
has waited `slow_consumer_seconds` for it, so a stalled socket holds bounded
memory for a bounded time.

In flight: a request is in flight from the moment the reader accepts it until
its terminal frame is queued (queued + waiting for a slot + running). The
request queue's backpressure bounds that at queue size + read-ahead +
concurrency + 1 (`realtime.ws.request_queue`: the reader goes on reading past a
full queue, for a bounded number of request frames, so control frames behind
them still act at once); the `max_in_flight_per_socket` limit refuses a request
beyond it with an `error` frame instead, and only takes effect when it is set
below that bound.

Ordering: a request without `request_id` gets a server id and runs after every
earlier request without one finished, so a client that does not demultiplex
reads its answers in order; while it waits it holds a concurrency slot, so the
requests behind it are not blocked by the wait itself. Requests with ids run
concurrently (up to `max_concurrent_per_socket`). An `error` frame whose
`request_id` is null (a broken control frame, a duplicate id) ends no request.

Every request the server accepted ends with exactly one terminal frame:
`response.done` (completed or cancelled) or `error`. The session ends in one of
these ways, decided once through `end()`: the peer went away (nothing more is
sent), a close with a code (in-flight work is cancelled, each request gets its
terminal frame if the socket can take it, then the Close frame), or a graceful
end (`session.close`, or a server shutdown: in-flight work finishes first, then
1000 or 1001; a shutdown's grace period bounds that wait). The socket's and the
requests' states follow the tables in `realtime.protocol.states`.

Session identity: each socket gets a server-made, unguessable `session_id` that
every request passes to the pipeline (the engine's cache hint and isolation key;
the client can neither choose nor reuse one). Once the socket's request tasks have
ended, however the socket ended, `pipeline.end_session` tells the engine, which
cancels the session's pending warm-up and releases its cache protection. An
optional `session.setup`, read before any request, fixes the model and request
defaults; without one the socket behaves as if sessions did not exist.
"""

from __future__ import annotations

import asyncio
import functools
import itertools
import logging
import time
import uuid
from contextlib import aclosing
from dataclasses import dataclass, field
from typing import Any

from starlette.websockets import WebSocket

from realtime.config import ServerConfig, input_limits
from realtime.observability.logs import event
from realtime.observability.metrics import Metrics, RequestTimer
from realtime.pipeline import ChatPipeline, PreparedChat
from realtime.pipeline.offload import prepare_chat
from realtime.protocol.close_codes import CloseCode, truncate_reason
from realtime.protocol.errors import (
    BinaryFrameError,
    DuplicateRequestIdError,
    EngineError,
    EngineUnavailableError,
    InternalError,
    MalformedFrameError,
    ModelNotFoundError,
    RealtimeError,
    ServerShuttingDownError,
    SlowConsumerError,
    TooManyRequestsInFlightError,
)
from realtime.protocol.frames import (
    CancelFrame,
    CloseSessionFrame,
    FrameRejected,
    RequestFrame,
    SessionAlreadySetUpError,
    SessionSetupFrame,
    decode_client_frame,
    done_frame,
    error_frame,
    expiring_frame,
    ready_frame,
)
from realtime.protocol.request import ChatCompletionRequest
from realtime.protocol.states import (
    REQUEST,
    SETUP,
    SOCKET,
    IllegalTransition,
    RequestEvent,
    RequestState,
    SetupEvent,
    SetupState,
    SocketEvent,
    SocketState,
)
from realtime.ws.outbox import Outbox
from realtime.ws.request_queue import RequestQueue
from realtime.ws.transport import WRITABLE_EXTENSION

log = logging.getLogger("realtime.ws")

TRANSPORT = "ws"
_FLUSH_SECONDS = 5.0
#: How long shutdown spends flushing terminal frames after the grace period.
_SHUTDOWN_FLUSH_SECONDS = 2.0


@dataclass(slots=True)
class _Queued:
    request_id: str
    ordered: bool
    request: ChatCompletionRequest | None
    #: Set for a request that failed validation: answered in its turn, not run.
    rejection: RealtimeError | None = None
    received_at: float = field(default_factory=time.perf_counter)
    #: Characters of the frame it came in: large ones are prepared off the event loop.
    size: int = 0


@dataclass(frozen=True, slots=True)
class _Close:
    code: int
    reason: str
    drain: bool = False
    #: The socket-table event this ending fires.
    event: SocketEvent = SocketEvent.FAULT
    #: Why in-flight requests get cancelled (the cancellations metric's label).
    cause: str = "server_close"
    #: Bound on delivering the remaining frames before the Close frame; 0 skips it.
    flush_seconds: float = _FLUSH_SECONDS

    @classmethod
    def for_error(cls, error: RealtimeError) -> _Close:
        code = error.close_code if error.close_code is not None else CloseCode.INTERNAL_ERROR
        flush = 0.0 if isinstance(error, SlowConsumerError) else _FLUSH_SECONDS
        return cls(int(code), truncate_reason(error.message), flush_seconds=flush)


#: `None` means the peer is gone; nothing more can be sent.
_Ending = _Close | None

_STOP: Any = object()

_SESSION_CLOSED = _Close(
    CloseCode.NORMAL, "session closed", drain=True, event=SocketEvent.SESSION_CLOSE
)


def new_session_id() -> str:
    """122 random bits: nobody can guess another socket's id to reach its cache."""
    return f"sess_{uuid.uuid4().hex}"


class RealtimeSession:
    def __init__(
        self,
        websocket: WebSocket,
        pipeline: ChatPipeline,
        config: ServerConfig,
        *,
        metrics: Metrics | None = None,
        conn_id: str = "",
    ):
        self.ws = websocket
        self.pipeline = pipeline
        self.config = config
        self.metrics = metrics if metrics is not None else Metrics()
        self.conn_id = conn_id
        self.session_id = new_session_id()
        #: `SetupState`: whether a `session.setup` is still allowed.
        self.setup_state = SetupState.AWAITING_SETUP.value
        #: From `session.setup`: the fields (model included) every request inherits.
        self._defaults: dict[str, Any] | None = None
        self._input_limits = input_limits(config)
        self.finished = asyncio.Event()
        #: Highest request-queue depth seen; bounded by queue size + read-ahead by construction.
        self.max_queue_depth = 0
        self.state = SocketState.OPEN.value
        #: The close code the socket ended with (the client's, when it closed first).
        self.close_code: int | None = None
        self.requests_answered = 0
        self._requests: RequestQueue[_Queued] = RequestQueue(
            config.request_queue_size, config.read_ahead_requests
        )
        self._sent = {**self.metrics.sent, "ready": self.metrics.frames_out.labels("ready")}
        writable = websocket.scope.get("extensions", {}).get(WRITABLE_EXTENSION)
        self._outbox = Outbox(
            websocket.send,
            capacity=config.outbound_queue_frames,
            on_sent=self._count_sent,
            on_gone=self._peer_gone,
            clock=asyncio.get_running_loop().time,
            writable=writable.is_set if writable is not None else None,
        )
        self._slots = asyncio.Semaphore(config.max_concurrent_per_socket)
        self._known: set[str] = set()  # ids queued or running
        self._states: dict[str, str] = {}  # request id -> RequestState
        self._running: dict[str, asyncio.Task[None]] = {}
        #: Ids whose task exists but has not taken its first step (see `_dispatch_loop`).
        self._not_started: set[str] = set()
        self._cancel_queued: set[str] = set()
        self._cancel_running: set[str] = set()
        self._auto_ids = itertools.count(1)
        self._last_ordered: asyncio.Task[None] | None = None
        self._holding: _Queued | None = None  # dequeued, waiting for a slot
        loop = asyncio.get_running_loop()
        self._ending: asyncio.Future[_Ending] = loop.create_future()
        #: A graceful end (drain) can still be cut short: by the peer leaving, a fault,
        #: the end of the shutdown grace or of the expiry grace.
        self._interrupt: asyncio.Future[_Ending] = loop.create_future()
        self._tearing_down = False
        self._teardown_cause = "server_close"
        self._opened_at = loop.time()
        self._last_activity = self._opened_at
        self._expires_at: float | None = None
        self._side_tasks: set[asyncio.Task[None]] = set()

    @property
    def accepted(self) -> int:
        """Requests read from the socket and not yet answered (queued or running)."""
        return len(self._known)

    @property
    def queue_depth(self) -> int:
        return len(self._requests)

    @property
    def outbound_frames(self) -> int:
        return len(self._outbox)

    @property
    def folded_chunks(self) -> int:
        """Chunks folded into an earlier held chunk while the client read slowly."""
        return self._outbox.folded

    # --- state tables ---

    def _socket_event(self, event: SocketEvent) -> None:
        try:
            self.state = SOCKET.next(self.state, event.value)
        except IllegalTransition as exc:
            self._violation("socket", exc)

    def _request_event(self, request_id: str, event: RequestEvent) -> None:
        state = self._states.get(request_id, RequestState.NEW.value)
        try:
            target = REQUEST.next(state, event.value)
        except IllegalTransition as exc:
            self._violation("request", exc)
            return
        if target in REQUEST.final:
            self._states.pop(request_id, None)
        else:
            self._states[request_id] = target

    def _setup_event(self, event: SetupEvent) -> None:
        try:
            self.setup_state = SETUP.next(self.setup_state, event.value)
        except IllegalTransition as exc:
            self._violation("setup", exc)

    def _violation(self, machine: str, exc: IllegalTransition) -> None:
        self.metrics.state_violations.labels(machine).inc()
        log.error("state machine violation: %s", exc, extra={"conn_id": self.conn_id})

    # --- lifecycle ---

    def end(self, how: _Ending | RealtimeError) -> None:
        """Decide how the session ends; the first decision wins (a drain can be cut short)."""
        if isinstance(how, RealtimeError):
            how = _Close.for_error(how)
        if not self._ending.done():
            self._ending.set_result(how)
        elif (
            not self._interrupt.done()
            and not self._tearing_down
            and (ending := self._ending.result()) is not None
            and ending.drain
        ):
            self._interrupt.set_result(how)
        else:
            return
        self._socket_event(SocketEvent.PEER_GONE if how is None else how.event)
        if how is None:
            self._stop_work_now()

    def _stop_work_now(self) -> None:
        """The peer is gone: cancel running requests now, not after the teardown's awaits.

        Each await on the way to `_cancel_all` would let a busy engine run another
        step for nobody; cancelling here stops it at its current step.
        """
        self._tearing_down = True
        self._teardown_cause = "disconnect"
        for task in self._running.values():
            task.cancel()

    def begin_shutdown(self) -> None:
        """Server shutdown: refuse new requests, let accepted ones finish, then close 1001."""
        if self.state in (SocketState.OPEN.value, SocketState.EXPIRING.value):
            self._socket_event(SocketEvent.SHUTDOWN)
            self._maybe_finish_shutdown()
        elif self.state == SocketState.DRAINING.value:
            self._socket_event(SocketEvent.SHUTDOWN)

    def end_shutdown_grace(self) -> None:
        """The shutdown grace is over: cancel what still runs, close 1001."""
        self.end(
            _Close(
                CloseCode.GOING_AWAY,
                "server shutting down",
                event=SocketEvent.GRACE_OVER,
                cause="shutdown",
                flush_seconds=_SHUTDOWN_FLUSH_SECONDS,
            )
        )

    def _maybe_finish_shutdown(self) -> None:
        if self.state == SocketState.SHUTTING_DOWN.value and not self._known:
            self.end(
                _Close(
                    CloseCode.GOING_AWAY,
                    "server shutting down",
                    event=SocketEvent.ALL_ANSWERED,
                    cause="shutdown",
                )
            )

    async def run(self) -> None:
        reader = asyncio.create_task(self._read_loop(), name="realtime-reader")
        dispatcher = asyncio.create_task(self._dispatch_loop(), name="realtime-dispatcher")
        watchdog = asyncio.create_task(self._watchdog(), name="realtime-watchdog")
        try:
            ending = await self._ending
            reader.cancel()
            await asyncio.gather(reader, return_exceptions=True)
            if ending is not None and ending.drain:
                ending = await self._drain(dispatcher, ending)
            self._tearing_down = True
            self._teardown_cause = ending.cause if ending is not None else "disconnect"
            watchdog.cancel()
            dispatcher.cancel()
            await asyncio.gather(dispatcher, return_exceptions=True)
            await self._cancel_all(peer_gone=ending is None)
            if ending is None:
                return
            if ending.flush_seconds > 0:
                await self._outbox.flush(ending.flush_seconds)
            self._outbox.close()
            await self._close_socket(ending)
        finally:
            self._outbox.release()  # also breaks the session <-> outbox reference cycle
            for task in (reader, dispatcher, watchdog, *self._side_tasks):
                task.cancel()
            for task in list(self._running.values()):
                task.cancel()
            self._end_session_after(list(self._running.values()))
            self.finished.set()

    def _end_session_after(self, tasks: list[asyncio.Task[None]]) -> None:
        """Tell the pipeline the session is over once `tasks` (its requests) have ended.

        Not before: a request finishing its answer may still schedule a warm-up for
        this session, which `end_session` must then cancel. Done by callbacks, not by
        awaiting, because `run()` may itself be cancelled here.
        """
        pending = {task for task in tasks if not task.done()}

        def one_done(task: asyncio.Task[None]) -> None:
            pending.discard(task)
            if not pending:
                self._end_session()

        if not pending:
            self._end_session()
        for task in pending:
            task.add_done_callback(one_done)

    def _end_session(self) -> None:
        self._setup_event(SetupEvent.END)
        try:
            self.pipeline.end_session(self.session_id)
        except Exception:  # the socket is gone either way; never let this mask its end
            log.exception("end_session failed", extra={"conn_id": self.conn_id})

    async def _drain(self, dispatcher: asyncio.Task[None], ending: _Close) -> _Ending:
        """Let queued and running requests finish, unless the drain is cut short."""

        async def finish_work() -> None:
            self._requests.put(_STOP)
            await dispatcher
            while self._running:
                await asyncio.gather(*self._running.values(), return_exceptions=True)

        work = asyncio.create_task(finish_work())
        waiting: set[asyncio.Future[Any]] = {work, self._interrupt}
        done, _ = await asyncio.wait(waiting, return_when=asyncio.FIRST_COMPLETED)
        if work in done and not self._interrupt.done():
            self._interrupt.set_result(ending)  # nothing may cut in any more
            self._socket_event(SocketEvent.ALL_ANSWERED)
            return ending
        work.cancel()
        await asyncio.gather(work, return_exceptions=True)
        return self._interrupt.result()

    async def _cancel_all(self, *, peer_gone: bool) -> None:
        tasks = list(self._running.values())
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        # Accepted but never started: the one the dispatcher held, then the queue.
        unstarted = [self._holding] if self._holding is not None else []
        self._holding = None
        unstarted += self._requests.take_all()
        for item in unstarted:
            if item is _STOP:
                continue
            rid = item.request_id
            if peer_gone:
                self._request_event(rid, RequestEvent.PEER_GONE)
            else:
                self._request_event(rid, RequestEvent.CANCEL)
                self._offer(done_frame(rid, None, "cancelled", None, None), "done")
            cause = "client" if rid in self._cancel_queued else self._teardown_cause
            self._record(item, "cancelled", cause=cause)
            self._forget(rid)

    async def _close_socket(self, ending: _Close) -> None:
        self.close_code = ending.code
        try:
            await self.ws.close(ending.code, ending.reason)
        except Exception:  # the peer left first; nothing to tell it
            log.debug("close after peer left", exc_info=True)
        self._socket_event(SocketEvent.CLOSE_SENT)

    # --- watchdog: idle timeout, maximum duration, slow consumer ---

    async def _watchdog(self) -> None:
        config = self.config
        limits = [
            s
            for s in (
                config.idle_timeout_seconds,
                config.max_session_seconds,
                config.slow_consumer_seconds,
            )
            if s > 0
        ]
        if not limits:
            return
        tick = min(1.0, max(0.02, min(limits) / 4))
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(tick)
            now = loop.time()
            slow = config.slow_consumer_seconds
            started = self._outbox.send_started
            if slow > 0 and started is not None and now - started >= slow:
                self.end(
                    SlowConsumerError(
                        f"slow consumer: a frame waited {slow:g} s for the client to read"
                    )
                )
                return
            idle = config.idle_timeout_seconds
            if (
                idle > 0
                and self.state == SocketState.OPEN.value
                and not self._known
                and self._outbox.empty
                and now - max(self._last_activity, self._outbox.last_sent or 0.0) >= idle
            ):
                self.end(_Close(CloseCode.NORMAL, "idle timeout", event=SocketEvent.IDLE))
                return
            self._check_expiry(now)

    def _check_expiry(self, now: float) -> None:
        limit = self.config.max_session_seconds
        if limit <= 0:
            return
        if self._expires_at is None:
            if now - self._opened_at >= limit and self.state == SocketState.OPEN.value:
                grace = self.config.session_expiry_grace_seconds
                self._expires_at = now + grace
                self._socket_event(SocketEvent.EXPIRE_WARNING)
                self._spawn(self._send(expiring_frame(grace), "expiring"))
        elif now >= self._expires_at and self.state in (
            SocketState.EXPIRING.value,
            SocketState.DRAINING.value,
        ):
            self.end(
                _Close(
                    CloseCode.NORMAL,
                    "session expired",
                    event=SocketEvent.EXPIRED,
                    cause="server_close",
                )
            )

    def _spawn(self, work: Any) -> None:
        task: asyncio.Task[None] = asyncio.create_task(work)
        self._side_tasks.add(task)
        task.add_done_callback(self._side_tasks.discard)

    # --- reading ---

    async def _read_loop(self) -> None:
        frames_in = self.metrics.frames_in
        loop = asyncio.get_running_loop()
        requests = self._requests
        while True:
            if requests.full:  # queue and read-ahead full: backpressure (TCP) from here
                await requests.wait_for_room()
            message = await self.ws.receive()
            self._last_activity = loop.time()
            if message["type"] == "websocket.disconnect":
                self.close_code = message.get("code")
                self.end(None)
                return
            text = message.get("text")
            if text is None:
                frames_in.labels("binary").inc()
                self.end(BinaryFrameError("binary frames are not supported; send JSON text frames"))
                return
            try:
                frame = decode_client_frame(text, self._defaults, self._input_limits)
            except MalformedFrameError as exc:
                frames_in.labels("malformed").inc()
                self.end(exc)
                return
            except FrameRejected as rejected:
                if rejected.is_setup:
                    frames_in.labels("session_setup").inc()
                    await self._refuse_setup(rejected.error)
                elif rejected.is_request:
                    frames_in.labels("request").inc()
                    self._setup_event(SetupEvent.REQUEST)
                    await self._accept(rejected.request_id, None, rejected.error, len(text))
                else:
                    frames_in.labels("rejected").inc()
                    # Not a request, so it ends none: request_id stays null.
                    await self._send(error_frame(None, rejected.error), "error")
                continue
            if isinstance(frame, RequestFrame):
                frames_in.labels("request").inc()
                self._setup_event(SetupEvent.REQUEST)
                await self._accept(frame.request_id, frame.request, None, len(text))
            elif isinstance(frame, SessionSetupFrame):
                frames_in.labels("session_setup").inc()
                await self._setup(frame)
            elif isinstance(frame, CancelFrame):
                frames_in.labels("cancel").inc()
                answer = self._cancel(frame.request_id)
                if answer is not None:
                    await self._send(answer, "done")
            elif isinstance(frame, CloseSessionFrame):
                frames_in.labels("session_close").inc()
                self.end(_SESSION_CLOSED)
                return

    async def _setup(self, frame: SessionSetupFrame) -> None:
        """Fix the session's model and defaults, once, before any request."""
        if self.setup_state != SetupState.AWAITING_SETUP.value:
            await self._refuse_setup(None)
            return
        served = self.pipeline.model_name
        if frame.model != served:
            error = ModelNotFoundError(
                f"The model `{frame.model}` does not exist. Available: {served}", param="model"
            )
            await self._refuse_setup(error)
            return
        self._defaults = {**frame.defaults, "model": frame.model}
        self._setup_event(SetupEvent.SETUP)
        await self._send(ready_frame(self.session_id, frame.model, frame.defaults), "ready")

    async def _refuse_setup(self, error: RealtimeError | None) -> None:
        """Answer a refused setup (request_id null); once settled, any setup is too late."""
        if self.setup_state == SetupState.AWAITING_SETUP.value and error is not None:
            self._setup_event(SetupEvent.SETUP_REFUSED)
        else:
            why = (
                "the session is already set up"
                if self.setup_state == SetupState.SET_UP.value
                else "session.setup must come before the first request"
            )
            error = SessionAlreadySetUpError(f"{why}; nothing was changed", param="type")
            self._setup_event(SetupEvent.LATE_SETUP)
        await self._send(error_frame(None, error), "error")

    async def _accept(
        self,
        request_id: str | None,
        request: ChatCompletionRequest | None,
        rejection: RealtimeError | None,
        size: int = 0,
    ) -> None:
        received_at = time.perf_counter()
        ordered = request_id is None
        if request_id is None:
            request_id = f"req_{next(self._auto_ids)}"
            while request_id in self._known:
                request_id = f"req_{next(self._auto_ids)}"
        elif request_id in self._known:
            error = DuplicateRequestIdError(
                f"request_id {request_id!r} is already in flight on this socket; "
                "the earlier request continues",
                param="request_id",
            )
            # request_id null: this error ends no request (the earlier one carries on).
            await self._send(error_frame(None, error), "error")
            return
        refusal = self._refusal()
        if refusal is not None:
            self._request_event(request_id, RequestEvent.REFUSE)
            self._record_refused(request_id, refusal)
            await self._send(error_frame(request_id, refusal), "error")
            return
        self._known.add(request_id)
        self._request_event(request_id, RequestEvent.ACCEPT)
        self._requests.put(_Queued(request_id, ordered, request, rejection, received_at, size))
        self.max_queue_depth = max(self.max_queue_depth, len(self._requests))

    def _refusal(self) -> RealtimeError | None:
        if self.state == SocketState.SHUTTING_DOWN.value:
            return ServerShuttingDownError(
                "server shutting down; send new requests on a new connection"
            )
        limit = self.config.max_in_flight_per_socket
        if len(self._known) >= limit:
            return TooManyRequestsInFlightError(
                f"{len(self._known)} requests are already in flight on this socket "
                f"(the limit is {limit}); wait for a terminal frame before sending more"
            )
        return None

    def _cancel(self, request_id: str) -> dict[str, Any] | None:
        """Act on a `response.cancel`; returns the terminal frame to send now, if any."""
        task = self._running.get(request_id)
        if task is not None and request_id in self._not_started:
            # Cancelling it now would skip its body, terminal frame included: it sees
            # the cancel when its turn comes, as a queued request does.
            self._cancel_queued.add(request_id)
        elif task is not None:
            self._cancel_running.add(request_id)
            task.cancel()
        elif request_id in self._known:
            waiting = self._withdraw(request_id)
            if waiting is None:
                self._cancel_queued.add(request_id)  # ordered: it is answered in its turn
                return None
            # Not started and not bound to an order: answered now, which makes room.
            self._request_event(request_id, RequestEvent.CANCEL)
            self._record(waiting, "cancelled", cause="client")
            self._forget(request_id)
            return done_frame(request_id, None, "cancelled", None, None)
        else:
            log.debug("cancel for unknown or finished request %s ignored", request_id)
        return None

    def _withdraw(self, request_id: str) -> _Queued | None:
        """Take a request with an id out of the queue (or the dispatcher's hand) if it waits
        there; None when it is not waiting or runs in order (no id)."""
        holding = self._holding
        if holding is not None and holding.request_id == request_id:
            if holding.ordered:
                return None
            self._holding = None  # the dispatcher sees this when it gets its slot
            return holding
        return self._requests.take(
            lambda item: item is not _STOP and item.request_id == request_id and not item.ordered
        )

    # --- dispatching ---

    async def _dispatch_loop(self) -> None:
        """Start queued requests as concurrency slots free up, in arrival order."""
        while True:
            item = await self._requests.get()
            if item is _STOP:
                return
            self._holding = item
            await self._slots.acquire()
            if self._holding is not item:  # withdrawn by a cancel while it waited
                self._slots.release()
                continue
            self._holding = None
            self._request_event(item.request_id, RequestEvent.DISPATCH)
            predecessor = self._last_ordered if item.ordered else None
            task = asyncio.create_task(
                self._run_request(item, predecessor), name=f"realtime-{item.request_id}"
            )
            # A task cancelled before its first step never runs its body or its `finally`
            # (no terminal frame, slot never released): `_unstarted_task_done` covers it.
            self._not_started.add(item.request_id)
            task.add_done_callback(functools.partial(self._unstarted_task_done, item))
            self._running[item.request_id] = task
            if item.ordered:
                self._last_ordered = task

    def _unstarted_task_done(self, item: _Queued, task: asyncio.Task[None]) -> None:
        """A request task ended; if it never started (cancelled first), do what its body
        would have done on that cancel: record it, offer its terminal frame, free its slot."""
        request_id = item.request_id
        if request_id not in self._not_started:
            return  # it ran: its own `finally` did all this
        self._not_started.discard(request_id)
        self._running.pop(request_id, None)
        self._slots.release()
        gone = self._tearing_down and self._teardown_cause == "disconnect"
        self._request_event(request_id, RequestEvent.PEER_GONE if gone else RequestEvent.CANCEL)
        client = request_id in self._cancel_running or request_id in self._cancel_queued
        self._record(item, "cancelled", cause="client" if client else self._teardown_cause)
        frame = done_frame(request_id, None, "cancelled", None, None)
        if not gone and client and not self._tearing_down:
            self._spawn(self._send(frame, "done"))  # the socket carries on
        elif not gone:
            self._offer(frame, "done")  # the session is closing: hold it for the flush
        self._forget(request_id)

    def _forget(self, request_id: str) -> None:
        self._known.discard(request_id)
        self._cancel_queued.discard(request_id)
        self._cancel_running.discard(request_id)
        self._maybe_finish_shutdown()

    # --- one request ---

    async def _run_request(self, item: _Queued, predecessor: asyncio.Task[None] | None) -> None:
        request_id = item.request_id
        self._not_started.discard(request_id)  # from here on, `finally` does the bookkeeping
        prepared: PreparedChat | None = None
        timer: RequestTimer | None = None
        #: Set once the request is answered and its terminal frame is being queued.
        terminal: tuple[dict[str, Any], str] | None = None
        try:
            if predecessor is not None:
                # A request without an id waits for the one before it (holding its slot).
                await asyncio.wait([predecessor])
            if item.rejection is not None:
                self._request_event(request_id, RequestEvent.INVALID)
                self._record(item, "error", error=item.rejection)
                terminal = (error_frame(request_id, item.rejection), "error")
                await self._send(*terminal)
                return
            if request_id in self._cancel_queued:
                self._request_event(request_id, RequestEvent.CANCEL)
                self._record(item, "cancelled", cause="client")
                terminal = (done_frame(request_id, None, "cancelled", None, None), "done")
                await self._send(*terminal)
                return
            assert item.request is not None
            self._request_event(request_id, RequestEvent.START)
            streaming = item.request.stream is not False
            prepared = await prepare_chat(
                self.pipeline,
                item.request,
                stream=streaming,
                session_id=self.session_id,
                size=item.size,
            )
            if streaming:
                timer = RequestTimer(self.metrics, TRANSPORT, item.received_at)
                put = self._outbox.put  # the per-token path: one call less than `_send`
                async with aclosing(self.pipeline.stream(prepared)) as chunks:
                    async for chunk in chunks:
                        timer.chunk(chunk)
                        chunk["request_id"] = request_id
                        await put(chunk, "chunk", request_id)
            else:
                completion = await self.pipeline.complete(prepared)
                completion["request_id"] = request_id
                await self._send(completion, "completion")
            delta = prepared.delta
            self._request_event(request_id, RequestEvent.FINISH)
            self._record(item, "completed", prepared, timer=timer)
            terminal = (
                done_frame(request_id, delta.id, "completed", delta.finish_reason, delta.usage()),
                "done",
            )
            await self._send(*terminal)
        except asyncio.CancelledError:
            if terminal is not None:  # already answered; only the frame's delivery was cut
                if self._tearing_down:
                    self._offer(*terminal)
                    raise
                await self._send(*terminal)  # a client's cancel that came too late
                return
            frame = done_frame(
                request_id,
                prepared.delta.id if prepared else None,
                "cancelled",
                None,
                prepared.delta.usage() if prepared else None,
            )
            by_client = request_id in self._cancel_running and not self._tearing_down
            gone = self._tearing_down and self._teardown_cause == "disconnect"
            self._request_event(request_id, RequestEvent.PEER_GONE if gone else RequestEvent.CANCEL)
            cause = "client" if request_id in self._cancel_running else self._teardown_cause
            self._record(item, "cancelled", prepared, cause=cause, timer=timer)
            if not by_client:
                self._offer(frame, "done")
                raise
            # The client's own cancel: the socket carries on. A request without an id
            # still ends in its turn, so the one after it cannot overtake its predecessor.
            if predecessor is not None and not predecessor.done():
                await asyncio.wait([predecessor])
            await self._send(frame, "done")
        except RealtimeError as exc:
            self._request_event(request_id, RequestEvent.FAIL)
            self._record(item, "error", prepared, error=exc, timer=timer)
            await self._send_terminal(
                error_frame(request_id, exc), closing=exc.close_code is not None
            )
            if exc.close_code is not None:
                self.end(exc)
        except Exception:
            log.exception("request %s failed", request_id, extra={"conn_id": self.conn_id})
            error = InternalError()
            self._request_event(request_id, RequestEvent.FAIL)
            self._record(item, "error", prepared, error=error, timer=timer)
            await self._send_terminal(error_frame(request_id, error), closing=True)
            self.end(error)
        finally:
            self._running.pop(request_id, None)
            self._slots.release()
            self._forget(request_id)

    # --- bookkeeping: metrics and the request log line ---

    def _record(
        self,
        item: _Queued,
        status: str,
        prepared: PreparedChat | None = None,
        *,
        error: RealtimeError | None = None,
        cause: str | None = None,
        timer: RequestTimer | None = None,
    ) -> None:
        m = self.metrics
        self.requests_answered += 1
        m.requests.labels(TRANSPORT, status).inc()
        usage = prepared.delta.usage() if prepared is not None else None
        m.usage(TRANSPORT, usage)
        if status == "cancelled":
            m.cancellations.labels(TRANSPORT, cause or "server_close").inc()
        if isinstance(error, (EngineError, EngineUnavailableError)):
            m.engine_errors.labels(error.code or "engine_error").inc()
        event(
            log,
            "request.end",
            transport=TRANSPORT,
            conn_id=self.conn_id,
            request_id=item.request_id,
            id=prepared.delta.id if prepared is not None else None,
            status=status,
            cause=cause if status == "cancelled" else None,
            error_code=error.code if error is not None else None,
            prompt_tokens=usage["prompt_tokens"] if usage else None,
            completion_tokens=usage["completion_tokens"] if usage else None,
            ttft_ms=timer.ttft_ms if timer is not None else None,
            duration_ms=round((time.perf_counter() - item.received_at) * 1000, 3),
        )

    def _record_refused(self, request_id: str, error: RealtimeError) -> None:
        self.metrics.requests.labels(TRANSPORT, "rejected").inc()
        event(
            log,
            "request.refused",
            transport=TRANSPORT,
            conn_id=self.conn_id,
            request_id=request_id,
            error_code=error.code,
        )

    # --- writing ---

    async def _send(self, frame: dict[str, Any], kind: str, request_id: str | None = None) -> None:
        """Send or hold a frame; `request_id` lets a held chunk of that request fold."""
        await self._outbox.put(frame, kind, request_id)

    async def _send_terminal(self, frame: dict[str, Any], *, closing: bool) -> None:
        """A request's last frame: waited for, unless the socket is about to close."""
        if closing or self._tearing_down:
            self._offer(frame, "error")
        else:
            await self._send(frame, "error")

    def _offer(self, frame: dict[str, Any], kind: str) -> None:
        """Hold a frame if there is room; used while tearing down, when waiting is wrong."""
        if not self._outbox.offer(frame, kind):
            log.debug("outbox full while ending; frame dropped with the socket")

    def _count_sent(self, kind: str) -> None:
        self._sent[kind].inc()

    def _peer_gone(self) -> None:
        """A send failed: the client is gone."""
        self.end(None)
