"""Background responses without sockets: the state table, the bounded event log and its
resume checks, the admission limits, and the runs (stop, recover, forgetting ended logs)
on the echo engine and the memory store."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from realtime.dialects.responses.background import (
    TRANSITIONS,
    UNFINISHED,
    Admission,
    BackgroundLimits,
    EventLog,
    can_move,
)
from realtime.dialects.responses.background_runs import BackgroundRuns
from realtime.dialects.responses.errors import (
    EventsNotKeptError,
    StartingAfterError,
    TooManyBackgroundResponsesError,
)
from realtime.dialects.responses.service import ResponsesService
from realtime.engine.echo import EchoEngine
from realtime.pipeline import ChatPipeline
from realtime.store import MemoryResponseStore, StoredResponse
from tests.conftest import async_wait_until


def event(n: int) -> dict[str, Any]:
    return {"type": "response.output_text.delta", "delta": str(n), "sequence_number": n}


# --- the states ---


def test_the_states_move_forward_only_and_end() -> None:
    assert can_move("queued", "in_progress") and can_move("in_progress", "completed")
    assert can_move("queued", "cancelled") and can_move("in_progress", "cancelled")
    assert not can_move("in_progress", "queued") and not can_move("completed", "cancelled")
    assert not can_move("cancelled", "in_progress")
    finals = {to for targets in TRANSITIONS.values() for to in targets} - UNFINISHED
    assert finals == {"completed", "incomplete", "failed", "cancelled"}
    assert all(not TRANSITIONS.get(status) for status in finals)


# --- the event log ---


def test_the_log_serves_the_events_after_a_number() -> None:
    log = EventLog(max_events=100)
    assert log.last == -1 and log.first is None and log.since(None, "r") == []
    for n in range(10):
        log.append(event(n))
    assert [e["sequence_number"] for e in log.since(None, "r")] == list(range(10))
    assert [e["sequence_number"] for e in log.since(6, "r")] == [7, 8, 9]
    assert log.since(9, "r") == []
    with pytest.raises(StartingAfterError, match="past the last event"):
        log.since(10, "r")
    log.close()
    with pytest.raises(RuntimeError):
        log.append(event(10))


def test_the_log_keeps_its_newest_events_and_refuses_a_resume_before_them() -> None:
    log = EventLog(max_events=4)
    for n in range(50):
        log.append(event(n))
        assert len(log) == min(n + 1, 4)
    assert log.first == 46 and log.last == 49
    assert [e["sequence_number"] for e in log.since(45, "r")] == [46, 47, 48, 49]
    for after in (None, 0, 44):
        with pytest.raises(EventsNotKeptError) as refused:
            log.since(after, "r")
        assert refused.value.param == "starting_after" and "starting_after >= 45" in str(
            refused.value
        )
    assert len(log._events) <= 2 * log.max_events + 1  # compacted, not grown


# --- admission ---


def test_admission_counts_per_owner_and_in_all() -> None:
    admission = Admission(BackgroundLimits(total=3, per_key=2))
    admission.admit("a")
    admission.admit("a")
    with pytest.raises(TooManyBackgroundResponsesError, match="this API key") as refused:
        admission.admit("a")
    assert refused.value.status == 429 and refused.value.code == "too_many_background_responses"
    admission.admit("b")
    with pytest.raises(TooManyBackgroundResponsesError, match="this server"):
        admission.admit("c")
    admission.release("a")
    admission.admit("c")
    assert admission.total == 3 and admission.running("a") == 1


# --- runs ---


def make_runs(delay: float = 0.0, **options: Any) -> tuple[BackgroundRuns, EchoEngine]:
    engine = EchoEngine(delay=delay)
    pipeline = ChatPipeline(engine, tool_parser="none", reasoning_parser="none")
    service = ResponsesService(pipeline, MemoryResponseStore())
    return BackgroundRuns(service, runner="me", **options), engine


def test_stop_fails_what_runs_and_stores_it_without_its_runner() -> None:
    async def go() -> None:
        runs, engine = make_runs(delay=0.05)
        await engine.start()
        service = runs.service
        request = service.parse({"model": "echo", "input": "a b c d e f g h i j k l m n o p"})
        run = await runs.create(request, owner=None)
        await async_wait_until(lambda: engine.stats.tokens_generated >= 2)
        assert [r.id for r in await service.store.unfinished("me")] == [run.id]
        await runs.stop()
        assert engine.stats.requests_cancelled == 1 and runs.running == 0
        stored = await service.retrieve(run.id, None)
        assert stored["status"] == "failed" and stored["error"]["code"] == "shutting_down"
        assert await service.store.unfinished("me") == []
        assert run.log.done and run.log.since(None, run.id)[-1]["type"] == "response.failed"
        with pytest.raises(Exception, match="shutting down"):
            await runs.create(request, owner=None)

    asyncio.run(go())


def test_recover_fails_only_this_runners_unfinished_responses() -> None:
    async def go() -> None:
        runs, _ = make_runs()
        store = runs.service.store
        for rid, runner in (("mine", "me"), ("theirs", "other")):
            response = {"id": rid, "object": "response", "status": "in_progress", "output": []}
            await store.put(
                StoredResponse(rid, None, time.time(), None, response, [], runner=runner)
            )
        assert await runs.recover() == 1
        mine = await store.get("mine", None)
        theirs = await store.get("theirs", None)
        assert mine is not None and mine.response["status"] == "failed"
        assert mine.response["error"]["code"] == "server_restarted"
        assert theirs is not None and theirs.response["status"] == "in_progress"
        assert await runs.recover() == 0

    asyncio.run(go())


def test_ended_logs_are_forgotten_after_their_time() -> None:
    async def go() -> None:
        now = [0.0]
        runs, engine = make_runs(keep_seconds=10, clock=lambda: now[0])
        await engine.start()
        request = runs.service.parse({"model": "echo", "input": "short"})
        run = await runs.create(request, owner=None)
        assert run.task is not None
        await run.task
        stored = await runs.service.retrieve(run.id, None)
        assert stored["status"] == "completed"
        assert runs.find(run.id, None) is run and runs.find(run.id, "someone") is None
        now[0] = 11
        with pytest.raises(EventsNotKeptError):
            runs.resume(stored, None, None)

    asyncio.run(go())


def test_a_run_cancelled_or_stopped_before_its_task_starts_still_ends_stored() -> None:
    """A task cancelled before its first step would never run its coroutine (nor its
    `finally`): a run halted that early ends in its own task, stored, its slot freed."""

    async def go() -> None:
        runs, engine = make_runs()
        await engine.start()
        service = runs.service
        request = service.parse({"model": "echo", "input": "never started"})
        first = await runs.create(request, owner=None)
        assert not first.started
        cancelled = await runs.cancel(first.id, None)
        assert cancelled["status"] == "cancelled" and cancelled["output"] == []
        second = await runs.create(request, owner=None)
        assert not second.started
        await runs.stop()
        stored = await service.retrieve(second.id, None)
        assert stored["status"] == "failed" and stored["error"]["code"] == "shutting_down"
        assert engine.stats.requests_started == 0 and runs.running == 0
        assert await service.store.unfinished("me") == []
        assert first.log.done and second.log.done

    asyncio.run(go())
