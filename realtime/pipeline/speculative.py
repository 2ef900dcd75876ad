"""Speculative next-turn prefill: compute the next turn's prefix while the client thinks.

When a request sets `nvext.agent_hints.speculative_prefill: true`, the pipeline hands
its finished answer to `SpeculativePrefill.schedule` just before the final chunk. A
background task then renders the prefix every next turn will start with
(`realtime.chat.next_turn`), tokenizes it, and runs it through the engine as a
`max_tokens=1` request at `BACKGROUND_PRIORITY`, under the same `cache_salt` and
session, so its KV lands in the engine's prefix cache. When the client's next turn
arrives, only its new messages are prefilled. This follows NVIDIA Dynamo's agent
hint, with one difference: the answer is rendered as the template renders it *once
another message follows* (see `next_turn.py`), so e.g. stripped `<think>` blocks match.

Why it cannot slow anyone down:

- it only runs on engines that defer background work behind normal requests
  (`schedules_background`); there, a request arriving mid-warm-up waits for at most
  the chunk already running, and the CPU engine hands a warm-up's work over to the
  turn it was warming;
- each warm-up has a deadline (`timeout`); a session has at most one pending (a newer
  answer cancels the older warm-up); at most `max_pending` run at once (the oldest
  goes); `end_session` and `aclose` cancel them;
- without the hint nothing here runs at all.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections import deque
from contextlib import aclosing
from dataclasses import dataclass, field

from realtime.chat.conversation import TemplateInput, answer_items, template_messages
from realtime.chat.next_turn import next_turn_prefix
from realtime.engine.base import (
    BACKGROUND_PRIORITY,
    Engine,
    EngineRequest,
    SamplingParams,
    StopConditions,
    schedules_background,
)
from realtime.engine.errors import GenerationError
from realtime.model.generation import FinishReason
from realtime.protocol.output import ParsedOutput

log = logging.getLogger("realtime.speculative")

#: Warm-up records kept for tests and debugging.
RECORDS_KEPT = 64


@dataclass(frozen=True, slots=True)
class NextTurn:
    """A finished turn whose client asked for its next turn to be warmed."""

    completion_id: str
    conversation: TemplateInput
    answer: ParsedOutput
    cache_salt: str | None
    session_id: str | None


@dataclass(frozen=True, slots=True)
class WarmupRecord:
    """How one warm-up went. `outcome`: completed, preempted (the next turn took its
    work over), cancelled, timed_out, failed or skipped (nothing to render)."""

    request_id: str
    session_id: str | None
    prompt_tokens: int
    #: prompt tokens the engine already had (None when it never reported)
    cached_tokens: int | None
    outcome: str


@dataclass
class WarmupStats:
    """Counters for tests and metrics."""

    scheduled: int = 0
    #: engine requests sent
    started: int = 0
    completed: int = 0
    preempted: int = 0
    cancelled: int = 0
    timed_out: int = 0
    failed: int = 0
    skipped: int = 0
    #: prompt tokens completed warm-ups computed (their prefixes minus what was cached)
    tokens_warmed: int = 0
    recent: deque[WarmupRecord] = field(default_factory=lambda: deque(maxlen=RECORDS_KEPT))


class SpeculativePrefill:
    """Schedules, bounds and cancels the warm-ups of one pipeline."""

    def __init__(self, engine: Engine, *, timeout: float = 30.0, max_pending: int = 8):
        if timeout < 0:
            raise ValueError(f"the speculative timeout must be >= 0, got {timeout}")
        if max_pending < 1:
            raise ValueError(f"max_pending must be at least 1, got {max_pending}")
        self.engine = engine
        self.timeout = timeout
        self.max_pending = max_pending
        self.stats = WarmupStats()
        #: warm-ups counted against max_pending, oldest first
        self._tasks: dict[asyncio.Task[None], NextTurn] = {}
        #: every task not yet done (including ones cancelled for room)
        self._live: set[asyncio.Task[None]] = set()
        self._by_session: dict[str, asyncio.Task[None]] = {}
        self._closed = False

    @property
    def enabled(self) -> bool:
        """Whether hinted requests get a warm-up (timeout 0 turns the feature off)."""
        return self.timeout > 0 and not self._closed and schedules_background(self.engine)

    @property
    def pending(self) -> int:
        return len(self._live)

    def schedule(self, turn: NextTurn) -> None:
        """Start the warm-up for `turn` in the background (never blocks, never raises)."""
        if not self.enabled:
            return
        if turn.session_id is not None:
            self.cancel_session(turn.session_id)  # superseded by this newer answer
        while len(self._tasks) >= self.max_pending:
            oldest = next(iter(self._tasks))
            del self._tasks[oldest]  # no longer counts; its callback still accounts for it
            oldest.cancel()
        task = asyncio.get_running_loop().create_task(
            self._run(turn), name=f"warmup-{turn.completion_id}"
        )
        self._tasks[task] = turn
        self._live.add(task)
        if turn.session_id is not None:
            self._by_session[turn.session_id] = task
        task.add_done_callback(functools.partial(self._done, turn))
        self.stats.scheduled += 1

    def cancel_session(self, session_id: str) -> None:
        """Cancel the session's pending warm-up, if any."""
        task = self._by_session.pop(session_id, None)
        if task is not None:
            task.cancel()

    async def idle(self) -> None:
        """Wait until no warm-up is pending (tests and benchmarks use it)."""
        while self._live:
            await asyncio.wait(list(self._live))

    async def aclose(self) -> None:
        """Cancel every pending warm-up and wait for them to end; schedule no more."""
        self._closed = True
        tasks = list(self._live)
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.wait(tasks)

    # --- the background task ---

    def _done(self, turn: NextTurn, task: asyncio.Task[None]) -> None:
        self._tasks.pop(task, None)
        self._live.discard(task)
        if turn.session_id is not None and self._by_session.get(turn.session_id) is task:
            del self._by_session[turn.session_id]
        request_id = f"{turn.completion_id}-next"
        if task.cancelled():
            # Counted here, not in `_run`: a task cancelled before it ran never entered it.
            self.stats.cancelled += 1
            self._record(request_id, turn.session_id, 0, None, "cancelled")
            return
        error = task.exception()
        if error is not None:  # a bug, not an engine fault (those end as "failed" in `_warm`)
            log.error("speculative prefill %s crashed", request_id, exc_info=error)
            self.stats.failed += 1
            self._record(request_id, turn.session_id, 0, None, "failed")

    async def _run(self, turn: NextTurn) -> None:
        try:
            await asyncio.wait_for(self._warm(turn), self.timeout)
        except asyncio.TimeoutError:
            self.stats.timed_out += 1
            self._record(f"{turn.completion_id}-next", turn.session_id, 0, None, "timed_out")

    async def _warm(self, turn: NextTurn) -> None:
        await asyncio.sleep(0)  # the final chunk goes out before the rendering work
        info = self.engine.info
        request_id = f"{turn.completion_id}-next"
        tokens = self._prefix_tokens(turn)
        if not tokens or len(tokens) >= info.context_length:
            self.stats.skipped += 1
            self._record(request_id, turn.session_id, len(tokens), None, "skipped")
            return
        request = EngineRequest(
            request_id,
            tokens,
            SamplingParams(temperature=0.0),
            StopConditions(max_tokens=1, ignore_eos=True),
            cache_salt=turn.cache_salt,
            session_id=turn.session_id,
            priority=BACKGROUND_PRIORITY,
        )
        self.stats.started += 1
        cached: int | None = None
        finish: FinishReason | None = None
        try:
            async with aclosing(self.engine.generate(request)) as outputs:
                async for out in outputs:
                    if out.cached_tokens is not None:
                        cached = out.cached_tokens
                    if out.finish_reason is not None:
                        finish = out.finish_reason
                        break
        except GenerationError as exc:
            log.info("speculative prefill %s failed: %s", request_id, exc)
            finish = FinishReason.ERROR
        if finish is FinishReason.CANCELLED:
            self.stats.preempted += 1
            outcome = "preempted"
        elif finish is None or finish is FinishReason.ERROR:
            self.stats.failed += 1
            outcome = "failed"
        else:
            self.stats.completed += 1
            self.stats.tokens_warmed += len(tokens) - (cached or 0)
            outcome = "completed"
        self._record(request_id, turn.session_id, len(tokens), cached, outcome)

    def _prefix_tokens(self, turn: NextTurn) -> list[int]:
        info = self.engine.info
        conversation = turn.conversation
        [answer] = template_messages(answer_items(turn.answer))
        text = next_turn_prefix(
            info.chat_template,
            conversation.messages,
            answer,
            tools=conversation.tools,
            template_kwargs=conversation.kwargs,
        )
        return info.tokenizer.encode(text) if text else []

    def _record(
        self,
        request_id: str,
        session_id: str | None,
        prompt_tokens: int,
        cached: int | None,
        outcome: str,
    ) -> None:
        self.stats.recent.append(
            WarmupRecord(request_id, session_id, prompt_tokens, cached, outcome)
        )
