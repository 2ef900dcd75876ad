"""A socket session's helpers: what it counts and logs, its id, limits and timer, task ends.

Kept apart from the glue (`realtime.ws.session`) so that module stays about
doing what the core says; these functions hold no reference to a session, so
nothing here can form a reference cycle with one.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Callable

from realtime.observability.logs import event, field_name
from realtime.observability.metrics import Metrics
from realtime.protocol.errors import EngineError, EngineUnavailableError
from realtime.session.actions import RequestEnded, RequestRefused

log = logging.getLogger("realtime.ws")

TRANSPORT = "ws"


def new_session_id() -> str:
    """122 random bits: nobody can guess another socket's id to reach its cache."""
    return f"sess_{uuid.uuid4().hex}"


def when_all_done(tasks: list[asyncio.Task[None]], callback: Callable[[], None]) -> None:
    """Call `callback` once every task in `tasks` has ended (at once if they all have).
    By callbacks, not by awaiting: the caller may itself be cancelled."""
    pending = {task for task in tasks if not task.done()}

    def one_done(task: asyncio.Task[None]) -> None:
        pending.discard(task)
        if not pending:
            callback()

    if not pending:
        callback()
    for task in pending:
        task.add_done_callback(one_done)


def report_violation(metrics: Metrics, conn_id: str, machine: str, exc: Exception) -> None:
    """A state table was broken: a bug, counted and logged."""
    metrics.state_violations.labels(machine).inc()
    log.error("state machine violation: %s", exc, extra={"conn_id": conn_id})


def watch_read_loop(reader: asyncio.Task[None], conn_id: str, end: Callable[[], None]) -> None:
    """Call `end` (the socket's 1011) if the read loop ends with an exception, logged once
    with its traceback: a bug, since dialects answer bad input and never raise. An
    unwatched read loop died silently, and its socket hung, answering nothing."""

    def done(task: asyncio.Task[None]) -> None:
        if not task.cancelled() and task.exception() is not None:
            log.error(
                "the socket's read loop failed",
                exc_info=task.exception(),
                extra={"conn_id": conn_id},
            )
            end()

    reader.add_done_callback(done)


def record_ended(metrics: Metrics, conn_id: str, ended: RequestEnded) -> None:
    """A request got its answer: the request metrics and the `request.end` log line."""
    request, status, error = ended.request, ended.status, ended.error
    metrics.requests.labels(TRANSPORT, status).inc()
    job = request.job
    usage = job.usage() if job is not None else None
    metrics.usage(TRANSPORT, usage)
    if status == "cancelled":
        metrics.cancellations.labels(TRANSPORT, ended.cause or "server_close").inc()
    if isinstance(error, (EngineError, EngineUnavailableError)):
        metrics.engine_errors.labels(error.code or "engine_error").inc()
    timer = request.timer
    event(
        log,
        "request.end",
        transport=TRANSPORT,
        conn_id=conn_id,
        request_id=request.id,
        id=request.response_id or (job.answer_id if job is not None else None),
        status=status,
        cause=ended.cause if status == "cancelled" else None,
        error_code=error.code if error is not None else None,
        error_param=field_name(error.param) if error is not None else None,
        prompt_tokens=usage["prompt_tokens"] if usage else None,
        completion_tokens=usage["completion_tokens"] if usage else None,
        ttft_ms=timer.ttft_ms if timer is not None else None,
        duration_ms=round((time.perf_counter() - request.received_at) * 1000, 3),
    )


def record_refused(metrics: Metrics, conn_id: str, refused: RequestRefused) -> None:
    """A request refused before it was accepted: counted as rejected, logged."""
    metrics.requests.labels(TRANSPORT, "rejected").inc()
    event(
        log,
        "request.refused",
        transport=TRANSPORT,
        conn_id=conn_id,
        request_id=refused.request_id,
        error_code=refused.error.code,
        error_param=field_name(refused.error.param),
    )
