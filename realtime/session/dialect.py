"""A socket dialect: the codec between one wire protocol and the session core.

The core knows requests, lanes, slots and endings; a dialect knows frames. It
parses each client frame into one command (`realtime.session.commands`) and
renders what the core decides as frames, in its own event shapes. Everything a
dialect returns is data: it never sends, awaits or closes anything itself. The
work of a request is the dialect's too: when the core starts one, the glue asks
for its job (`job`, `realtime.session.job`) and renders what the job yields with
`render_output`.

A dialect object serves one socket (the endpoint makes one per connection), so it
may keep per-socket state (the chat dialect keeps its `session.setup` defaults);
per-request state goes in `RequestRecord.context`, set through `Submit.context`.
What a dialect needs from the server (the pipeline, its limits) its factory was
given when the app was built: this module knows no pipeline, store or config.
"""

from __future__ import annotations

from collections.abc import Callable, MutableMapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from realtime.protocol.errors import RealtimeError
from realtime.protocol.input_limits import InputLimits
from realtime.session.commands import Command, Frame
from realtime.session.job import Job
from realtime.session.record import RequestRecord

DoneStatus = Literal["completed", "cancelled"]

#: Called with the machine's name and the `IllegalTransition` when a state table is broken.
ViolationHook = Callable[[str, Exception], None]


@dataclass(frozen=True, slots=True)
class DialectContext:
    """What a dialect is made from, once per socket (see `DialectFactory`)."""

    #: The socket's server-made session id (the engine's cache and isolation key).
    session_id: str
    #: The served model's name.
    model_name: str
    #: The JSON and stop-string limits every parsed frame obeys.
    limits: InputLimits
    #: Report a broken state table of the dialect's own (counted and logged as a bug).
    on_violation: ViolationHook


class SessionView(Protocol):
    """What a dialect may ask the core while it parses (read-only)."""

    @property
    def state(self) -> str:
        """The socket's `SocketState` value."""
        ...

    def in_flight(self, request_id: str) -> bool:
        """Whether a request with this id was accepted and is not answered yet."""
        ...

    def lane_busy(self, lane: str) -> bool:
        """Whether a request of this lane is queued or running."""
        ...


class Dialect(Protocol):
    """The methods the core and the glue call; see `realtime.dialects.chat.dialect`."""

    def opened(self) -> Sequence[Frame]:
        """Frames sent as soon as the socket is open, before anything is read."""
        ...

    def parse(self, text: str, view: SessionView) -> Command:
        """One text frame from the client as one command; never raises for bad input."""
        ...

    def parse_binary(self, data: bytes) -> Command:
        """One binary frame from the client as one command."""
        ...

    def render_started(self, request: RequestRecord) -> Sequence[Frame]:
        """Frames sent when the request starts running (before its job is prepared)."""
        ...

    def job(self, request: RequestRecord) -> Job:
        """The work of a request the core started (`request.request` is what `parse`
        submitted); the glue runs it and keeps it on `request.job`."""
        ...

    def render_output(self, request: RequestRecord, item: Any) -> Sequence[Frame]:
        """One item of the job's output (the per-token path: keep it lean). The item is
        the request's own; it may be changed and sent as is."""
        ...

    def fold(self, held: Frame, frame: Frame) -> bool:
        """Fold `frame` into `held`, the same request's last output frame still waiting
        for a slow reader (in place), when the client cannot tell the difference (two
        text deltas of one item); True if folded, False (nothing changed) otherwise."""
        ...

    def render_done(self, request: RequestRecord, status: DoneStatus) -> Sequence[Frame]:
        """The request's terminal frames when it completed or was cancelled.
        `request.job` is its job (None if it never ran)."""
        ...

    def render_error(
        self, request_id: str | None, error: RealtimeError, request: RequestRecord | None
    ) -> Sequence[Frame]:
        """An error frame: the terminal frame of a failed or refused request, or, with
        `request_id` None, an error that ends no request (a duplicate id)."""
        ...

    def render_expiring(self, close_in_seconds: float) -> Sequence[Frame]:
        """The warning that the socket reached its maximum duration."""
        ...

    def closes_socket(self, error: RealtimeError) -> bool:
        """Whether a request that failed with `error` ends the socket too."""
        ...

    def ended(self) -> None:
        """The socket's session is over and its requests have ended."""
        ...


#: Makes one socket's dialect; the endpoint picks one per handshake.
DialectFactory = Callable[[DialectContext], Dialect]


@dataclass(frozen=True, slots=True)
class DialectChoice:
    """A handshake's dialect, and the subprotocol to accept it with (None: none)."""

    dialect: DialectFactory
    subprotocol: str | None = None


#: Reads a handshake's ASGI scope; returns a choice if the handshake asks for its dialect.
DialectSelector = Callable[[MutableMapping[str, Any]], "DialectChoice | None"]
