"""Background responses (`background: true`) without I/O: their states, the event log a
stream resumes from, and the limits on how many run.

A background response is stored first at status `queued` (so a poll finds it), then
runs detached from the request that created it (`realtime/http/background_runs.py`):

    queued -> in_progress -> completed | incomplete | failed
    queued | in_progress -> cancelled   (POST /v1/responses/{id}/cancel)
    queued | in_progress -> failed      (the server shut down, or restarted, first)

Each change of status is stored. Its events are numbered as every response's are
(`sequence_number` from 0: `response.created` and `response.queued` at `queued`,
then the run's own), and kept in an `EventLog` of at most `max_events` (the
oldest go first), from which `GET /v1/responses/{id}?stream=true&starting_after=N`
replays the events after N and then follows the live ones.
"""

from __future__ import annotations

import bisect
from collections import Counter
from dataclasses import dataclass
from typing import Any

from realtime.dialects.responses.errors import (
    EventsNotKeptError,
    StartingAfterError,
    TooManyBackgroundResponsesError,
)

#: The status changes a background response makes, as a table: from -> the statuses it
#: may move to. A status with no row is final.
TRANSITIONS: dict[str, frozenset[str]] = {
    "queued": frozenset({"in_progress", "cancelled", "failed"}),
    "in_progress": frozenset({"completed", "incomplete", "failed", "cancelled"}),
}
#: The statuses of a background response that has not ended.
UNFINISHED = frozenset(TRANSITIONS)
#: Events of one background response kept for resuming its stream, by default: about
#: 0.45 kB each in memory (a text delta), so at most about 1.8 MB a response, and about
#: 230 MB for the default limits' 64 running and 64 ended ones all that long.
DEFAULT_MAX_EVENTS = 4096
#: Background responses queued or running at once, by default: on the server, per key.
DEFAULT_MAX_TOTAL = 64
DEFAULT_MAX_PER_KEY = 16


def can_move(status: str, to: str) -> bool:
    """Whether a background response at `status` may move to `to`."""
    return to in TRANSITIONS.get(status, frozenset())


def is_unfinished(response: dict[str, Any]) -> bool:
    return response.get("status") in UNFINISHED


class EventLog:
    """One background response's events, numbered and bounded: at most `max_events`
    are kept (the oldest are dropped first), so a long answer costs a bounded memory.
    `close()` marks the end: no event follows."""

    def __init__(self, max_events: int = DEFAULT_MAX_EVENTS) -> None:
        if max_events < 1:
            raise ValueError("max_events must be at least 1")
        self.max_events = max_events
        self._events: list[dict[str, Any]] = []
        #: The index of the first kept event in `_events` (dropped ones are compacted away
        #: in batches, so appending stays O(1) amortized).
        self._start = 0
        self.done = False

    def __len__(self) -> int:
        return len(self._events) - self._start

    @property
    def first(self) -> int | None:
        """The sequence number of the oldest event kept (None: none yet)."""
        return self._events[self._start]["sequence_number"] if len(self) else None

    @property
    def last(self) -> int:
        """The sequence number of the newest event (-1: none yet)."""
        return int(self._events[-1]["sequence_number"]) if len(self) else -1

    def append(self, event: dict[str, Any]) -> None:
        if self.done:
            raise RuntimeError("the event log is closed")
        self._events.append(event)
        if len(self) > self.max_events:
            self._start += 1
            if self._start > self.max_events:
                del self._events[: self._start]
                self._start = 0

    def close(self) -> None:
        self.done = True

    def check(self, after: int | None, response_id: str) -> None:
        """Refuse a resume `after` a number this log cannot serve (400): one past its
        newest event (no client has seen it), or one whose next events were dropped."""
        if after is None:
            after = -1
        if after > self.last:
            raise StartingAfterError(
                f"starting_after: {after} is past the last event of response"
                f" '{response_id}' so far ({self.last})"
            )
        first = self.first
        if first is not None and after + 1 < first:
            raise EventsNotKeptError(
                f"the events of response '{response_id}' before sequence number {first}"
                f" are no longer kept (the last {self.max_events} are); resume with"
                f" starting_after >= {first - 1}, or retrieve it without stream",
                param="starting_after",
            )

    def since(self, after: int | None, response_id: str) -> list[dict[str, Any]]:
        """The kept events numbered above `after` (None: all), oldest first; raises as
        `check` does when they cannot be served."""
        self.check(after, response_id)
        if after is None:
            return self._events[self._start :]
        index = bisect.bisect_right(
            self._events, after, lo=self._start, key=lambda event: event["sequence_number"]
        )
        return self._events[index:]


@dataclass(frozen=True, slots=True)
class BackgroundLimits:
    #: Background responses queued or running at once on this server.
    total: int = DEFAULT_MAX_TOTAL
    #: ... and per key (its owner fingerprint; an open server's callers are one key).
    per_key: int = DEFAULT_MAX_PER_KEY


class Admission:
    """How many background responses run, in all and per owner; one over a limit is
    refused (429) before any work is done."""

    def __init__(self, limits: BackgroundLimits) -> None:
        self.limits = limits
        self._by_owner: Counter[str | None] = Counter()
        self.total = 0

    def running(self, owner: str | None) -> int:
        return self._by_owner[owner]

    def admit(self, owner: str | None) -> None:
        """Count one more for `owner`; raises TooManyBackgroundResponsesError at a limit."""
        limits = self.limits
        if self.total >= limits.total:
            raise TooManyBackgroundResponsesError(
                f"this server already runs {limits.total} background responses, its limit;"
                " retry when one has ended"
            )
        if self._by_owner[owner] >= limits.per_key:
            raise TooManyBackgroundResponsesError(
                f"this API key already has {limits.per_key} background responses queued or"
                " running, its limit; retry when one has ended (or cancel one)"
            )
        self._by_owner[owner] += 1
        self.total += 1

    def release(self, owner: str | None) -> None:
        self._by_owner[owner] -= 1
        if self._by_owner[owner] <= 0:
            del self._by_owner[owner]
        self.total -= 1
