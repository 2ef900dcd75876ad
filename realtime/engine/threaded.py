"""One thread owns the model; the event loop only hands it work and collects results.

Model code (a transformers forward pass, exllamav2's `generator.iterate()`) blocks
for milliseconds to seconds and is not thread-safe. Running it on the event loop
would stall every socket during a prefill, so each model-backed engine runs a
`StepBackend` on one dedicated thread through `ThreadedEngineCore`:

    event loop                                   engine thread
    generate() --("add", id, request, channel)-->  backend.add(id, request)
    close/cancel --("cancel", id)-->               backend.cancel(id)
    a drained queue --("resume", id)-->            backend.resume(id)
                                                   loop: outputs = backend.step()
    per-request OutputChannel <-- push; one call_soon_threadsafe wakes every
                                  consumer that was waiting, for any number of steps

The thread blocks on its command queue while there is no work, so an idle engine
costs nothing. A cancel is handled before the next step, which bounds the work
done after a client goes away to the step already running.

Outputs reach the event loop in batches: the thread puts each output straight into
its request's `OutputChannel` and schedules at most one loop callback at a time,
which wakes every consumer that was waiting. A busy loop therefore gets one wake-up
for many tokens of many requests, not one per token per request.

Each channel is bounded (`output_channel.py`): a request whose consumer stops
reading is paused by a backend that can pause (`PausableBackend`, the CPU engine),
so one slow reader never holds up the others' batch, and resumed once its consumer
has read half the queue. A backend that cannot pause keeps producing, and the
channel folds its outputs together, so the queue's length stays bounded.

If a step raises, the requests that were active fail with `EngineUnavailable`
(their clients see 503 over HTTP, 1011 on the socket), the backend is asked to
`recover()`, and the engine keeps serving new requests.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import queue
import threading
from collections.abc import AsyncGenerator, Callable, Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from realtime.engine.base import NORMAL_PRIORITY, EngineOutput, EngineRequest
from realtime.engine.errors import EngineRequestError, EngineUnavailable
from realtime.engine.output_channel import OUTPUT_QUEUE_LIMIT, Delivery, OutputChannel

log = logging.getLogger("realtime.engine")


class StepBackend(Protocol):
    """The model-specific half of an engine. Every method runs on the engine thread."""

    def add(self, job_id: int, request: EngineRequest) -> None:
        """Start a request. Raise ValueError for a request this backend cannot run
        (the client gets a 400 for that request alone)."""
        ...

    def cancel(self, job_id: int) -> None:
        """Drop a request and free what it holds; no output may follow for it."""
        ...

    def has_work(self) -> bool: ...

    def step(self) -> list[tuple[int, EngineOutput]]:
        """Do one unit of work (one forward pass / one `iterate()`), return its outputs.

        An output with a `finish_reason` is the job's last; the backend forgets it.
        """
        ...

    def recover(self) -> None:
        """Forget every job after a failed step so new requests can run."""
        ...

    def close(self) -> None: ...


@runtime_checkable
class PausableBackend(Protocol):
    """A backend that can leave a job out of its steps while the job's reader lags."""

    def pause(self, job_id: int) -> None:
        """Produce nothing more for this job until `resume`; it keeps what it holds."""
        ...

    def resume(self, job_id: int) -> None: ...


@dataclass
class CoreStats:
    """Counters readable from any thread; tests use them to prove work stopped."""

    steps: int = 0
    jobs_added: int = 0
    jobs_finished: int = 0
    jobs_cancelled: int = 0
    step_failures: int = 0
    #: outputs handed to request channels, and event-loop callbacks that woke consumers
    outputs: int = 0
    wakeups: int = 0
    #: jobs paused because their reader lagged, and resumed after it caught up
    jobs_paused: int = 0
    jobs_resumed: int = 0
    #: the most outputs that waited unread in any one request's channel
    peak_queued: int = 0


_Command = tuple[str, int, EngineRequest | None, OutputChannel | None]


