"""Random event sequences against the session core: its promises hold whatever the order.

A simulated glue does what the actions say (records which requests run, which
terminal sends are pending, which tasks were told to stop); Hypothesis picks the
next event: a frame (request with or without id, invalid request, cancel, close,
malformed JSON), a task finishing, failing or reporting its cancel, a terminal
send completing, the peer leaving, a shutdown and its grace, the timer. Then the
run is driven to its end and checked:

* every request gets exactly one outcome: refused (one error frame), or ended
  once (one terminal frame, or none only when the peer is gone);
* the socket ends exactly once, and nothing is left in flight;
* no more requests run than there are slots, no frame waits for room once the
  socket is torn down, and no state table is broken.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from realtime.dialects.chat.dialect import ChatFrameDialect
from realtime.engine.echo import EchoEngine
from realtime.pipeline import ChatPipeline
from realtime.protocol.errors import EngineUnavailableError, InvalidRequestError
from realtime.session.actions import (
    Action,
    CancelAll,
    CancelRequest,
    EndSocket,
    RequestEnded,
    RequestRefused,
    Send,
    StartRequest,
)
from realtime.session.core import CoreLimits, SessionCore

MAX_CONCURRENT = 2
#: The chat dialect's requests would run on it (the simulated glue never runs one).
PIPELINE = ChatPipeline(EchoEngine(), tool_parser="none", reasoning_parser="none")
TERMINAL_TYPES = ("response.done", "error")


@dataclass
class SimulatedGlue:
    core: SessionCore
    running: list[str] = field(default_factory=list)
    told_to_stop: set[str] = field(default_factory=set)
    pending_sends: list[str] = field(default_factory=list)
    terminal_frames: Counter[str] = field(default_factory=Counter)
    ended: Counter[str] = field(default_factory=Counter)
    refused: Counter[str] = field(default_factory=Counter)
    submitted: list[str] = field(default_factory=list)
    endings: list[EndSocket] = field(default_factory=list)
    frames_after_end: int = 0
    violations: list[str] = field(default_factory=list)
    next_id: int = 0

    def do(self, actions: list[Action]) -> None:
        for action in actions:
            if isinstance(action, Send):
                for frame in action.frames:
                    if self.endings:
                        self.frames_after_end += 1
                    if frame.get("type") in TERMINAL_TYPES and frame.get("request_id"):
                        self.terminal_frames[frame["request_id"]] += 1
                # Waiting for room is wrong once the socket is being torn down.
                assert not (action.wait and self.core.tearing_down), action
                if action.terminal_of is not None:
                    assert action.wait
                    self.pending_sends.append(action.terminal_of)
            elif isinstance(action, StartRequest):
                self.running.append(action.request.id)
            elif isinstance(action, CancelRequest):
                self.told_to_stop.add(action.request.id)
            elif isinstance(action, CancelAll):
                self.told_to_stop.update(self.running)
                # The glue cuts waited sends short: offered, then reported as handed over.
                while self.pending_sends:
                    self.do(self.core.terminal_sent(self.pending_sends.pop(0)))
            elif isinstance(action, RequestEnded):
                self.ended[action.request.id] += 1
            elif isinstance(action, RequestRefused):
                self.refused[action.request_id] += 1
            elif isinstance(action, EndSocket):
                self.endings.append(action)
        assert self.core.slots_used <= MAX_CONCURRENT

    def frame(self, payload: dict[str, Any] | str) -> None:
        text = payload if isinstance(payload, str) else json.dumps(payload)
        command = self.core.dialect.parse(text, self.core)
        self.do(self.core.command(command, now=0.0, received_at=0.0))

    def task_ends(self, request_id: str, how: str) -> None:
        self.running.remove(request_id)
        self.told_to_stop.discard(request_id)
        if how == "cancelled":
            self.do(self.core.request_cancelled(request_id))
        elif how == "completed":
            self.do(self.core.request_completed(request_id))
        elif how == "closing error":
            self.do(self.core.request_failed(request_id, EngineUnavailableError("gone")))
        else:
            self.do(self.core.request_failed(request_id, InvalidRequestError("bad")))

    def settle(self) -> None:
        """Let every task and send finish, as the event loop would."""
        while True:
            if self.pending_sends:
                self.do(self.core.terminal_sent(self.pending_sends.pop(0)))
            elif stopped := [r for r in self.running if r in self.told_to_stop]:
                self.task_ends(stopped[0], "cancelled")
            elif self.running:
                self.task_ends(self.running[0], "completed")
            else:
                return


EVENTS = st.one_of(
    st.tuples(st.just("request"), st.sampled_from(["id", "no id", "invalid", "duplicate"])),
    st.tuples(st.just("cancel"), st.integers(0, 12)),
    st.tuples(
        st.just("task"),
        st.integers(0, 3),
        st.sampled_from(["completed", "error", "closing error", "cancelled"]),
    ),
    st.tuples(st.just("send done"), st.integers(0, 3)),
    st.tuples(
        st.just("socket"),
        st.sampled_from(
            ["session.close", "malformed", "peer gone", "shutdown", "grace over", "slow"]
        ),
    ),
)


def chat(request_id: str | None, **extra: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"model": "echo", "messages": [{"role": "user", "content": "x"}]}
    if request_id is not None:
        body["request_id"] = request_id
    return {**body, **extra}


def apply(glue: SimulatedGlue, event: tuple[Any, ...]) -> None:
    kind = event[0]
    if kind == "request":
        variant = event[1]
        if not glue.core.reading:
            glue.frame(chat("late"))  # read after the end was decided: dropped
            return
        if variant == "duplicate" and glue.core.records:
            glue.frame(chat(next(iter(glue.core.records))))
            return
        request_id = None if variant == "no id" else f"c{glue.next_id}"
        glue.next_id += 1
        before = set(glue.core.records)
        glue.frame(
            chat(request_id, temperature="hot") if variant == "invalid" else chat(request_id)
        )
        new = set(glue.core.records) - before
        glue.submitted += sorted(new) or ([request_id] if request_id else [])
    elif kind == "cancel":
        glue.frame({"type": "response.cancel", "request_id": f"c{event[1]}"})
    elif kind == "task" and glue.running:
        request_id = glue.running[event[1] % len(glue.running)]
        how = event[2]
        if how == "cancelled" and request_id not in glue.told_to_stop:
            how = "completed"  # a task reports a cancel only when it was cancelled
        glue.task_ends(request_id, how)
    elif kind == "send done" and glue.pending_sends:
        glue.do(glue.core.terminal_sent(glue.pending_sends.pop(event[1] % len(glue.pending_sends))))
    elif kind == "socket":
        what = event[1]
        if what == "session.close":
            glue.frame({"type": "session.close"})
        elif what == "malformed":
            glue.frame("{oops")
        elif what == "peer gone":
            glue.do(glue.core.peer_gone())
        elif what == "shutdown":
            glue.do(glue.core.shutdown_started())
        elif what == "grace over":  # the hub ends the grace only of a shutdown it began
            glue.do(glue.core.shutdown_started())
            glue.do(glue.core.shutdown_grace_over())
        else:
            glue.do(glue.core.timer_fired(9.0, sending_since=0.0, outbox_idle=False, last_sent=0.0))


@settings(max_examples=400, deadline=None, derandomize=True, database=None)
@given(st.lists(EVENTS, max_size=40), st.integers(1, 6))
def test_every_request_gets_one_outcome_and_the_socket_ends_once(
    events: list[tuple[Any, ...]], max_in_flight: int
) -> None:
    violations: list[str] = []

    def violation(machine: str, exc: Exception) -> None:
        violations.append(f"{machine}: {exc}")

    core = SessionCore(
        ChatFrameDialect(PIPELINE, model_name="echo", session_id="s", on_violation=violation),
        CoreLimits(
            max_concurrent=MAX_CONCURRENT,
            max_in_flight=max_in_flight,
            queue_size=2,
            read_ahead=1,
            slow_consumer_seconds=5.0,
        ),
        on_violation=violation,
    )
    glue = SimulatedGlue(core)
    for event in events:
        apply(glue, event)
    glue.settle()
    if not glue.endings:
        glue.frame({"type": "session.close"})
        glue.settle()

    assert violations == []
    assert len(glue.endings) == 1 and glue.frames_after_end == 0
    assert glue.ended["late"] == 0 and glue.terminal_frames["late"] == 0
    assert core.records == {} and core.slots_used == 0 and core.queue_depth == 0
    peer_gone = glue.endings[0].code is None
    for request_id in glue.submitted:
        if glue.refused[request_id]:
            assert glue.refused[request_id] == 1 and glue.ended[request_id] == 0
            assert glue.terminal_frames[request_id] == 1
            continue
        assert glue.ended[request_id] == 1, request_id
        if peer_gone:
            assert glue.terminal_frames[request_id] <= 1
        else:
            assert glue.terminal_frames[request_id] == 1, request_id
