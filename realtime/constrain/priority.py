"""Grammar work runs below the engine and the event loop in CPU priority.

A grammar's compile and its per-token masks are bounded by its limits, but a
hostile client can keep them busy; on threads of a lower priority they use the
CPU the forward pass and the event loop leave, so they cannot take their share.
"""

from __future__ import annotations

import os
import threading

#: How much lower than the rest of the process grammar threads run (a nice increment).
GRAMMAR_NICENESS = 10


def lower_priority() -> None:
    """Run the calling thread at `GRAMMAR_NICENESS` below the process (Linux: a thread's
    nice value is its own). Grammar work then uses the CPU the forward pass and the
    event loop leave: a hostile grammar cannot take their share. A no-op elsewhere."""
    try:
        tid = threading.get_native_id()
        os.setpriority(
            os.PRIO_PROCESS, tid, os.getpriority(os.PRIO_PROCESS, tid) + GRAMMAR_NICENESS
        )
    except (AttributeError, OSError):
        pass
