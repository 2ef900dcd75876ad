"""What the session core asks its I/O glue to do.

The core never awaits: each event method returns a list of these, and the glue
performs them in order. A `Send` with `wait=True` may wait for room in the
outbox (backpressure); with `terminal_of` set, the glue reports
`SessionCore.terminal_sent` once its frames were handed over (or offered, if the
wait was cut short), which is when the request stops counting as in flight and
its slot and lane go to the next one.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from realtime.protocol.errors import RealtimeError
from realtime.session.commands import Frame
from realtime.session.record import RequestRecord


@dataclass(frozen=True, slots=True)
class Send:
    frames: Sequence[Frame]
    #: The frames-sent metric's label ("done", "error", "ready", ...).
    kind: str
    #: The request these frames end: report `terminal_sent` after them.
    terminal_of: str | None = None
    #: Wait for room (False while tearing down: hold if there is room, else drop).
    wait: bool = True


@dataclass(frozen=True, slots=True)
class StartRequest:
    """Run the request's job: prepare it, render its output (`render_output`), then
    report completed, failed or cancelled."""

    request: RequestRecord


@dataclass(frozen=True, slots=True)
class CancelRequest:
    """Stop the request's work; its task reports `request_cancelled`."""

    request: RequestRecord


@dataclass(frozen=True, slots=True)
class CancelAll:
    """The session is being torn down: stop reading, cancel every task of the socket."""


@dataclass(frozen=True, slots=True)
class StopReading:
    """Read no more frames (a graceful close: the work in flight carries on)."""


@dataclass(frozen=True, slots=True)
class ResumeReading:
    """The request queue has room again: the reader may read the next frame."""


@dataclass(frozen=True, slots=True)
class RequestEnded:
    """A request got its answer: count it and write its log line."""

    request: RequestRecord
    #: "completed", "cancelled" or "error".
    status: str
    #: Why it was cancelled ("client", "disconnect", "server_close", "shutdown").
    cause: str | None = None
    error: RealtimeError | None = None


@dataclass(frozen=True, slots=True)
class RequestRefused:
    """A request was refused before it was accepted (in-flight limit, shutting down)."""

    request_id: str
    error: RealtimeError


@dataclass(frozen=True, slots=True)
class EndSocket:
    """Every request is answered: flush (up to `flush_seconds`), send Close `code`, done.
    `code` None: the peer is gone, nothing more is sent."""

    code: int | None
    reason: str = ""
    flush_seconds: float = 0.0


Action = (
    Send
    | StartRequest
    | CancelRequest
    | CancelAll
    | StopReading
    | ResumeReading
    | RequestEnded
    | RequestRefused
    | EndSocket
)
