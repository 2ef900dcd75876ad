"""Garbage-collector settings for a server process that holds thousands of sockets.

CPython's cycle collector runs its youngest generation every 700 net
allocations, and a streamed token allocates several objects (a chunk dict, an
engine output, timer handles and futures of the engine's step). With thousands
of sockets the young objects that are alive at any moment (one pending step per
stream) keep surviving into older generations, so older collections, which scan
every long-lived object of every socket, keep being triggered. Measured with
2,000 streaming sockets (`bench/`), that was about a third of the server's CPU.

`realtime serve` therefore raises the youngest generation's threshold (the older
generations' ratios stay as they are), and freezes everything that exists once the
app is built - modules, schemas, templates - so no collection scans it again.
Reference counting still frees almost everything at once; only garbage that
forms cycles waits longer. Embedders who build their own process keep Python's
settings unless they call `tune_gc` themselves.
"""

from __future__ import annotations

import gc

#: Allocations between collections of the youngest generation (Python's default: 700).
DEFAULT_GEN0_THRESHOLD = 10_000


def tune_gc(gen0_threshold: int = DEFAULT_GEN0_THRESHOLD) -> None:
    """Freeze what exists now and collect the young generation less often (0: leave
    Python's settings alone)."""
    if gen0_threshold <= 0:
        return
    gc.collect()
    gc.freeze()
    _, gen1, gen2 = gc.get_threshold()
    gc.set_threshold(gen0_threshold, gen1, gen2)
