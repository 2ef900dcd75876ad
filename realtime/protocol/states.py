"""The states of a /v1/realtime socket and of one request on it, as data.

A socket has two: its lifecycle (`SOCKET`) and, orthogonal to it, whether its
session still takes a `session.setup` (`SETUP`); each request has one (`REQUEST`).
The session drives its state through these tables (`StateMachine.next`), and
`realtime.docgen` draws the Mermaid diagrams in docs/protocol.md from the same
tables, so the documented state machine is the one the code runs. A transition
the table does not list is a bug: the session logs it and counts it in the
`realtime_state_violations_total` metric (the fuzz test asserts it stays 0).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum


class IllegalTransition(Exception):
    """An event that the table does not allow in the current state."""


@dataclass(frozen=True, slots=True)
class Transition:
    source: str
    event: str
    target: str
    #: What the client sees, for the diagram's edge label.
    effect: str = ""


class StateMachine:
    def __init__(self, name: str, initial: str, transitions: list[Transition], final: set[str]):
        self.name = name
        self.initial = initial
        self.transitions = transitions
        self.final = final
        self._table = {(t.source, t.event): t.target for t in transitions}
        if len(self._table) != len(transitions):
            raise ValueError(f"{name}: two transitions for the same state and event")

    @property
    def states(self) -> list[str]:
        seen: dict[str, None] = {self.initial: None}
        for t in self.transitions:
            seen.setdefault(t.source)
            seen.setdefault(t.target)
        return list(seen)

    def next(self, state: str, event: str) -> str:
        try:
            return self._table[(state, event)]
        except KeyError:
            raise IllegalTransition(f"{self.name}: {event!r} in state {state!r}") from None

    def mermaid(self) -> str:
        """The table as a Mermaid state diagram (what docs/protocol.md embeds)."""
        lines = ["stateDiagram-v2", f"    [*] --> {self.initial}"]
        for t in self.transitions:
            label = t.event if not t.effect else f"{t.event} / {t.effect}"
            lines.append(f"    {t.source} --> {t.target}: {label}")
        lines.extend(f"    {state} --> [*]" for state in sorted(self.final))
        return "\n".join(lines)


class SocketState(str, Enum):
    CONNECTING = "connecting"
    OPEN = "open"
    #: `session.close` received: no more reading; accepted requests finish.
    DRAINING = "draining"
    #: Server shutdown: new requests refused; accepted requests finish within the grace.
    SHUTTING_DOWN = "shutting_down"
    #: `session.expiring` sent; the socket closes when the grace ends.
    EXPIRING = "expiring"
    #: The server decided to close: requests are cancelled, terminal frames flushed.
    CLOSING = "closing"
    CLOSED = "closed"


class SocketEvent(str, Enum):
    REFUSE = "handshake refused"
    ACCEPT = "handshake accepted"
    ACCEPT_AND_CLOSE = "accepted while unable to serve"
    SESSION_CLOSE = "session.close"
    SHUTDOWN = "server shutdown"
    EXPIRE_WARNING = "max session duration"
    EXPIRED = "expiry grace over"
    IDLE = "idle timeout"
    FAULT = "fault"
    ALL_ANSWERED = "all requests answered"
    GRACE_OVER = "shutdown grace over"
    CLOSE_SENT = "Close frame sent"
    PEER_GONE = "peer gone"


_S, _E = SocketState, SocketEvent


def _t(
    source: SocketState, event: SocketEvent, target: SocketState, effect: str = ""
) -> Transition:
    return Transition(source.value, event.value, target.value, effect)


SOCKET = StateMachine(
    "socket",
    _S.CONNECTING.value,
    [
        _t(_S.CONNECTING, _E.REFUSE, _S.CLOSED, "HTTP 400/401/403/503, no upgrade"),
        _t(_S.CONNECTING, _E.ACCEPT, _S.OPEN, "101 Switching Protocols"),
        _t(_S.CONNECTING, _E.ACCEPT_AND_CLOSE, _S.CLOSING, "1001 shutting down or 1011 engine"),
        _t(_S.OPEN, _E.SESSION_CLOSE, _S.DRAINING, "reading stops"),
        _t(_S.OPEN, _E.SHUTDOWN, _S.SHUTTING_DOWN, "new requests get error shutting_down"),
        _t(_S.OPEN, _E.EXPIRE_WARNING, _S.EXPIRING, "session.expiring frame"),
        _t(_S.OPEN, _E.IDLE, _S.CLOSING, "1000 idle timeout"),
        _t(_S.OPEN, _E.FAULT, _S.CLOSING, "1003 / 1007 / 1008 / 1011"),
        _t(_S.OPEN, _E.PEER_GONE, _S.CLOSED, "nothing more is sent"),
        _t(_S.EXPIRING, _E.EXPIRED, _S.CLOSING, "1000 session expired"),
        _t(_S.EXPIRING, _E.SESSION_CLOSE, _S.DRAINING, "reading stops"),
        _t(_S.EXPIRING, _E.SHUTDOWN, _S.SHUTTING_DOWN, "new requests get error shutting_down"),
        _t(_S.EXPIRING, _E.FAULT, _S.CLOSING, "1003 / 1007 / 1008 / 1011"),
        _t(_S.EXPIRING, _E.PEER_GONE, _S.CLOSED, "nothing more is sent"),
        _t(_S.DRAINING, _E.SHUTDOWN, _S.DRAINING, "the grace applies"),
        _t(_S.DRAINING, _E.ALL_ANSWERED, _S.CLOSING, "1000 session closed"),
        _t(_S.DRAINING, _E.GRACE_OVER, _S.CLOSING, "1001, the rest cancelled"),
        _t(_S.DRAINING, _E.EXPIRED, _S.CLOSING, "1000 session expired"),
        _t(_S.DRAINING, _E.FAULT, _S.CLOSING, "1008 / 1011"),
        _t(_S.DRAINING, _E.PEER_GONE, _S.CLOSED, "nothing more is sent"),
        _t(_S.SHUTTING_DOWN, _E.ALL_ANSWERED, _S.CLOSING, "1001 server shutting down"),
        _t(_S.SHUTTING_DOWN, _E.GRACE_OVER, _S.CLOSING, "1001, the rest cancelled"),
        _t(_S.SHUTTING_DOWN, _E.SESSION_CLOSE, _S.DRAINING, "reading stops"),
        _t(_S.SHUTTING_DOWN, _E.FAULT, _S.CLOSING, "1003 / 1007 / 1008 / 1011"),
        _t(_S.SHUTTING_DOWN, _E.PEER_GONE, _S.CLOSED, "nothing more is sent"),
        _t(_S.CLOSING, _E.CLOSE_SENT, _S.CLOSED, "the Close frame"),
        _t(_S.CLOSING, _E.PEER_GONE, _S.CLOSED, "nothing more is sent"),
    ],
    final={_S.CLOSED.value},
)


class RequestState(str, Enum):
    NEW = "new"
    #: Read and accepted: in the request queue, or held by the dispatcher until a slot frees.
    QUEUED = "queued"
    #: Has a slot; a request without `request_id` waits here for its predecessor.
    WAITING = "waiting"
    RUNNING = "running"
    COMPLETED = "completed"
    CANCELLED = "cancelled"
    FAILED = "failed"
    REFUSED = "refused"
    ABANDONED = "abandoned"


class RequestEvent(str, Enum):
    ACCEPT = "request frame read"
    REFUSE = "over the in-flight limit, or shutting down"
    DISPATCH = "slot free"
    START = "turn comes"
    INVALID = "invalid request reaches its turn"
    CANCEL = "response.cancel or server close"
    FINISH = "generation finished"
    FAIL = "prepare or engine error"
    PEER_GONE = "peer gone"


_R, _Q = RequestState, RequestEvent


def _r(
    source: RequestState, event: RequestEvent, target: RequestState, effect: str = ""
) -> Transition:
    return Transition(source.value, event.value, target.value, effect)


REQUEST = StateMachine(
    "request",
    _R.NEW.value,
    [
        _r(_R.NEW, _Q.ACCEPT, _R.QUEUED),
        _r(_R.NEW, _Q.REFUSE, _R.REFUSED, "error frame with its request_id"),
        _r(_R.QUEUED, _Q.DISPATCH, _R.WAITING),
        _r(_R.QUEUED, _Q.CANCEL, _R.CANCELLED, "response.done cancelled, id null"),
        _r(_R.QUEUED, _Q.PEER_GONE, _R.ABANDONED),
        _r(_R.WAITING, _Q.START, _R.RUNNING),
        _r(_R.WAITING, _Q.INVALID, _R.FAILED, "error frame"),
        _r(_R.WAITING, _Q.CANCEL, _R.CANCELLED, "response.done cancelled, id null"),
        _r(_R.WAITING, _Q.PEER_GONE, _R.ABANDONED),
        _r(_R.RUNNING, _Q.FINISH, _R.COMPLETED, "chunks, response.done completed"),
        _r(_R.RUNNING, _Q.CANCEL, _R.CANCELLED, "response.done cancelled, usage so far"),
        _r(_R.RUNNING, _Q.FAIL, _R.FAILED, "error frame"),
        _r(_R.RUNNING, _Q.PEER_GONE, _R.ABANDONED),
    ],
    final={
        _R.COMPLETED.value,
        _R.CANCELLED.value,
        _R.FAILED.value,
        _R.REFUSED.value,
        _R.ABANDONED.value,
    },
)


class SetupState(str, Enum):
    """Whether a socket's session still takes a `session.setup`, orthogonal to SocketState."""

    #: Nothing decided yet: a `session.setup` is still allowed.
    AWAITING_SETUP = "awaiting_setup"
    #: `session.setup` accepted: requests inherit its model and defaults.
    SET_UP = "set_up"
    #: A request came first: as without sessions, every request names its model.
    NO_SETUP = "no_setup"
    #: The socket closed; the engine was told the session is over.
    ENDED = "ended"


