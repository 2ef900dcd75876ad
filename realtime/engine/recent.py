"""Bounded records of the most recent requests, for the counters tests and demos read.

Why bounded: the echo and scripted engines record per request (tokens generated,
prompts, replies) so that a test can prove what a request did. Kept forever, one
small entry per request is a leak a long-running server pays for: about 1.9 MiB
a minute at 160 requests/s. Only the latest requests are ever asked about, so
each record keeps the newest `limit` entries and forgets the oldest.
"""

from __future__ import annotations

from typing import TypeVar

K = TypeVar("K")
V = TypeVar("V")

#: Requests remembered per record: far more than any test looks back.
RECENT_REQUESTS = 1024


class RecentDict(dict[K, V]):
    """A dict that keeps its `limit` most recently added keys (updates keep their place)."""

    def __init__(self, limit: int = RECENT_REQUESTS) -> None:
        super().__init__()
        self.limit = limit

    def __setitem__(self, key: K, value: V) -> None:
        if key not in self and len(self) >= self.limit:
            del self[next(iter(self))]
        super().__setitem__(key, value)


class RecentList(list[V]):
    """A list that keeps its `limit` most recently appended items (oldest dropped first)."""

    def __init__(self, limit: int = RECENT_REQUESTS) -> None:
        super().__init__()
        self.limit = limit

    def append(self, item: V) -> None:
        if len(self) >= self.limit:
            del self[0]
        super().append(item)
