"""The session core of a socket: every decision, no I/O.

In the style of the `websockets` library's `protocol.py` and of h11: the glue
(`realtime.ws.session`) feeds events in - a client command (parsed by the
dialect), a request's outcome, a terminal frame handed to the outbox, the peer
gone, a shutdown, the timer - and performs the actions that come back
(`realtime.session.actions`). Nothing here awaits, reads a clock or touches a
socket, so every behaviour is tested by driving events and reading actions.

Requests. Each accepted request is one `RequestRecord`, driven through the
`REQUEST` table (`realtime.protocol.states`); the socket through `SOCKET`. A
request is in flight from acceptance until its terminal frames are handed over
(`terminal_sent`). Accepted requests wait in a FIFO until a concurrency slot
frees (`max_concurrent`); with every slot busy the oldest of them is "in the
dispatcher's hand" and the rest are the queue proper, which `queue_size` bounds,
plus `read_ahead` more: past that the core asks the reader to stop (backpressure,
one bound later, so control frames behind a full queue still act at once). A
request with a lane waits, holding its slot, until every earlier request of its
lane was answered, so its frames follow theirs; a request without one runs as
soon as it has a slot.

Cancelling. A queued request without a lane is answered at once (which makes
room); one with a lane, or one waiting for its lane, is answered in its turn
(its followers must not overtake it); a running one is cancelled and answered
with what it produced so far.

Ending, decided once (a graceful drain can still be cut short): the peer went
away (the work stops, nothing more is sent); a close with a code (in-flight work
is cancelled, each request gets its terminal frame if the outbox has room, then
the Close frame); a graceful end (`session.close`, or a shutdown once every
request is answered; a shutdown's grace bounds that).
"""

from __future__ import annotations

import itertools
import logging
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass

from realtime.protocol.close_codes import CloseCode, truncate_reason
from realtime.protocol.errors import (
    DuplicateRequestIdError,
    RealtimeError,
    ServerShuttingDownError,
    SlowConsumerError,
    TooManyRequestsInFlightError,
)
from realtime.protocol.states import (
    REQUEST,
    SOCKET,
    IllegalTransition,
    RequestEvent,
    RequestState,
    SocketEvent,
    SocketState,
)
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
from realtime.session.commands import (
    Cancel,
    CloseGracefully,
    CloseWith,
    Command,
    Frame,
    Reply,
    Submit,
)
from realtime.session.dialect import Dialect, ViolationHook
from realtime.session.record import RequestRecord

log = logging.getLogger("realtime.ws")

#: Bound on delivering the remaining frames before the Close frame.
FLUSH_SECONDS = 5.0
#: How long a shutdown spends flushing terminal frames after the grace period.
SHUTDOWN_FLUSH_SECONDS = 2.0


@dataclass(frozen=True, slots=True)
class CoreLimits:
    """The settings the core enforces (from `ServerConfig`; 0 seconds: off)."""

    max_concurrent: int = 16
    max_in_flight: int = 128
    queue_size: int = 64
    read_ahead: int = 16
    idle_timeout_seconds: float = 0.0
    max_session_seconds: float = 0.0
    session_expiry_grace_seconds: float = 30.0
    slow_consumer_seconds: float = 0.0


@dataclass(frozen=True, slots=True)
class Closing:
    """How the session ends when it is not the peer leaving."""

    code: int
    reason: str
    #: Graceful: in-flight requests finish first.
    drain: bool = False
    #: The `SOCKET` event this ending fires.
    event: SocketEvent = SocketEvent.FAULT
    #: Why in-flight requests get cancelled (the cancellations metric's label).
    cause: str = "server_close"
    #: Bound on delivering the remaining frames before the Close frame; 0 skips it.
    flush_seconds: float = FLUSH_SECONDS

    @classmethod
    def for_error(cls, error: RealtimeError) -> Closing:
        code = error.close_code if error.close_code is not None else CloseCode.INTERNAL_ERROR
        flush = 0.0 if isinstance(error, SlowConsumerError) else FLUSH_SECONDS
        return cls(int(code), truncate_reason(error.message), flush_seconds=flush)


class _PeerGone:
    """The ending where the peer went away: nothing more is sent."""


PEER_GONE = _PeerGone()
Ending = Closing | _PeerGone

