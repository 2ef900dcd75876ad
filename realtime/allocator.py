"""The C allocator keeps freed memory for reuse, so large inputs stop faulting in fresh pages.

An input of megabytes is copied several times on its way: the body joined, sent to
the decode process and back, its message rendered into the prompt. glibc serves a
block of 128 KiB or more with fresh pages from `mmap` (its threshold grows only
up to what was freed before) and gives its heap's free top back to the system
(`trim`), so each copy of an 8 MiB input touches 2,048 new pages: several
milliseconds of page faults on a virtual machine, all of them with the interpreter
lock held, so the event loop waits. `realtime serve` raises both thresholds: blocks
under 32 MiB come from the heap, and up to `--allocator-keep-mib` of freed memory
stays mapped for the next input. Measured with `bench` (the hostile scenario's cpu
engine next to 8 MiB bodies): a neighbour's `/health` p99 went from 29 to 12 ms and
the bodies answered in 6 s from 47 to 85.

What it costs: a burst of large inputs leaves up to that much resident memory
behind, reused, never returned. The processes `realtime serve` starts (the engine,
the decode process, the front ends) get the same settings through glibc's
`MALLOC_*_` variables. An operator who sets any of them, or `GLIBC_TUNABLES`, keeps
their own; on a C library without `mallopt` (macOS) this does nothing.
"""

from __future__ import annotations

import ctypes
import os
from collections.abc import Callable, MutableMapping

#: Freed memory kept for reuse by default, in MiB (`--allocator-keep-mib`).
DEFAULT_KEEP_MIB = 256
#: Blocks below this come from the heap (glibc's most: 32 MiB on 64-bit).
MMAP_THRESHOLD = 32 << 20

#: mallopt's parameters (malloc.h) and the variables glibc reads at start-up.
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3
_TRIM_VARIABLE, _MMAP_VARIABLE = "MALLOC_TRIM_THRESHOLD_", "MALLOC_MMAP_THRESHOLD_"
_OPERATOR_VARIABLES = (
    _TRIM_VARIABLE,
    _MMAP_VARIABLE,
    "MALLOC_TOP_PAD_",
    "MALLOC_MMAP_MAX_",
    "GLIBC_TUNABLES",
)

Mallopt = Callable[[int, int], int]


def keep_freed_memory(
    keep_mib: int = DEFAULT_KEEP_MIB,
    *,
    environ: MutableMapping[str, str] | None = None,
    mallopt: Mallopt | None = None,
) -> bool:
    """Apply the settings to this process and to those it starts; False when nothing
    was changed (`keep_mib` 0, the operator's own settings, no glibc)."""
    environ = os.environ if environ is None else environ
    if keep_mib <= 0 or any(name in environ for name in _OPERATOR_VARIABLES):
        return False
    mallopt = mallopt if mallopt is not None else _libc_mallopt()
    if mallopt is None:
        return False
    keep = keep_mib << 20
    if not (mallopt(_M_TRIM_THRESHOLD, keep) and mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD)):
        return False  # a C library whose mallopt refuses them (musl's does nothing)
    environ[_TRIM_VARIABLE] = str(keep)
    environ[_MMAP_VARIABLE] = str(MMAP_THRESHOLD)
    return True


def _libc_mallopt() -> Mallopt | None:
    try:
        function = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return None
    function.argtypes = (ctypes.c_int, ctypes.c_int)
    function.restype = ctypes.c_int

    def call(parameter: int, value: int) -> int:
        result: int = function(parameter, value)
        return result

    return call
