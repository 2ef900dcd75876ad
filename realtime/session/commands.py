"""What a dialect makes of one client frame: the commands the session core takes.

A dialect parses every frame into exactly one command, and names it with a
`label` (the frames-received metric's label, e.g. "request", "cancel"). Bad input
is a command too (`Reply` with an error frame, or `CloseWith`): the dialect
chooses whether a fault costs a frame or the socket.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from realtime.protocol.errors import RealtimeError

#: A server frame before serialization: a JSON object.
Frame = dict[str, Any]


@dataclass(frozen=True, slots=True)
class Submit:
    """Start a request: queued, then run when a slot (and its lane's turn) comes.

    `request_id`: the client's id (a duplicate of one in flight is refused), or None
    for a server-chosen one (`req_1`, `req_2`, ...). `lane`: requests in one lane run
    one at a time, in arrival order; None runs concurrently with everything.
    `request` is what the dialect parsed: when the request starts, the dialect makes
    its job from it (`Dialect.job`). `rejection`: the request failed validation; it is
    answered with this error in its turn, never run. `context` is the dialect's own
    per-request state, kept on the record (`RequestRecord.context`) for its render
    methods.
    """

    request_id: str | None
    request: Any
    rejection: RealtimeError | None = None
    lane: str | None = None
    #: Characters of the frame it came in (its job prepares a large one off the event loop).
    size: int = 0
    context: Any = None
    label: str = "request"
    #: The id the client is shown for the answer when the dialect knows it at once
    #: (`resp_...`); None: its job's (`Job.answer_id`). The `request.end` log line's `id`.
    response_id: str | None = None


@dataclass(frozen=True, slots=True)
class Cancel:
    """Stop one request (in flight or queued); unknown and finished ids are ignored.

    `frames` are sent once the cancel is applied: the request's task can no longer
    send anything it rendered before (a Realtime `conversation.item.deleted` for the
    item the response was writing must be the last word on that item)."""

    request_id: str
    label: str = "cancel"
    frames: Sequence[Frame] = ()


@dataclass(frozen=True, slots=True)
class CloseGracefully:
    """Read no more; finish what is in flight, then close (1000 "session closed")."""

    label: str = "session_close"


@dataclass(frozen=True, slots=True)
class Reply:
    """Answer with frames and start nothing (a setup's answer, an error that keeps the
    socket open). `kind` is the frames-sent metric's label."""

    frames: Sequence[Frame]
    kind: str
    label: str


@dataclass(frozen=True, slots=True)
class CloseWith:
    """End the socket for `error` (its `close_code`; 1011 if it has none): in-flight
    requests are cancelled and get their terminal frames first."""

    error: RealtimeError
    label: str


Command = Submit | Cancel | CloseGracefully | Reply | CloseWith