class SetupEvent(str, Enum):
    SETUP = "session.setup accepted"
    SETUP_REFUSED = "session.setup refused"
    REQUEST = "request frame read"
    LATE_SETUP = "session.setup once settled"
    END = "socket closed"


_P, _V = SetupState, SetupEvent


def _p(source: SetupState, event: SetupEvent, target: SetupState, effect: str = "") -> Transition:
    return Transition(source.value, event.value, target.value, effect)


SETUP = StateMachine(
    "setup",
    _P.AWAITING_SETUP.value,
    [
        _p(_P.AWAITING_SETUP, _V.SETUP, _P.SET_UP, "session.ready frame"),
        _p(_P.AWAITING_SETUP, _V.SETUP_REFUSED, _P.AWAITING_SETUP, "error frame, request_id null"),
        _p(_P.AWAITING_SETUP, _V.REQUEST, _P.NO_SETUP, "as without session.setup"),
        _p(_P.AWAITING_SETUP, _V.END, _P.ENDED),
        _p(_P.SET_UP, _V.REQUEST, _P.SET_UP, "it inherits the model and defaults"),
        _p(_P.SET_UP, _V.LATE_SETUP, _P.SET_UP, "error session_already_set_up, nothing changes"),
        _p(_P.SET_UP, _V.END, _P.ENDED),
        _p(_P.NO_SETUP, _V.REQUEST, _P.NO_SETUP),
        _p(_P.NO_SETUP, _V.LATE_SETUP, _P.NO_SETUP, "error session_already_set_up"),
        _p(_P.NO_SETUP, _V.END, _P.ENDED),
    ],
    final={_P.ENDED.value},
)

MACHINES = {"socket": SOCKET, "request": REQUEST, "setup": SETUP}
