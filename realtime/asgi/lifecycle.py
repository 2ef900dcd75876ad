"""The server's shutdown phases, shared by both transports.

Shutdown has two steps. `begin_drain()`: no new work is taken (new socket
requests get an `error` frame `shutting_down`, new HTTP requests a 503), while
work already accepted carries on. `expire()`: the grace period is over; whatever
still runs is cancelled and ends with a terminal frame (`response.done`
cancelled on the socket, an SSE error event `shutting_down` plus `[DONE]`, or a
503 for a non-streaming HTTP request). No request is dropped without an answer.
"""

from __future__ import annotations

import asyncio


class Lifecycle:
    def __init__(self) -> None:
        self.draining = False
        self._expired: asyncio.Event | None = None

    @property
    def expired(self) -> asyncio.Event:
        # Created on first use, inside the server's event loop.
        if self._expired is None:
            self._expired = asyncio.Event()
        return self._expired

    def begin_drain(self) -> None:
        self.draining = True

    def expire(self) -> None:
        self.draining = True
        self.expired.set()
