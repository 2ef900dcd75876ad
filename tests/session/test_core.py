"""The session core driven by events, its actions read back: no sockets, no event loop.

The dialect is the real chat-frame one (pure too), so the frames asserted here
are the frames a client gets.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

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
    ResumeReading,
    Send,
    StartRequest,
    StopReading,
)
from realtime.session.core import CoreLimits, SessionCore

VIOLATIONS: list[str] = []
#: The chat dialect's requests would run on it (the core never runs one).
PIPELINE = ChatPipeline(EchoEngine(), tool_parser="none", reasoning_parser="none")


@pytest.fixture(autouse=True)
def no_state_violations() -> Iterator[None]:
    VIOLATIONS.clear()
    yield
    assert VIOLATIONS == [], "a state table was broken"


def make_core(**limits: Any) -> SessionCore:
    def violation(machine: str, exc: Exception) -> None:
        VIOLATIONS.append(f"{machine}: {exc}")

    dialect = ChatFrameDialect(
        PIPELINE, model_name="echo", session_id="sess_t", on_violation=violation
    )
    return SessionCore(dialect, CoreLimits(**limits), on_violation=violation)


def frame(core: SessionCore, payload: dict[str, Any] | str, now: float = 0.0) -> list[Action]:
    """What the reader does with one text frame."""
    text = payload if isinstance(payload, str) else json.dumps(payload)
    return core.command(core.dialect.parse(text, core), now=now, received_at=0.0)


def chat(request_id: str | None = None, **extra: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"model": "echo", "messages": [{"role": "user", "content": "hi"}]}
    if request_id is not None:
        body["request_id"] = request_id
    return {**body, **extra}


def cancel(request_id: str) -> dict[str, Any]:
    return {"type": "response.cancel", "request_id": request_id}


def started(actions: list[Action]) -> list[str]:
    return [a.request.id for a in actions if isinstance(a, StartRequest)]


def sent(actions: list[Action]) -> list[dict[str, Any]]:
    return [f for a in actions if isinstance(a, Send) for f in a.frames]


def only(actions: list[Action], kind: type) -> Any:
    (found,) = [a for a in actions if isinstance(a, kind)]
    return found


def finish(core: SessionCore, request_id: str) -> list[Action]:
    """The request's task completed and its terminal frame was handed over."""
    actions = core.request_completed(request_id)
    send = only(actions, Send)
    assert send.terminal_of == request_id and send.wait
    return actions + core.terminal_sent(request_id)


CANCELLED_UNSTARTED = {
    "type": "response.done",
    "id": None,
    "status": "cancelled",
    "finish_reason": None,
    "usage": None,
}


def test_a_request_with_an_id_starts_at_once() -> None:
    core = make_core()
    actions = frame(core, chat("a"))
    assert started(actions) == ["a"] and core.records["a"].state == "running"
    done = finish(core, "a")
    assert sent(done)[0]["type"] == "response.done" and sent(done)[0]["status"] == "completed"
    assert only(done, RequestEnded).status == "completed"
    assert core.records == {} and core.slots_used == 0


def test_requests_without_an_id_run_one_at_a_time_in_order() -> None:
    core = make_core()
    assert started(frame(core, chat())) == ["req_1"]
    assert started(frame(core, chat())) == []  # it holds a slot, waiting for req_1
    assert core.records["req_2"].state == "waiting" and core.slots_used == 2
    actions = core.request_completed("req_1")
    assert started(actions) == []  # not before req_1's terminal frame is handed over
    assert started(core.terminal_sent("req_1")) == ["req_2"]


def test_requests_with_ids_run_concurrently_up_to_the_slots() -> None:
    core = make_core(max_concurrent=2)
    assert [started(frame(core, chat(r))) for r in "abc"] == [["a"], ["b"], []]
    assert core.records["c"].state == "queued"
    assert started(finish(core, "a")) == ["c"]


def test_the_reader_pauses_when_queue_and_read_ahead_are_full_and_resumes_on_room() -> None:
    core = make_core(max_concurrent=1, queue_size=1, read_ahead=1)
    frame(core, chat("run"))
    frame(core, chat("hand"))  # in the dispatcher's hand: not counted
    assert core.queue_depth == 0 and not core.read_paused
    frame(core, chat("q"))
    frame(core, chat("ahead"))
    assert core.queue_depth == 2 and core.read_paused and core.max_queue_depth == 2
    actions = frame(core, cancel("ahead"))  # a queued request with an id: answered now
    assert any(isinstance(a, ResumeReading) for a in actions)
    assert sent(actions) == [{**CANCELLED_UNSTARTED, "request_id": "ahead"}]
    assert only(actions, RequestEnded).cause == "client"
    assert not core.read_paused


