"""Background responses at run time: each one an asyncio task of its own, detached from
the request that created it. The pure part (the states, the log, the limits) is
`realtime.dialects.responses.background`; this is the I/O around it, above the
dialects (which import no event loop), beside the HTTP routes that serve it.

`create` admits the response (the limits: 429 past them), prepares it as every
response is prepared (its 400s come before anything is stored), stores it
`queued` with this server's runner id, and starts its task; the request that
created it may then answer at once, or stream its events (`stream`), and go away:
the task runs on. The task runs `ResponsesService.events` (which stores the
response before its terminal event, without a runner id, so it leaves the
runner's unfinished list), storing `in_progress` when it starts.

Where runs end other than by themselves:

* `cancel`: the task is cancelled (closing the pipeline's iterator stops the
  engine), the open item closed, the response stored `cancelled`;
* `forget` (before a delete): the same, storing nothing, so the deleted record
  does not come back;
* `stop` (the server's shutdown grace ran out, or the app closes): each run still
  going is failed with `shutting_down`, stored, and its stream ends;
* `recover` (at startup): the records this runner left `queued` or `in_progress`
  (the process was killed, or the machine went down) are failed with
  `server_restarted`. Only this runner's: replicas sharing a store each have their
  own runner id, so none fails another's running responses.

The event logs live in this process's memory: a run's log is kept while it runs
and `keep_seconds` after it ends (at most `limits.total` ended ones). A resume
that finds no log here (another replica ran it, the server restarted, or it ended
long ago) gets 400 `events_not_kept`: the response itself is still retrieved
without `stream`.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import time
from collections import OrderedDict
from collections.abc import AsyncGenerator, Callable
from contextlib import aclosing
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from realtime.dialects.responses.background import (
    DEFAULT_MAX_EVENTS,
    Admission,
    BackgroundLimits,
    EventLog,
    is_unfinished,
)
from realtime.dialects.responses.errors import (
    BackgroundElsewhereError,
    BackgroundShutdownError,
    EventsNotKeptError,
    NotCancellableError,
    ServerRestartedError,
    StoreUnavailableError,
)
from realtime.dialects.responses.request import ResponsesRequest
from realtime.dialects.responses.service import PreparedResponse, ResponsesService
from realtime.observability.logs import event as log_event
from realtime.protocol.errors import InternalError, RealtimeError
from realtime.store.base import StoredResponse, StoreError

log = logging.getLogger("realtime.responses")

#: Seconds an ended background response's events stay here for resuming.
DEFAULT_KEEP_SECONDS = 600.0

Stop = Literal["cancelled", "shutdown", "deleted"]


def default_runner_id() -> str:
    """This server's runner id when none is configured: its host name, which a restart on
    the same machine (or a pod of a StatefulSet) keeps."""
    return socket.gethostname() or "localhost"


@dataclass(eq=False)
class BackgroundRun:
    """One background response: its prepared run, its events, its task."""

    prepared: PreparedResponse
    log: EventLog
    #: The Response as `create` answered it (status `queued`).
    queued: dict[str, Any]
    task: asyncio.Task[None] | None = None
    #: Why the run is being ended from outside (None: it ends by itself).
    stop: Stop | None = None
    #: Set and replaced at each new event: what a follower of the stream waits on.
    changed: asyncio.Event = field(default_factory=asyncio.Event)
    #: When it ended (the clock of `BackgroundRuns`); None while it runs.
    ended_at: float | None = None
    #: Its task has taken its first step (before that, `halt` only marks `stop`).
    started: bool = False
    #: Its latest store write (`_store` waits for it before the next).
    writing: asyncio.Future[None] | None = None

    @property
    def id(self) -> str:
        return self.prepared.id

    @property
    def owner(self) -> str | None:
        return self.prepared.owner

    def add(self, events: list[dict[str, Any]]) -> None:
        for event in events:
            self.log.append(event)
        if events:
            self._wake()

    def end(self) -> None:
        self.log.close()
        self._wake()

    async def halt(self, why: Stop) -> None:
        """End the run from outside for `why` (the first reason given wins) and wait for
        its task to have stored what it stores."""
        task = self.task
        if task is None or task.done():
            return
        if self.stop is None:
            self.stop = why
            if self.started:
                task.cancel()
        await asyncio.gather(task, return_exceptions=True)

    def _wake(self) -> None:
        changed, self.changed = self.changed, asyncio.Event()
        changed.set()


class BackgroundRuns:
    """This server's background responses (`app.state.background`)."""

    def __init__(
        self,
        service: ResponsesService,
        *,
        runner: str | None = None,
        limits: BackgroundLimits | None = None,
        max_events: int = DEFAULT_MAX_EVENTS,
        keep_seconds: float = DEFAULT_KEEP_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.service = service
        #: The id stored with this server's unfinished responses (`recover` finds them).
        self.runner = runner if runner is not None else default_runner_id()
        self.admission = Admission(limits if limits is not None else BackgroundLimits())
        self.max_events = max_events
        self.keep_seconds = keep_seconds
        self._clock = clock
        #: by response id: running ones, then ended ones kept for resuming (oldest first)
        self._runs: OrderedDict[str, BackgroundRun] = OrderedDict()
        self._stopped = False

    @property
    def running(self) -> int:
        return self.admission.total

    # --- creating ---

    async def create(
        self,
        request: ResponsesRequest,
        *,
        owner: str | None,
        session_id: str | None = None,
        cache_salt: str | None = None,
        size: int = 0,
    ) -> BackgroundRun:
        """Admit, prepare, store `queued` and start. Raises RealtimeError (429 at a limit,
        the request's 400s, 503 when the store cannot keep it: nothing then runs).
        `size`: the bytes of the body it came in (`ResponsesService.prepare`)."""
        self._forget_ended()
        if self._stopped:
            raise BackgroundShutdownError(
                "server shutting down; send the request to another server"
            )
        self.admission.admit(owner)
        try:
            prepared = await self.service.prepare(
                request,
                stream=True,
                owner=owner,
                session_id=session_id,
                cache_salt=cache_salt,
                size=size,
            )
            prepared.events.response["background"] = True
            run = BackgroundRun(prepared, EventLog(self.max_events), {})
            run.add(prepared.events.queue())
            run.queued = _snapshot(prepared.events.response)
            await self._store(run)
        except BaseException:
            self.admission.release(owner)
            raise
        self._runs[run.id] = run
        run.task = asyncio.create_task(self._run(run), name=f"background {run.id}")
        log_event(log, "responses.background", id=run.id, status="queued", runner=self.runner)
        return run

    async def _run(self, run: BackgroundRun) -> None:
        prepared = run.prepared
        # A task cancelled before its first step never enters its coroutine (no `finally`
        # would run): so nothing cancels a run that has not started; it ends here.
        run.started = True
        try:
            if run.stop is not None:
                await self._ended_early(run)
                return
            async with aclosing(self.service.events(prepared)) as events:
                async for event in events:
                    if event["type"] == "response.in_progress":
                        await self._store(run)
                    run.add([event])
        except asyncio.CancelledError:
            await self._ended_early(run)
        except StoreUnavailableError as exc:  # storing `in_progress` failed
            await self._fail(run, exc)
        except Exception:
            log.exception("background response %s failed unexpectedly", run.id)
            await self._fail(run, InternalError())
        finally:
            self.admission.release(run.owner)
            run.ended_at = self._clock()
            run.end()
            if run.id in self._runs:
                self._runs.move_to_end(run.id)
            log_event(
                log,
                "responses.background",
                id=run.id,
                status=prepared.events.response["status"],
                runner=self.runner,
            )

    async def _ended_early(self, run: BackgroundRun) -> None:
        """The task was cancelled: by `cancel` (stored `cancelled`), else by `stop` or
        the loop's end (stored `failed`, `shutting_down`)."""
        events = run.prepared.events
        if not is_unfinished(events.response):
            return  # it had ended (and was stored) before the cancel arrived
        if run.stop == "deleted":
            return  # the record is being deleted: nothing may store it again
        if run.stop == "cancelled":
            run.add(events.cancel(run.prepared.tokens()))
            await self._keep_final(run)
        else:
            await self._fail(
                run,
                BackgroundShutdownError(
                    "the server shut down before this background response finished; create it again"
                ),
            )

    async def _fail(self, run: BackgroundRun, error: RealtimeError) -> None:
        run.add(run.prepared.events.fail(error, run.prepared.tokens()))
        await self._keep_final(run)

    async def _keep_final(self, run: BackgroundRun) -> None:
        try:
            await self._store(run, final=True)
        except StoreUnavailableError as exc:
            log.error("background response %s: its end could not be stored: %s", run.id, exc)

    async def _store(self, run: BackgroundRun, *, final: bool = False) -> None:
        """Store the response as it is now: with this runner's id while it is unfinished."""
        prepared = run.prepared
        request = prepared.request
        response = _snapshot(prepared.events.response)
        record = StoredResponse(
            id=run.id,
            owner=prepared.owner,
            created_at=prepared.created_at or float(response["created_at"]),
            previous_response_id=request.previous_response_id,
            response=response,
            input_items=request.items,
            runner=None if final else self.runner,
        )
        assert prepared.store is not None  # background needs store: true
        # One write at a time, in order: a cancel that interrupts the wait for a write
        # leaves that write running, and the next status must land after it.
        if run.writing is not None:
            await asyncio.gather(run.writing, return_exceptions=True)
        run.writing = asyncio.ensure_future(prepared.store.put(record))
        run.writing.add_done_callback(_retrieved)
        try:
            await asyncio.shield(run.writing)
        except StoreError as exc:
            raise StoreUnavailableError(str(exc)) from None

    # --- following, cancelling ---

    def find(self, response_id: str, owner: str | None) -> BackgroundRun | None:
        run = self._runs.get(response_id)
        return run if run is not None and run.owner == owner else None

    def resume(
        self, response: dict[str, Any], owner: str | None, after: int | None
    ) -> AsyncGenerator[dict[str, Any], None]:
        """The stream of a stored background `response` from after `after`: checked now
        (its 400s come before the stream starts), then followed."""
        self._forget_ended()
        run = self.find(response["id"], owner)
        if run is None:
            raise EventsNotKeptError(
                f"the events of response '{response['id']}' are not kept here: a background"
                " response's events are kept in memory by the server that runs it, until"
                f" {self.keep_seconds:g} s after it ends; retrieve it without stream",
                param="response_id",
            )
        run.log.check(after, run.id)
        return self.follow(run, after)

    async def follow(
        self, run: BackgroundRun, after: int | None
    ) -> AsyncGenerator[dict[str, Any], None]:
        """The run's events after `after` (None: all kept), then each new one, until its
        last. Closing this follower leaves the run going."""
        position = -1 if after is None else after
        while True:
            changed = run.changed
            events = run.log.since(position, run.id)
            for event in events:
                yield event
                position = event["sequence_number"]
            if run.log.done and position >= run.log.last:
                return
            if not events:
                await changed.wait()

    async def cancel(self, response_id: str, owner: str | None) -> dict[str, Any]:
        """OpenAI's cancel: a queued or running background response ends `cancelled` (its
        engine work stops); an ended one is returned as it is; a response that is not a
        background one is a 400."""
        response = await self.service.retrieve(response_id, owner)
        if not response.get("background"):
            raise NotCancellableError(response_id)
        if not is_unfinished(response):
            return response
        run = self.find(response_id, owner)
        if run is None or run.task is None:
            raise BackgroundElsewhereError(response_id)
        if is_unfinished(run.prepared.events.response):
            await run.halt("cancelled")
        else:  # it is storing its end: wait for it
            await asyncio.gather(run.task, return_exceptions=True)
        return await self.service.retrieve(response_id, owner)

    async def forget(self, response_id: str, owner: str | None) -> None:
        """Before a delete: a run of `response_id` still going here is stopped without
        storing anything more (else its next status would store the record again), and
        its events are dropped."""
        run = self.find(response_id, owner)
        if run is None:
            return
        await run.halt("deleted")
        self._runs.pop(response_id, None)

    # --- the server's start and end ---

    async def recover(self) -> int:
        """Fail what this runner left unfinished (the server stopped while it ran); the
        number failed. Raises StoreError."""
        error = ServerRestartedError(
            "the server restarted before this background response finished; create it again"
        ).to_body()["error"]
        records = await self.service.store.unfinished(self.runner)
        for record in records:
            response = {**record.response, "status": "failed", "error": error}
            await self.service.store.put(replace(record, response=response, runner=None))
        if records:
            log_event(
                log,
                "responses.background_recovered",
                logging.WARNING,
                failed=len(records),
                runner=self.runner,
            )
        return len(records)

    async def drain(self, timeout: float) -> bool:
        """Wait up to `timeout` seconds for every run to end; True when they all did."""
        tasks = [run.task for run in self._runs.values() if run.task is not None]
        tasks = [task for task in tasks if not task.done()]
        if not tasks:
            return True
        _, pending = await asyncio.wait(tasks, timeout=max(timeout, 0.0))
        return not pending

    async def stop(self) -> None:
        """End every run still going as failed (`shutting_down`), each stored; new ones
        are refused from now on."""
        self._stopped = True
        await asyncio.gather(*(run.halt("shutdown") for run in list(self._runs.values())))

    def _forget_ended(self) -> None:
        """Drop the logs of runs that ended more than `keep_seconds` ago, and the oldest
        ended ones beyond `limits.total`."""
        now = self._clock()
        ended = [run for run in self._runs.values() if run.ended_at is not None]
        excess = len(ended) - self.admission.limits.total
        for run in ended:
            assert run.ended_at is not None
            if excess > 0 or now - run.ended_at > self.keep_seconds:
                del self._runs[run.id]
                excess -= 1


def _retrieved(write: asyncio.Future[None]) -> None:
    """A write's failure is reported by whoever awaited it; one nobody awaits any more
    (its caller was cancelled) is not "never retrieved"."""
    if not write.cancelled():
        write.exception()


def _snapshot(response: dict[str, Any]) -> dict[str, Any]:
    return {**response, "output": list(response["output"])}
