"""Background runs on the echo engine and the memory store, without sockets: stop, recover,
a halt before the task starts, forgetting ended logs."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from realtime.dialects.responses.errors import EventsNotKeptError
from realtime.dialects.responses.service import ResponsesService
from realtime.engine.echo import EchoEngine
from realtime.http.background_runs import BackgroundRuns
from realtime.pipeline import ChatPipeline
from realtime.store import MemoryResponseStore, StoredResponse
from tests.conftest import async_wait_until


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