def test_a_cancel_of_a_queued_request_in_order_is_answered_in_its_turn() -> None:
    core = make_core()
    frame(core, chat())
    frame(core, chat())
    assert frame(core, cancel("req_2")) == []
    actions = finish(core, "req_1")
    assert started(actions) == []  # never run
    assert sent(actions)[-1] == {**CANCELLED_UNSTARTED, "request_id": "req_2"}
    assert core.records["req_2"].state == "cancelled"  # answered; in flight until handed over
    core.terminal_sent("req_2")
    assert core.records == {}


def test_a_cancel_of_a_running_request_cancels_its_task_then_answers_it() -> None:
    core = make_core()
    (start,) = frame(core, chat("a"))
    assert frame(core, cancel("a")) == [CancelRequest(start.request)]
    actions = core.request_cancelled("a")
    send = only(actions, Send)
    assert send.frames == ({**CANCELLED_UNSTARTED, "request_id": "a"},) and send.wait
    assert frame(core, cancel("a")) == []  # answered: a second cancel changes nothing
    core.terminal_sent("a")
    assert frame(core, cancel("a")) == [] and core.records == {}


def test_a_duplicate_id_and_a_request_over_the_in_flight_limit_are_refused() -> None:
    core = make_core(max_in_flight=1)
    frame(core, chat("a"))
    dup = sent(frame(core, chat("a")))
    assert dup[0]["request_id"] is None and dup[0]["error"]["code"] == "duplicate_request_id"
    actions = frame(core, chat("b"))
    assert only(actions, RequestRefused).request_id == "b"
    assert sent(actions)[0]["error"]["code"] == "too_many_requests_in_flight"
    assert list(core.records) == ["a"]


def test_an_invalid_request_is_answered_in_its_turn_and_never_runs() -> None:
    core = make_core()
    frame(core, chat())
    actions = frame(core, chat(temperature="hot"))
    assert started(actions) == [] and sent(actions) == []
    core.request_completed("req_1")
    actions = core.terminal_sent("req_1")
    assert started(actions) == []
    error = only(actions, Send)
    assert error.terminal_of == "req_2" and error.frames[0]["type"] == "error"
    assert error.frames[0]["error"]["param"] == "temperature"
    assert only(actions, RequestEnded).status == "error"


def test_session_close_stops_reading_finishes_the_work_then_closes_1000() -> None:
    core = make_core()
    frame(core, chat("a"))
    actions = frame(core, {"type": "session.close"})
    assert actions == [StopReading()] and not core.reading and core.state == "draining"
    actions = finish(core, "a")
    assert CancelAll() in actions
    assert only(actions, EndSocket) == EndSocket(1000, "session closed", 5.0)
    assert core.state == "closing"
    core.close_sent()
    assert core.state == "closed"


def test_a_fault_cancels_the_running_then_answers_the_queued_then_closes() -> None:
    core = make_core(max_concurrent=1)
    frame(core, chat("run"))
    frame(core, chat("queued"))
    actions = frame(core, "{not json")
    assert actions == [CancelAll()] and core.state == "closing"
    actions = core.request_cancelled("run")
    frames = [(a.frames[0]["request_id"], a.wait) for a in actions if isinstance(a, Send)]
    assert frames == [("run", False), ("queued", False)]  # offered: no waiting while closing
    assert [a.cause for a in actions if isinstance(a, RequestEnded)] == [
        "server_close",
        "server_close",
    ]
    end = only(actions, EndSocket)
    assert end.code == 1007 and "malformed JSON" in end.reason


def test_a_binary_frame_closes_1003_at_once_when_nothing_is_in_flight() -> None:
    core = make_core()
    command = core.dialect.parse_binary(b"\x00")
    actions = core.command(command, now=0.0, received_at=0.0)
    assert only(actions, EndSocket).code == 1003


def test_the_peer_gone_abandons_everything_and_sends_nothing() -> None:
    core = make_core(max_concurrent=1)
    frame(core, chat("run"))
    frame(core, chat("queued"))
    assert core.peer_gone() == [CancelAll()]
    actions = core.request_cancelled("run")
    assert sent(actions) == []
    assert [a.cause for a in actions if isinstance(a, RequestEnded)] == ["disconnect"] * 2
    assert only(actions, EndSocket) == EndSocket(None)
    assert core.state == "closed" and core.records == {}


def test_a_shutdown_refuses_new_requests_and_closes_1001_once_all_are_answered() -> None:
    core = make_core()
    frame(core, chat("a"))
    assert core.shutdown_started() == [] and core.state == "shutting_down"
    refused = sent(frame(core, chat("late")))
    assert refused[0]["error"]["code"] == "shutting_down"
    assert frame(core, cancel("nope")) == []  # still reading: cancels act
    end = only(finish(core, "a"), EndSocket)
    assert end == EndSocket(1001, "server shutting down", 5.0)


