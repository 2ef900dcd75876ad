"""The event loop the benchmark's own clients run on: uvloop when it is installed.

Why: the load generators must not be the bottleneck. Our clients parse frames in
Python on an asyncio loop, and the stock loop's per-callback and per-read costs
were a large part of their CPU; uvloop (installed with the server) roughly
halves that. Every variant of a scenario uses the same client loop, so ratios
compare servers, not clients.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


def run(main: Coroutine[Any, Any, T]) -> T:
    """`asyncio.run(main)` on uvloop if available, else on the stock loop."""
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop is a dependency on CPython/Linux
        return asyncio.run(main)
    return uvloop.run(main)