class ThreadedEngineCore:
    def __init__(
        self,
        backend_factory: Callable[[], StepBackend],
        *,
        name: str,
        output_limit: int = OUTPUT_QUEUE_LIMIT,
        merge_backlog: bool = False,
    ):
        self._factory = backend_factory
        self._name = name
        self._output_limit = output_limit
        #: a consumer that lags takes what queued up as one output (see output_channel.py)
        self._merge_backlog = merge_backlog
        self._commands: queue.SimpleQueue[_Command] = queue.SimpleQueue()
        #: the channels of requests being consumed (event-loop side)
        self._jobs: dict[int, OutputChannel] = {}
        self._ids = itertools.count(1)
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._ready = threading.Event()
        self._startup_error: BaseException | None = None
        #: channels whose consumer waits for a wake-up, and whether a callback is scheduled
        self._wake_lock = threading.Lock()
        self._to_wake: list[OutputChannel] = []
        self._wake_scheduled = False
        self.failure: str | None = None
        self.stats = CoreStats()
        #: client requests handed to the thread (event loop side), and those it has taken
        #: (thread side): the difference is waiting in the command queue (`queued`)
        self._adds_sent = 0
        self._adds_taken = 0

    @property
    def backend_factory(self) -> Callable[[], StepBackend]:
        """What builds the backend, on the thread that will own it: this core's thread,
        or the main thread of an engine process (`realtime.engine.process`)."""
        return self._factory

    @property
    def merge_backlog(self) -> bool:
        return self._merge_backlog

    @property
    def output_limit(self) -> int:
        return self._output_limit

    # --- lifecycle (event loop side) ---

    async def start(self) -> None:
        """Start the thread and build the backend on it (model loading happens there)."""
        self._loop = asyncio.get_running_loop()
        self._thread = threading.Thread(target=self._run, name=self._name, daemon=True)
        self._thread.start()
        await asyncio.to_thread(self._ready.wait)
        if self._startup_error is not None:
            raise self._startup_error

    async def close(self) -> None:
        if self._thread is None:
            return
        self._commands.put(("stop", 0, None, None))
        await asyncio.to_thread(self._thread.join)
        self._thread = None
        self._adds_taken = self._adds_sent  # what was never taken never will be
        for channel in self._jobs.values():
            channel.fail(EngineUnavailable("engine unavailable: shutting down"))

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive() and self._ready.is_set()

    @property
    def queued(self) -> int:
        """Client (normal-priority) requests sent to the engine thread that it has not
        taken yet: they wait while a step runs. Readable from any thread."""
        return max(0, self._adds_sent - self._adds_taken)

    # --- requests (event loop side) ---

    async def generate(self, request: EngineRequest) -> AsyncGenerator[EngineOutput, None]:
        if not self.running:
            raise EngineUnavailable(f"engine unavailable: {self.failure or 'not running'}")
        loop = asyncio.get_running_loop()
        job_id = next(self._ids)
        channel = OutputChannel(self._output_limit, merge=self._merge_backlog)
        self._jobs[job_id] = channel
        if request.priority <= NORMAL_PRIORITY:
            self._adds_sent += 1
        self._commands.put(("add", job_id, request, channel))
        finished = False
        try:
            while True:
                item, resume = channel.take(loop)
                if item is None:
                    await channel.wait()
                    continue
                if resume:
                    self._commands.put(("resume", job_id, None, None))
                if isinstance(item, BaseException):
                    finished = True
                    raise item
                if item.finish_reason is not None:
                    finished = True
                yield item
                if finished:
                    return
        finally:
            self._jobs.pop(job_id, None)
            if not finished:
                self._commands.put(("cancel", job_id, None, None))

    def _wake_waiting(self) -> None:
        """Runs on the event loop: wake every consumer the thread found waiting."""
        with self._wake_lock:
            channels, self._to_wake = self._to_wake, []
            self._wake_scheduled = False
        self.stats.wakeups += 1
        for channel in channels:
            channel.notify()

    # --- the engine thread ---

    def _run(self) -> None:
        try:
            backend = self._factory()
        except BaseException as exc:  # reported to start(), which re-raises it
            self._startup_error = exc
            self._ready.set()
            return
        self._ready.set()
        try:
            self._serve(backend)
        finally:
            backend.close()

    def _serve(self, backend: StepBackend) -> None:
        active: dict[int, OutputChannel] = {}
        while True:
            # Block for a command only when there is nothing to compute.
            block = not backend.has_work()
            while True:
                try:
                    op, job_id, request, channel = self._commands.get(block=block)
                except queue.Empty:
                    break
                block = False
                if op == "stop":
                    return
                if op == "add":
                    assert request is not None and channel is not None
                    if request.priority <= NORMAL_PRIORITY:
                        self._adds_taken += 1
                    self._add(backend, active, job_id, request, channel)
                elif op == "cancel" and job_id in active:
                    del active[job_id]
                    backend.cancel(job_id)
                    self.stats.jobs_cancelled += 1
                elif op == "resume" and job_id in active:
                    active[job_id].resumed()
                    if isinstance(backend, PausableBackend):
                        backend.resume(job_id)
                    self.stats.jobs_resumed += 1
            if not backend.has_work():
                continue
            self._step(backend, active)

    def _add(
        self,
        backend: StepBackend,
        active: dict[int, OutputChannel],
        job_id: int,
        request: EngineRequest,
        channel: OutputChannel,
    ) -> None:
        try:
            backend.add(job_id, request)
        except ValueError as exc:
            # The request's own fault (say, too large for the cache): fail it alone (a 400
            # for its client); the socket and the engine carry on.
            error = EngineRequestError(f"the engine cannot run this request: {exc}")
            self._deliver(backend, {job_id: channel}, [(job_id, error)])
            return
        active[job_id] = channel
        self.stats.jobs_added += 1

    def _step(self, backend: StepBackend, active: dict[int, OutputChannel]) -> None:
        try:
            outputs = backend.step()
        except Exception as exc:
            log.exception(
                "%s: step failed; failing its %d active request(s)", self._name, len(active)
            )
            self.stats.step_failures += 1
            error = EngineUnavailable(
                f"engine unavailable: the engine failed ({type(exc).__name__})"
            )
            failed = dict(active)
            active.clear()
            self._deliver(backend, failed, [(job_id, error) for job_id in failed])
            backend.recover()
            return
        self.stats.steps += 1
        if outputs:
            self._deliver(backend, active, outputs)

    def _deliver(
        self,
        backend: StepBackend,
        active: dict[int, OutputChannel],
        outputs: Sequence[tuple[int, Delivery]],
    ) -> None:
        """Push outputs into their channels, pause jobs whose reader lags, wake readers."""
        can_pause = isinstance(backend, PausableBackend)
        wake: list[OutputChannel] = []
        stats = self.stats
        for job_id, item in outputs:
            channel = active.get(job_id)
            if channel is None:
                continue  # cancelled while the step ran
            if not isinstance(item, EngineOutput) or item.finish_reason is not None:
                del active[job_id]
                if isinstance(item, EngineOutput):
                    stats.jobs_finished += 1
            pushed = channel.push(item, can_pause=can_pause)
            stats.outputs += 1
            stats.peak_queued = max(stats.peak_queued, channel.peak)
            if pushed.wake:
                wake.append(channel)
            if pushed.pause:
                assert isinstance(backend, PausableBackend)
                backend.pause(job_id)
                stats.jobs_paused += 1
        if wake:
            self._schedule_wake(wake)

    def _schedule_wake(self, channels: list[OutputChannel]) -> None:
        """One loop callback wakes them all; none is scheduled while one is pending."""
        assert self._loop is not None
        with self._wake_lock:
            self._to_wake.extend(channels)
            if self._wake_scheduled:
                return
            self._wake_scheduled = True
        try:
            self._loop.call_soon_threadsafe(self._wake_waiting)
        except RuntimeError:  # the loop is closed: nobody is waiting any more
            pass
