"""ThreadedEngineCore with a scripted backend: delivery, cancel, failure, loop never blocked."""

from __future__ import annotations

import asyncio
import threading
import time
from contextlib import aclosing

import pytest

from realtime.engine.base import EngineOutput, EngineRequest
from realtime.engine.errors import EngineRequestError, EngineUnavailable
from realtime.engine.threaded import ThreadedEngineCore
from realtime.model.generation import FinishReason

pytestmark = pytest.mark.anyio


class CountingBackend:
    """Emits one token per job per step; `step_seconds` makes a step block like a forward pass."""

    def __init__(self, step_seconds: float = 0.0, fail_on_step: int | None = None):
        self.jobs: dict[int, list[int]] = {}
        self.step_seconds = step_seconds
        self.fail_on_step = fail_on_step
        self.steps = 0
        self.cancelled: list[int] = []
        self.threads: set[str] = set()
        self.closed = False

    def add(self, job_id: int, request: EngineRequest) -> None:
        self.threads.add(threading.current_thread().name)
        if not request.prompt_token_ids:
            raise ValueError("empty prompt")
        self.jobs[job_id] = list(request.prompt_token_ids)

    def cancel(self, job_id: int) -> None:
        self.cancelled.append(job_id)
        del self.jobs[job_id]

    def has_work(self) -> bool:
        return bool(self.jobs)

    def step(self) -> list[tuple[int, EngineOutput]]:
        self.steps += 1
        self.threads.add(threading.current_thread().name)
        if self.step_seconds:
            time.sleep(self.step_seconds)
        if self.fail_on_step == self.steps:
            raise RuntimeError("device lost")
        out = []
        for job_id, remaining in list(self.jobs.items()):
            token = remaining.pop(0)
            reason = None if remaining else FinishReason.EOS
            if reason:
                del self.jobs[job_id]
            out.append((job_id, EngineOutput([token], finish_reason=reason)))
        return out

    def recover(self) -> None:
        self.jobs.clear()

    def close(self) -> None:
        self.closed = True


async def _collect(core: ThreadedEngineCore, ids: list[int]) -> list[int]:
    got: list[int] = []
    async for out in core.generate(EngineRequest("r", ids)):
        got.extend(out.token_ids)
    return got


async def test_requests_run_on_the_engine_thread_and_deliver_in_order():
    backend = CountingBackend()
    core = ThreadedEngineCore(lambda: backend, name="test-engine")
    await core.start()
    try:
        results = await asyncio.gather(_collect(core, [1, 2, 3]), _collect(core, [7, 8]))
    finally:
        await core.close()
    assert results == [[1, 2, 3], [7, 8]]
    assert backend.threads == {"test-engine"}
    assert backend.closed
    assert core.stats.jobs_added == 2 and core.stats.jobs_finished == 2


async def test_closing_the_iterator_cancels_the_job_on_the_thread():
    backend = CountingBackend(step_seconds=0.01)
    core = ThreadedEngineCore(lambda: backend, name="test-engine")
    await core.start()
    try:
        async with aclosing(core.generate(EngineRequest("r", list(range(1000))))) as outputs:
            async for out in outputs:
                if out.token_ids[0] == 2:
                    break
        for _ in range(100):
            if backend.cancelled:
                break
            await asyncio.sleep(0.01)
        steps_after_cancel = backend.steps
        await asyncio.sleep(0.1)
    finally:
        await core.close()
    assert backend.cancelled == [1]
    assert core.stats.jobs_cancelled == 1
    assert backend.steps == steps_after_cancel, "the engine kept stepping after the cancel"
    assert backend.steps < 20


async def test_a_failing_step_fails_only_the_active_requests_and_the_engine_recovers():
    backend = CountingBackend(fail_on_step=2)
    core = ThreadedEngineCore(lambda: backend, name="test-engine")
    await core.start()
    try:
        with pytest.raises(EngineUnavailable) as info:
            await _collect(core, [1, 2, 3])
        assert "RuntimeError" in info.value.message and "device lost" not in info.value.message
        assert await _collect(core, [4, 5]) == [4, 5]
    finally:
        await core.close()
    assert core.stats.step_failures == 1


async def test_a_request_the_backend_rejects_fails_alone_as_a_client_error():
    core = ThreadedEngineCore(CountingBackend, name="test-engine")
    await core.start()
    try:
        with pytest.raises(EngineRequestError, match="empty prompt"):
            await _collect(core, [])
        assert await _collect(core, [9]) == [9]
    finally:
        await core.close()


async def test_a_backend_that_cannot_load_fails_start():
    def broken() -> CountingBackend:
        raise OSError("weights not found")

    core = ThreadedEngineCore(broken, name="test-engine")
    with pytest.raises(OSError, match="weights not found"):
        await core.start()
    assert not core.running
    with pytest.raises(EngineUnavailable):
        await _collect(core, [1])


