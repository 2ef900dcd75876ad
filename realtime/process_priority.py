"""The front ends run below the engine process in CPU priority.

On a machine with more work than cores, Linux shares a core between the engine and
whatever else is runnable. A client that floods the server with large bodies keeps the
front end and the decode process busy, and the engine then waits on the run queue for
a quarter of its time (read from `/proc/PID/task/*/schedstat` during the hostile
benchmark: 0.74-0.87 of a core running, 0.13-0.26 waiting). The engine's work is every
client's tokens; the front end's extra work is the flood's. So `realtime serve` starts
the engine process first, at its own priority, and then lowers its own by
`--front-end-niceness` (a `nice` increment, which needs no privilege, unlike raising the
engine's); the front-end processes and the decode process it starts afterwards inherit
it (the decode process goes another `json_worker.NICENESS` lower).

Only a busy machine sees a difference: with a core to spare, every process runs at once.
"""

from __future__ import annotations

import logging
import os

log = logging.getLogger(__name__)


def yield_to_engine(niceness: int) -> None:
    """Lower this process's CPU priority by `niceness` (0: leave it). Called once the
    engine process is started, so only the front ends (and what they start) go lower.
    Where lowering is refused (not Linux or a sandbox), the process keeps its priority."""
    if niceness <= 0:
        return
    try:
        os.nice(niceness)
    except (AttributeError, OSError) as exc:
        log.debug("front ends keep the engine's CPU priority: %s", exc)
