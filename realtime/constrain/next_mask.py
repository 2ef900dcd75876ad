"""Each constrained sequence's next mask, computed off the engine's thread.

A grammar's work per token is bounded by its step budget, but the budget is
tens of milliseconds (measured: 60-100 ms of CPU for one token of a hostile
schema within the default limits), longer than a small model's forward pass.
Done on the engine's thread between passes, it would delay every sequence of the
batch. So after a sequence samples a token, taking the token and computing the
following mask go to `MaskWorkers`, while the engine runs its next forward pass;
when the sequence's logits are ready, its mask usually is too. When it is not,
the engine parks that sequence (its logits kept) and leaves it out of passes until the
mask is ready (`cpu/backend.py`): a slow grammar delays only its own sequence.

A fixed mask (banned tokens) costs nothing and is computed inline.
"""

from __future__ import annotations

import os
from concurrent.futures import Future, ThreadPoolExecutor

import numpy as np
import numpy.typing as npt

from realtime.constrain.matcher import GrammarMatcher, SequenceConstraint
from realtime.constrain.priority import lower_priority

#: The most threads computing masks for one engine: with two, a sequence whose grammar
#: is cheap never waits behind more than one costly step of another's.
MASK_THREADS = 2


def mask_threads(compute_threads: int) -> int:
    """Mask workers beside `compute_threads` forward-pass threads: the cores those leave,
    at least one and at most `MASK_THREADS`. Grammar work (a hostile client's included)
    then never takes the cores the forward pass runs on."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        cores = os.cpu_count() or 1
    return max(1, min(MASK_THREADS, cores - compute_threads))


class MaskWorkers:
    """The threads that compute one engine's grammar masks (llguidance releases the GIL),
    at a lower priority than the engine's thread (`lower_priority`)."""

    def __init__(self, threads: int = MASK_THREADS) -> None:
        self._pool = ThreadPoolExecutor(
            threads, thread_name_prefix="grammar-mask", initializer=lower_priority
        )

    def submit(self, mask: NextMask, token: int | None) -> Future[None]:
        return self._pool.submit(mask.compute, token)

    def close(self) -> None:
        """Stop taking work; a step already running finishes on its own (it is bounded)."""
        self._pool.shutdown(wait=False, cancel_futures=True)


class NextMask:
    """One sequence's allowed ids for its next token, as an int32 bitmask row.

    `after(token)` takes the sampled token (None before the first) and starts the
    next mask; `ready`, `bits` and `error` read the result. Only one computation is
    ever in flight per sequence, so its matcher is never used by two threads at once.
    """

    __slots__ = ("_bits", "_error", "_future", "_workers", "matcher")

    def __init__(self, matcher: SequenceConstraint, words: int, workers: MaskWorkers) -> None:
        self.matcher = matcher
        self._workers = workers
        self._bits: npt.NDArray[np.int32] = np.zeros(words, dtype=np.int32)
        self._error: str | None = None
        self._future: Future[None] | None = None

    def after(self, token: int | None) -> None:
        """Take `token` and compute the mask that follows it: on a worker for a grammar,
        here for a fixed mask."""
        if isinstance(self.matcher, GrammarMatcher):
            self._future = self._workers.submit(self, token)
        else:
            self._future = None
            self.compute(token)

    def compute(self, token: int | None) -> None:
        """The work itself (on whichever thread `after` chose)."""
        matcher = self.matcher
        if token is not None:
            taken = (
                matcher.advance_releasing_gil(token)
                if isinstance(matcher, GrammarMatcher)
                else matcher.advance(token)
            )
            if not taken:
                self._error = matcher.error or f"token {token} is outside the constraint"
                return
        matcher.fill_bitmask_at(self._bits.ctypes.data, self._bits.size)
        self._error = matcher.error

    @property
    def future(self) -> Future[None] | None:
        """The computation in flight (None when it ran inline)."""
        return self._future

    @property
    def ready(self) -> bool:
        return self._future is None or self._future.done()

    @property
    def bits(self) -> npt.NDArray[np.int32]:
        """The mask (valid once `ready`, when `error` is None)."""
        self._raise_if_failed()
        return self._bits

    @property
    def error(self) -> str | None:
        """Why the grammar cannot go on (a limit hit, a token it refused), once `ready`."""
        self._raise_if_failed()
        return self._error

    def _raise_if_failed(self) -> None:
        if self._future is not None and self._future.done():
            exc = self._future.exception()
            if exc is not None:  # a bug, not the client's grammar: the step fails
                raise exc