SESSION_CLOSED = Closing(
    CloseCode.NORMAL, "session closed", drain=True, event=SocketEvent.SESSION_CLOSE
)
_ALL_ANSWERED_IN_SHUTDOWN = Closing(
    CloseCode.GOING_AWAY, "server shutting down", event=SocketEvent.ALL_ANSWERED, cause="shutdown"
)
_GRACE_OVER = Closing(
    CloseCode.GOING_AWAY,
    "server shutting down",
    event=SocketEvent.GRACE_OVER,
    cause="shutdown",
    flush_seconds=SHUTDOWN_FLUSH_SECONDS,
)
_IDLE = Closing(CloseCode.NORMAL, "idle timeout", event=SocketEvent.IDLE)
_EXPIRED = Closing(CloseCode.NORMAL, "session expired", event=SocketEvent.EXPIRED)


def _violation_logged(machine: str, exc: Exception) -> None:
    log.error("state machine violation: %s", exc)


class SessionCore:
    """One socket's session state; see the module docstring."""

    def __init__(
        self,
        dialect: Dialect,
        limits: CoreLimits,
        *,
        opened_at: float = 0.0,
        on_violation: ViolationHook = _violation_logged,
    ):
        self.dialect = dialect
        self.limits = limits
        self._on_violation = on_violation
        #: The socket's `SocketState` (the endpoint accepted it: open).
        self.state = SocketState.OPEN.value
        #: Every request accepted and not yet answered (terminal frames not handed over).
        self.records: dict[str, RequestRecord] = {}
        #: Accepted, waiting for a slot, oldest first.
        self._waiting: deque[RequestRecord] = deque()
        #: Per lane, its slotted requests in order: the first runs, the rest wait.
        self._lanes: dict[str, deque[RequestRecord]] = {}
        self._slots_used = 0
        self._auto_ids = itertools.count(1)
        self._ending: Ending | None = None
        #: A drain was cut short: no further ending may cut in.
        self._interrupted = False
        self.tearing_down = False
        self._teardown_cause = "server_close"
        self._ended = False
        #: Answering the unstarted requests of a teardown (no re-entry meanwhile).
        self._sweeping = False
        self._read_paused = False
        #: False once reading stopped for good (an ending, or `session.close`).
        self.reading = True
        #: Highest queue depth seen (the queue proper plus read-ahead).
        self.max_queue_depth = 0
        self._opened_at = opened_at
        self._last_activity = opened_at
        self._expires_at: float | None = None

    # --- what the glue and the dialect read ---

    @property
    def queue_depth(self) -> int:
        """Requests in the queue proper and the read-ahead (not the one in hand)."""
        waiting = len(self._waiting)
        if waiting and self._slots_used >= self.limits.max_concurrent:
            return waiting - 1  # the oldest is in the dispatcher's hand
        return waiting

    @property
    def read_paused(self) -> bool:
        """Queue and read-ahead are full: the reader must not read another frame."""
        return self.queue_depth >= self.limits.queue_size + self.limits.read_ahead

    @property
    def slots_used(self) -> int:
        return self._slots_used

    @property
    def ending(self) -> Ending | None:
        return self._ending

    def in_flight(self, request_id: str) -> bool:
        return request_id in self.records

    def lane_busy(self, lane: str) -> bool:
        if self._lanes.get(lane):
            return True
        return any(r.lane == lane for r in self._waiting)

    # --- events: the client ---

    def command(self, command: Command, *, now: float, received_at: float) -> list[Action]:
        """A client command, parsed by the dialect from a frame read at `now`."""
        if not self.reading:
            return []  # read after the end was decided: dropped, as if never read
        self._last_activity = now
        if isinstance(command, Submit):
            return self._submit(command, received_at)
        if isinstance(command, Cancel):
            actions = self.cancel(command.request_id)
            if command.frames:  # after the cancel: the task cannot send past them
                actions.append(Send(command.frames, "event"))
            return actions
        if isinstance(command, Reply):
            return [Send(command.frames, command.kind)] if command.frames else []
        if isinstance(command, CloseGracefully):
            return self._end(SESSION_CLOSED)
        if isinstance(command, CloseWith):
            return self._end(Closing.for_error(command.error))
        raise TypeError(f"not a command: {command!r}")

    def opened(self) -> list[Action]:
        """The socket is open: the dialect's greeting, if it has one."""
        frames = self.dialect.opened()
        return [Send(frames, "opened")] if frames else []

    def _submit(self, command: Submit, received_at: float) -> list[Action]:
        if command.request is None and command.rejection is None:
            raise TypeError("a Submit carries a request to run, or the rejection to answer")
        request_id = command.request_id
        if request_id is None:
            request_id = f"req_{next(self._auto_ids)}"
            while request_id in self.records:
                request_id = f"req_{next(self._auto_ids)}"
        elif request_id in self.records:
            error = DuplicateRequestIdError(
                f"request_id {request_id!r} is already in flight on this socket; "
                "the earlier request continues",
                param="request_id",
            )
            # request_id null: this error ends no request (the earlier one carries on).
            return [Send(self.dialect.render_error(None, error, None), "error")]
        refusal = self._refusal()
        if refusal is not None:
            self._check_refusal()
            return [
                RequestRefused(request_id, refusal),
                Send(self.dialect.render_error(request_id, refusal, None), "error"),
            ]
        record = RequestRecord(
            request_id,
            command.lane,
            command.request,
            command.rejection,
            command.size,
            received_at,
            command.context,
            command.response_id,
        )
        self.records[request_id] = record
        self._transition(record, RequestEvent.ACCEPT)
        self._waiting.append(record)
        self.max_queue_depth = max(self.max_queue_depth, self.queue_depth)
        return self._dispatch()

    def _refusal(self) -> RealtimeError | None:
        if self.state == SocketState.SHUTTING_DOWN.value:
            return ServerShuttingDownError(
                "server shutting down; send new requests on a new connection"
            )
        limit = self.limits.max_in_flight
        if len(self.records) >= limit:
            return TooManyRequestsInFlightError(
                f"{len(self.records)} requests are already in flight on this socket "
                f"(the limit is {limit}); wait for a terminal frame before sending more"
            )
        return None

    def cancel(self, request_id: str) -> list[Action]:
        """Stop one request: a queued one bound to no order is answered now, a running
        one is cancelled, one bound to its lane's order is answered in its turn."""
        record = self.records.get(request_id)
        if record is None or record.answered:
            log.debug("cancel for unknown or finished request %s ignored", request_id)
            return []
        if record.started:
            record.cancel_requested = True
            return [CancelRequest(record)]
        if record.slotted or record.lane is not None:
            # Its lane's order holds: it is answered in its turn, never run.
            record.cancel_requested = True
            return []
        # Queued, bound to no order: answered now, which makes room.
        self._waiting.remove(record)
        actions = self._answer_cancelled(record, "client", wait=True)
        self._note_room(actions)
        return actions

    # --- events: the requests ---

    def request_completed(self, request_id: str) -> list[Action]:
        """The request's task produced the whole answer."""
        record = self.records.get(request_id)
        if record is None or record.answered:
            return []
        self._transition(record, RequestEvent.FINISH)
        frames = self.dialect.render_done(record, "completed")
        return [RequestEnded(record, "completed"), *self._terminal(record, frames, "done")]

    def request_failed(self, request_id: str, error: RealtimeError) -> list[Action]:
        """The request failed (prepare, validation against the model, the engine)."""
        record = self.records.get(request_id)
        if record is None or record.answered:
            return []
        self._transition(record, RequestEvent.FAIL)
        closes = self.dialect.closes_socket(error)
        frames = self.dialect.render_error(request_id, error, record)
        record.answered = True
        actions: list[Action] = [RequestEnded(record, "error", error=error)]
        if closes:  # decided before its slot frees, so nothing new starts meanwhile
            actions += self._end(Closing.for_error(error))
        actions += self._terminal(record, frames, "error", wait=not closes)
        return actions

    def request_cancelled(self, request_id: str) -> list[Action]:
        """The request's task was cancelled (or never ran): answer it, if nobody did."""
        record = self.records.get(request_id)
        if record is None or record.answered:
            return []
        gone = self.tearing_down and self._teardown_cause == "disconnect"
        cause = "client" if record.cancel_requested else self._teardown_cause
        if gone:
            return self._abandon(record, cause)
        by_client = record.cancel_requested and not self.tearing_down
        return self._answer_cancelled(record, cause, wait=by_client)

    def terminal_sent(self, request_id: str) -> list[Action]:
        """The request's terminal frames were handed to the outbox: it is over."""
        record = self.records.get(request_id)
        if record is None:
            return []
        return self._release(record)

    # --- events: the socket and the server ---

    def peer_gone(self) -> list[Action]:
        """The client went away (a disconnect, or a failed send)."""
        return self._end(PEER_GONE)

    def close_sent(self) -> None:
        """The Close frame went out."""
        self._socket_event(SocketEvent.CLOSE_SENT)

    def shutdown_started(self) -> list[Action]:
        """Server shutdown: refuse new requests, let accepted ones finish, then 1001."""
        if self.state in (SocketState.OPEN.value, SocketState.EXPIRING.value):
            self._socket_event(SocketEvent.SHUTDOWN)
            return self._maybe_finish()
        if self.state == SocketState.DRAINING.value:
            self._socket_event(SocketEvent.SHUTDOWN)
        return []

    def shutdown_grace_over(self) -> list[Action]:
        """The shutdown grace is over: cancel what still runs, close 1001."""
        return self._end(_GRACE_OVER)

    def fail(self, error: RealtimeError) -> list[Action]:
        """End the socket for `error` (the glue's own faults)."""
        return self._end(Closing.for_error(error))

    def timer_fired(
        self, now: float, *, sending_since: float | None, outbox_idle: bool, last_sent: float | None
    ) -> list[Action]:
        """The watchdog's tick: slow consumer, idle timeout, maximum duration."""
        limits = self.limits
        slow = limits.slow_consumer_seconds
        if slow > 0 and sending_since is not None and now - sending_since >= slow:
            return self._end(
                Closing.for_error(
                    SlowConsumerError(
                        f"slow consumer: a frame waited {slow:g} s for the client to read"
                    )
                )
            )
        idle = limits.idle_timeout_seconds
        if (
            idle > 0
            and self.state == SocketState.OPEN.value
            and not self.records
            and outbox_idle
            and now - max(self._last_activity, last_sent or 0.0) >= idle
        ):
            return self._end(_IDLE)
        return self._check_expiry(now)

    def _check_expiry(self, now: float) -> list[Action]:
        limit = self.limits.max_session_seconds
        if limit <= 0:
            return []
        if self._expires_at is None:
            if now - self._opened_at >= limit and self.state == SocketState.OPEN.value:
                grace = self.limits.session_expiry_grace_seconds
                self._expires_at = now + grace
                self._socket_event(SocketEvent.EXPIRE_WARNING)
                return [Send(self.dialect.render_expiring(grace), "expiring")]
        elif now >= self._expires_at and self.state in (
            SocketState.EXPIRING.value,
            SocketState.DRAINING.value,
        ):
            return self._end(_EXPIRED)
        return []

    # --- dispatching ---

    def _dispatch(self) -> list[Action]:
        """Give free slots to waiting requests, oldest first."""
        if self.tearing_down:
            return []
        actions: list[Action] = []
        while self._waiting and self._slots_used < self.limits.max_concurrent:
            record = self._waiting.popleft()
            record.slotted = True
            self._slots_used += 1
            self._transition(record, RequestEvent.DISPATCH)
            if record.lane is None:
                actions += self._begin(record)
                continue
            lane = self._lanes.setdefault(record.lane, deque())
            lane.append(record)
            if lane[0] is record:
                actions += self._begin(record)
        self._note_room(actions)
        return actions

    def _note_room(self, actions: list[Action]) -> None:
        """Track whether the reader must pause; ask it to resume when room came back."""
        paused = self.read_paused
        if self._read_paused and not paused:
            actions.append(ResumeReading())
        self._read_paused = paused

    def _begin(self, record: RequestRecord) -> list[Action]:
        """Its turn came: answer it if it was rejected or cancelled, else start it."""
        if record.rejection is not None:
            self._transition(record, RequestEvent.INVALID)
            frames = self.dialect.render_error(record.id, record.rejection, record)
            ended = RequestEnded(record, "error", error=record.rejection)
            return [ended, *self._terminal(record, frames, "error")]
        if record.cancel_requested:
            return self._answer_cancelled(record, "client", wait=True)
        self._transition(record, RequestEvent.START)
        record.started = True
        frames = self.dialect.render_started(record)
        start = StartRequest(record)
        return [Send(frames, "started"), start] if frames else [start]

    # --- answering and releasing ---

    def _answer_cancelled(self, record: RequestRecord, cause: str, *, wait: bool) -> list[Action]:
        self._transition(record, RequestEvent.CANCEL)
        frames = self.dialect.render_done(record, "cancelled")
        ended = RequestEnded(record, "cancelled", cause=cause)
        return [ended, *self._terminal(record, frames, "done", wait=wait)]

    def _abandon(self, record: RequestRecord, cause: str) -> list[Action]:
        """The peer is gone: the request ends with nothing sent."""
        self._transition(record, RequestEvent.PEER_GONE)
        record.answered = True
        return [RequestEnded(record, "cancelled", cause=cause), *self._release(record)]

    def _terminal(
        self, record: RequestRecord, frames: Sequence[Frame], kind: str, *, wait: bool = True
    ) -> list[Action]:
        """The request's terminal frames: waited for (the glue reports `terminal_sent`),
        or offered and released at once while tearing down."""
        record.answered = True
        if wait and not self.tearing_down:
            return [Send(frames, kind, terminal_of=record.id)]
        return [Send(frames, kind, wait=False), *self._release(record)]

    def _release(self, record: RequestRecord) -> list[Action]:
        """The request is over: free its slot and its lane, start who was waiting."""
        if self.records.pop(record.id, None) is None:
            return []
        actions: list[Action] = []
        if record.slotted:
            record.slotted = False
            self._slots_used -= 1
        if record.lane is not None:
            lane = self._lanes.get(record.lane)
            if lane is not None and record in lane:
                lane.remove(record)
                if not lane:
                    del self._lanes[record.lane]
                elif not self.tearing_down and not lane[0].started and not lane[0].answered:
                    actions += self._begin(lane[0])
        actions += self._dispatch()
        actions += self._maybe_finish()
        return actions

    # --- ending ---

    def _end(self, how: Ending) -> list[Action]:
        """Decide how the session ends; the first decision wins (a drain can be cut short)."""
        if self._ending is None:
            self._ending = how
        elif (
            not self._interrupted
            and not self.tearing_down
            and isinstance(self._ending, Closing)
            and self._ending.drain
        ):
            self._interrupted = True
            self._ending = how
        else:
            return []
        self._socket_event(SocketEvent.PEER_GONE if how is PEER_GONE else how.event)  # type: ignore[union-attr]
        self.reading = False
        if isinstance(how, Closing) and how.drain:
            return [StopReading(), *self._maybe_finish()]
        return self._tear_down(how)

    def _tear_down(self, how: Ending) -> list[Action]:
        """Stop everything: cancel the running requests; once they answered, the rest."""
        self.tearing_down = True
        self._teardown_cause = "disconnect" if how is PEER_GONE else how.cause  # type: ignore[union-attr]
        return [CancelAll(), *self._maybe_finish()]

    def _maybe_finish(self) -> list[Action]:
        """End the socket once nothing is left to answer."""
        if self._ended:
            return []
        ending = self._ending
        if not self.tearing_down:
            if isinstance(ending, Closing) and ending.drain:
                if self.records:
                    return []
                self._interrupted = True  # nothing may cut in any more
                self._socket_event(SocketEvent.ALL_ANSWERED)
                return self._tear_down(ending)
            if self.state == SocketState.SHUTTING_DOWN.value and not self.records:
                return self._end(_ALL_ANSWERED_IN_SHUTDOWN)
            return []
        if self._sweeping or any(r.started or r.answered for r in self.records.values()):
            return []  # their tasks (or senders) report first
        actions: list[Action] = []
        gone = ending is PEER_GONE
        # Accepted but never started: the ones holding a slot, then the queue.
        unstarted = list(self.records.values())
        self._waiting.clear()
        self._sweeping = True
        try:
            for record in unstarted:
                cause = "client" if record.cancel_requested else self._teardown_cause
                if gone:
                    actions += self._abandon(record, cause)
                else:
                    actions += self._answer_cancelled(record, cause, wait=False)
        finally:
            self._sweeping = False
        self._ended = True
        if isinstance(ending, Closing):
            actions.append(EndSocket(ending.code, ending.reason, ending.flush_seconds))
        else:
            actions.append(EndSocket(None))
        return actions

    # --- the state tables ---

    def _socket_event(self, event: SocketEvent) -> None:
        try:
            self.state = SOCKET.next(self.state, event.value)
        except IllegalTransition as exc:
            self._on_violation("socket", exc)

    def _transition(self, record: RequestRecord, event: RequestEvent) -> None:
        try:
            record.state = REQUEST.next(record.state, event.value)
        except IllegalTransition as exc:
            self._on_violation("request", exc)

    def _check_refusal(self) -> None:
        """A refused request never gets a record; its one transition is still checked."""
        try:
            REQUEST.next(RequestState.NEW.value, RequestEvent.REFUSE.value)
        except IllegalTransition as exc:
            self._on_violation("request", exc)
