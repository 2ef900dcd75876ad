"""A socket's requests that were read and not yet started: the queue, then a bounded read-ahead.

    reader --put--> [queue: capacity][read-ahead: read_ahead] --get--> dispatcher
                     \\--take(request_id)--> a cancel answers it at once

Why not `asyncio.Queue`: with it the reader waited inside `put()` as soon as the
queue was full, so it stopped reading the socket and a `response.cancel` or
`session.close` sent behind the requests waited until a request finished. Here
`put()` never waits. The reader calls `wait_for_room()` before it reads the next
frame, and that waits only once the read-ahead behind the full queue is full
too: up to `read_ahead` more request frames are read, and control frames among
them act at once. Backpressure is kept, one bound later (TCP flow control
reaches the client when both are full), and a cancel for a request still waiting
here takes it out (`take`), which makes room at once.

Items are opaque to this class except through the predicate `take()` is given.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable
from typing import Generic, TypeVar

T = TypeVar("T")


class RequestQueue(Generic[T]):
    def __init__(self, capacity: int, read_ahead: int):
        self.capacity = capacity
        self.read_ahead = read_ahead
        self._items: deque[T] = deque()
        self._added = asyncio.Event()
        self._room = asyncio.Event()

    def __len__(self) -> int:
        return len(self._items)

    @property
    def full(self) -> bool:
        """Queue and read-ahead are full: the reader must not read another frame."""
        return len(self._items) >= self.capacity + self.read_ahead

    def put(self, item: T) -> None:
        """Add a request (never waits: the reader checked `wait_for_room()` before reading it)."""
        self._items.append(item)
        self._added.set()

    async def wait_for_room(self) -> None:
        """Wait while another request frame read now would have nowhere to go."""
        while self.full:
            self._room.clear()
            await self._room.wait()

    async def get(self) -> T:
        """The oldest request, waiting while there is none."""
        while not self._items:
            self._added.clear()
            await self._added.wait()
        item = self._items.popleft()
        self._room.set()
        return item

    def take(self, matches: Callable[[T], bool]) -> T | None:
        """Remove and return the first waiting request that `matches`; None if there is none."""
        for index, item in enumerate(self._items):
            if matches(item):
                del self._items[index]
                self._room.set()
                return item
        return None

    def take_all(self) -> list[T]:
        """Remove and return every waiting request, oldest first."""
        items = list(self._items)
        self._items.clear()
        self._room.set()
        return items