def test_the_end_of_the_shutdown_grace_cancels_and_closes_1001() -> None:
    core = make_core()
    frame(core, chat("a"))
    core.shutdown_started()
    assert core.shutdown_grace_over() == [CancelAll()]
    actions = core.request_cancelled("a")
    assert only(actions, RequestEnded).cause == "shutdown"
    assert only(actions, EndSocket) == EndSocket(1001, "server shutting down", 2.0)


def test_a_drain_can_be_cut_short_once() -> None:
    core = make_core()
    frame(core, chat("a"))
    frame(core, {"type": "session.close"})
    assert core.shutdown_grace_over() == [CancelAll()]
    assert core.peer_gone() == []  # the first interruption stands
    assert only(core.request_cancelled("a"), EndSocket).code == 1001


def test_an_error_that_ends_the_socket_offers_its_frame_and_closes_with_its_code() -> None:
    core = make_core(max_concurrent=1)
    frame(core, chat("a"))
    frame(core, chat("b"))
    actions = core.request_failed("a", EngineUnavailableError("engine gone"))
    assert started(actions) == []  # "b" does not start in the slot "a" frees
    send = only(
        [a for a in actions if isinstance(a, Send) and a.frames[0]["type"] == "error"], Send
    )
    assert send.frames[0]["request_id"] == "a" and not send.wait
    assert only(actions, EndSocket).code == 1011


def test_an_error_that_keeps_the_socket_is_a_waited_terminal_frame() -> None:
    core = make_core()
    frame(core, chat("a"))
    actions = core.request_failed("a", InvalidRequestError("too long", param="messages"))
    send = only(actions, Send)
    assert send.wait and send.terminal_of == "a" and send.frames[0]["error"]["param"] == "messages"
    assert core.terminal_sent("a") == [] and core.state == "open"


def test_the_timer_closes_an_idle_socket() -> None:
    core = make_core(idle_timeout_seconds=10.0)
    frame(core, chat("a"), now=1.0)
    assert core.timer_fired(20.0, sending_since=None, outbox_idle=True, last_sent=None) == []
    finish(core, "a")
    assert core.timer_fired(10.5, sending_since=None, outbox_idle=True, last_sent=5.0) == []
    actions = core.timer_fired(15.0, sending_since=None, outbox_idle=True, last_sent=5.0)
    assert only(actions, EndSocket) == EndSocket(1000, "idle timeout", 5.0)


def test_the_timer_warns_then_expires_a_long_session() -> None:
    core = make_core(max_session_seconds=60.0, session_expiry_grace_seconds=5.0)
    assert core.timer_fired(59.0, sending_since=None, outbox_idle=True, last_sent=None) == []
    (warning,) = core.timer_fired(60.0, sending_since=None, outbox_idle=True, last_sent=None)
    assert isinstance(warning, Send) and warning.frames[0]["type"] == "session.expiring"
    assert core.state == "expiring"
    actions = core.timer_fired(65.0, sending_since=None, outbox_idle=True, last_sent=None)
    assert only(actions, EndSocket) == EndSocket(1000, "session expired", 5.0)


def test_the_timer_drops_a_slow_consumer_without_a_flush() -> None:
    core = make_core(slow_consumer_seconds=2.0)
    assert core.timer_fired(3.0, sending_since=1.5, outbox_idle=False, last_sent=None) == []
    actions = core.timer_fired(3.0, sending_since=1.0, outbox_idle=False, last_sent=None)
    end = only(actions, EndSocket)
    assert end.code == 1008 and end.flush_seconds == 0.0 and "slow consumer" in end.reason


def test_a_request_cancelled_before_its_task_ran_is_answered_once() -> None:
    core = make_core()
    frame(core, chat("a"))
    frame(core, cancel("a"))
    first = core.request_cancelled("a")
    assert len(sent(first)) == 1
    assert core.request_cancelled("a") == []  # the task's own report, later: already answered
    assert core.request_completed("a") == []


def test_session_setup_is_answered_without_starting_a_request() -> None:
    core = make_core()
    actions = frame(core, {"type": "session.setup", "model": "echo", "defaults": {"seed": 1}})
    (ready,) = actions
    assert isinstance(ready, Send) and ready.kind == "ready"
    assert ready.frames[0]["type"] == "session.ready" and ready.frames[0]["session_id"] == "sess_t"
    (start,) = frame(core, {"messages": [{"role": "user", "content": "hi"}], "request_id": "a"})
    assert start.request.request.seed == 1  # inherited from the session's defaults
