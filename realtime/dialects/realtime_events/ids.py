"""Server-made ids: events, items, responses, calls. Unguessable where they name state."""

from __future__ import annotations

import itertools
import uuid


def new_item_id() -> str:
    return f"item_{uuid.uuid4().hex[:24]}"


def new_response_id() -> str:
    return f"resp_{uuid.uuid4().hex[:24]}"


def new_call_id() -> str:
    return f"call_{uuid.uuid4().hex[:24]}"


class EventIds:
    """`event_<socket prefix><n>`: unique per socket, cheap per text delta."""

    __slots__ = ("_count", "_prefix")

    def __init__(self) -> None:
        self._prefix = f"event_{uuid.uuid4().hex[:8]}"
        self._count = itertools.count(1)

    def __call__(self) -> str:
        return f"{self._prefix}{next(self._count)}"
