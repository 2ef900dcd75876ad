"""Background responses without I/O: the state table, the bounded event log and its resume
checks, the admission limits (the runs are `tests/http/test_background_runs.py`)."""

from __future__ import annotations

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
from realtime.dialects.responses.errors import (
    EventsNotKeptError,
    StartingAfterError,
    TooManyBackgroundResponsesError,
)


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
