"""One request's outputs on their way from the model thread to the event loop, bounded.

The model thread pushes; the request's consumer (`ThreadedEngineCore.generate`, on the
event loop) takes. Both sides hold the channel's lock for a few list operations only,
so the model thread never waits for a consumer.

The bound: once `limit` outputs wait unread, the channel asks for the job to be
*paused* (a backend that can pause, the CPU engine, then leaves that sequence out of
its batches; the others keep running). When the consumer has read the queue down to
half the limit, it asks for a *resume*. A backend that cannot pause (exllamav2) keeps
producing; its outputs are then folded into the last waiting one, so the queue's
length stays bounded while the token ids (at most `max_tokens` of them) are kept.

With `merge` (the CPU engine), a consumer takes everything queued at once, merged into
one output, so a loaded event loop handles fewer, larger outputs.

Waking the consumer is the core's job: `push` says whether the consumer is waiting,
and the core wakes all such consumers with one event-loop callback per batch of steps.
"""

from __future__ import annotations

import asyncio
import threading
from collections import deque
from dataclasses import dataclass

from realtime.engine.base import EngineOutput

#: Outputs that may wait unread per request before its job is paused (or folded).
OUTPUT_QUEUE_LIMIT = 64

Delivery = EngineOutput | BaseException


@dataclass(frozen=True, slots=True)
class Pushed:
    """What the model thread must do after a push."""

    #: the consumer is waiting: wake it
    wake: bool
    #: the queue just reached its limit: pause the job
    pause: bool


class OutputChannel:
    """A bounded queue of one request's outputs; see the module docs for the protocol."""

    __slots__ = (
        "_items",
        "_lock",
        "folded",
        "limit",
        "merge",
        "paused",
        "peak",
        "resume_asked",
        "waiter",
    )

    def __init__(self, limit: int = OUTPUT_QUEUE_LIMIT, *, merge: bool = False):
        if limit < 1:
            raise ValueError(f"the output queue limit must be at least 1, got {limit}")
        self.limit = limit
        #: `take` merges everything queued into one output
        self.merge = merge
        self._lock = threading.Lock()
        self._items: deque[Delivery] = deque()
        #: set (under the lock) by a consumer that found the queue empty
        self.waiter: asyncio.Future[None] | None = None
        #: the job is paused because this queue reached its limit
        self.paused = False
        #: the consumer has asked for a resume that the model thread has not handled yet
        self.resume_asked = False
        #: outputs merged into the one before them (backends that cannot pause)
        self.folded = 0
        #: the most outputs that ever waited at once
        self.peak = 0

    def __len__(self) -> int:
        return len(self._items)

    # --- model thread ---

    def push(self, item: Delivery, *, can_pause: bool) -> Pushed:
        """Queue one output (or the error that ends the request)."""
        pause = False
        with self._lock:
            items = self._items
            last = items[-1] if items else None
            if (
                len(items) >= self.limit
                and not can_pause
                and isinstance(item, EngineOutput)
                and isinstance(last, EngineOutput)
                and last.finish_reason is None
            ):
                items[-1] = merge_outputs(last, item)
                self.folded += 1
            else:
                items.append(item)
            final = not isinstance(item, EngineOutput) or item.finish_reason is not None
            if can_pause and not final and not self.paused and len(items) >= self.limit:
                self.paused = pause = True
            self.peak = max(self.peak, len(items))
            return Pushed(self.waiter is not None, pause)

    def resumed(self) -> None:
        """The model thread resumed the job."""
        with self._lock:
            self.paused = False
            self.resume_asked = False

    # --- event loop ---

    def take(self, loop: asyncio.AbstractEventLoop) -> tuple[Delivery | None, bool]:
        """(the next output; whether to ask for a resume now), or (None, False) after
        arming `waiter` when nothing is queued.

        With `merge`, the outputs that queued up while the consumer was busy come out as
        one, so a consumer that lags pays its per-output costs (a chunk, a write) once
        per batch of tokens rather than once per token. An error is never merged: the
        outputs before it come first.
        """
        with self._lock:
            items = self._items
            if not items:
                self.waiter = loop.create_future()
                return None, False
            item = items.popleft()
            while (
                self.merge
                and isinstance(item, EngineOutput)
                and item.finish_reason is None
                and items
            ):
                following = items[0]
                if not isinstance(following, EngineOutput):
                    break
                items.popleft()
                item = merge_outputs(item, following)
            resume = self.paused and not self.resume_asked and len(items) <= self.limit // 2
            if resume:
                self.resume_asked = True
            return item, resume

    async def wait(self) -> None:
        """Wait until `notify` (after a `take` that found nothing)."""
        waiter = self.waiter
        assert waiter is not None
        try:
            await waiter
        finally:
            with self._lock:
                self.waiter = None

    def notify(self) -> None:
        """Wake a waiting consumer (on the event loop); harmless when nobody waits."""
        waiter = self.waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def fail(self, error: BaseException) -> None:
        """End the request with `error` (on the event loop: shutdown)."""
        with self._lock:
            self._items.append(error)
        self.notify()


def merge_outputs(first: EngineOutput, second: EngineOutput) -> EngineOutput:
    """One output carrying `first`'s tokens then `second`'s (`second` may be the last)."""
    logprobs = None
    cached = first.cached_tokens if first.cached_tokens is not None else second.cached_tokens
    if first.logprobs is not None and second.logprobs is not None:
        logprobs = first.logprobs + second.logprobs
    return EngineOutput(
        first.token_ids + second.token_ids,
        logprobs,
        second.finish_reason,
        cached_tokens=cached,
        error=second.error,
        error_part=second.error_part,
        stopped_on_token=second.stopped_on_token,
    )