async def test_the_event_loop_keeps_running_during_a_long_step():
    backend = CountingBackend(step_seconds=0.3)
    core = ThreadedEngineCore(lambda: backend, name="test-engine")
    await core.start()
    ticks = 0

    async def ticker() -> None:
        nonlocal ticks
        while True:
            await asyncio.sleep(0.01)
            ticks += 1

    tick_task = asyncio.create_task(ticker())
    try:
        assert await _collect(core, [1, 2]) == [1, 2]
    finally:
        tick_task.cancel()
        await core.close()
    # Two 0.3 s steps ran while the loop ticked every 10 ms; a blocked loop would tick ~0 times.
    assert ticks > 20


# --- outputs in batches, bounded per request ---


class PausableBackend(CountingBackend):
    """CountingBackend that can leave a job out of its steps (like the CPU engine)."""

    def __init__(self, step_seconds: float = 0.0):
        super().__init__(step_seconds)
        self.paused: set[int] = set()
        self.pauses: list[int] = []
        self.resumes: list[int] = []

    def pause(self, job_id: int) -> None:
        self.pauses.append(job_id)
        self.paused.add(job_id)

    def resume(self, job_id: int) -> None:
        self.resumes.append(job_id)
        self.paused.discard(job_id)

    def has_work(self) -> bool:
        return any(job not in self.paused for job in self.jobs)

    def step(self) -> list[tuple[int, EngineOutput]]:
        held = {job: self.jobs.pop(job) for job in self.paused if job in self.jobs}
        try:
            return super().step()
        finally:
            self.jobs.update(held)


async def test_one_loop_wake_up_serves_a_whole_step_of_outputs():
    backend = CountingBackend(step_seconds=0.002)
    core = ThreadedEngineCore(lambda: backend, name="test-engine")
    await core.start()
    try:
        results = await asyncio.gather(*(_collect(core, list(range(50))) for _ in range(8)))
    finally:
        await core.close()
    assert results == [list(range(50))] * 8
    assert core.stats.outputs == 8 * 50
    # At most one event-loop callback per step, whatever the number of requests in it.
    assert core.stats.wakeups <= core.stats.steps
    assert core.stats.wakeups * 8 <= core.stats.outputs


async def test_a_reader_that_stops_pauses_only_its_own_job():
    backend = PausableBackend(step_seconds=0.001)
    core = ThreadedEngineCore(lambda: backend, name="test-engine", output_limit=8)
    await core.start()
    try:
        slow = core.generate(EngineRequest("slow", list(range(100))))
        first = await anext(slow)  # then stop reading for a while
        # The other request runs to its end while the slow one's queue is full.
        assert await _collect(core, list(range(200, 300))) == list(range(200, 300))
        assert backend.pauses == [1] and 1 in backend.paused
        assert core.stats.peak_queued <= 8 + 1  # the limit, plus the step that was running
        assert core.stats.jobs_paused == 1
        rest = [t async for out in slow for t in out.token_ids]
    finally:
        await core.close()
    assert first.token_ids + rest == list(range(100))  # nothing lost, in order
    assert backend.resumes and core.stats.jobs_resumed == len(backend.resumes)
    assert core.stats.peak_queued <= 9


async def test_a_backend_that_cannot_pause_has_its_outputs_folded():
    backend = CountingBackend(step_seconds=0.001)
    core = ThreadedEngineCore(lambda: backend, name="test-engine", output_limit=4)
    await core.start()
    try:
        slow = core.generate(EngineRequest("slow", list(range(60))))
        first = await anext(slow)
        for _ in range(200):  # let the backend run to the end while nobody reads
            if not backend.jobs:
                break
            await asyncio.sleep(0.005)
        assert not backend.jobs and core.stats.peak_queued <= 4
        outputs = [out async for out in slow]
    finally:
        await core.close()
    assert first.token_ids + [t for out in outputs for t in out.token_ids] == list(range(60))
    assert len(outputs) <= 4 and core.stats.jobs_paused == 0


async def test_cancelling_a_paused_job_frees_it():
    backend = PausableBackend()
    core = ThreadedEngineCore(lambda: backend, name="test-engine", output_limit=2)
    await core.start()
    try:
        async with aclosing(core.generate(EngineRequest("r", list(range(1000))))) as outputs:
            await anext(outputs)
            for _ in range(200):
                if backend.pauses:
                    break
                await asyncio.sleep(0.005)
            assert backend.pauses == [1]
        for _ in range(200):
            if backend.cancelled:
                break
            await asyncio.sleep(0.005)
    finally:
        await core.close()
    assert backend.cancelled == [1] and core.stats.jobs_cancelled == 1
    assert backend.steps < 10
