"""One accepted request, all of it in one place: the record the core and the glue share."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from realtime.protocol.errors import RealtimeError
from realtime.protocol.states import RequestState


@dataclass(slots=True, eq=False)
class RequestRecord:
    id: str
    #: Requests of one lane run one at a time, in order; None: no lane.
    lane: str | None
    #: What the dialect parsed (its job is made from it); None when `rejection` is set.
    request: Any
    #: Failed validation: answered with this error in its turn, never run.
    rejection: RealtimeError | None
    size: int
    #: When it was read (`time.perf_counter()`), for its duration and time to first token.
    received_at: float
    #: The dialect's own per-request state (`Submit.context`).
    context: Any = None
    #: `Submit.response_id`: the answer's id as the client sees it, when not the chat id.
    response_id: str | None = None
    #: Its `RequestState` (the `REQUEST` table), driven by the core alone.
    state: str = RequestState.NEW.value
    #: Has a concurrency slot (dispatched).
    slotted: bool = False
    #: `StartRequest` was issued: a task runs it.
    started: bool = False
    #: The client asked to cancel it.
    cancel_requested: bool = False
    #: Its terminal frames were decided (they may still be on their way to the outbox).
    answered: bool = False
    # --- kept by the glue while the request runs (the core never reads them) ---
    #: Its `Job` (`Dialect.job`; None until it runs): the dialect that made it reads its
    #: own kind back (its run, ids, usage), hence not typed here.
    job: Any = None
    #: Its `RequestTimer` while it streams.
    timer: Any = None
    #: The task took its first step (a cancel before that only flags it).
    body_started: bool = False
    #: A cancel came before the task's first step: it ends at once when it starts.
    cancel_pending: bool = False
