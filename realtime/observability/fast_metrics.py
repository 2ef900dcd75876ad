"""Lock-free counters and histograms for the per-token hot path, exported by a collector.

prometheus_client's `Counter.inc` and `Histogram.observe` take a lock, validate
their argument and (for a histogram) scan the buckets in Python: a few hundred
nanoseconds each, paid for every token streamed and every frame sent. The two
classes here keep the same numbers in plain Python state instead (an int per
counter child; per histogram child one list of per-bucket counts with the sum in
its last cell, the bucket found with `bisect`) and turn them into metric families
only when the registry is collected, i.e. at scrape time.

What a scrape sees is what prometheus_client's own `Counter` and `Histogram`
export: the same names, types, help texts and labels, cumulative `le` buckets
ending in `+Inf`, `_count`, `_sum`, and `_created` (unless prometheus_client's
created series are disabled).

Threads. Updates (`inc`, `observe`, and `RequestTimer` in metrics.py, which
updates a histogram child inline) are plain read-modify-write statements with no
lock, so all updates must come from one thread; in this server that is the event
loop's thread (engine worker threads never touch metrics). Two threads updating
the same child could lose updates: that is not supported.

Collecting (a scrape) is safe from any thread. A counter is one number, read
whole. A histogram child is read with a single `list.copy()` of its cells, which
(under CPython's GIL) no update can interleave with, so the exported buckets,
`+Inf` and `_count` always agree with each other and never go backwards. The one
thing a scrape from another thread can catch is an observation between its two
statements (bucket counted, sum not yet added): `_sum` then lacks that one
observation's value, which the next scrape includes. That is accepted: it is the
same kind of tear prometheus_client's own `Histogram` allows (sum and bucket are
separate values it updates and reads one after the other), a rate or a mean over
a scrape interval absorbs it, and ruling it out would put a lock back on every
token. A scrape on the event loop itself (GET /metrics) never sees even that,
since no update is half done while the loop serves it. Children are created
under a lock, so `labels()` may run while another thread collects.

One deliberate difference: a NaN observation lands in the first bucket (and the
count), where prometheus_client's bucket scan counts it nowhere. The server only
observes differences of `time.perf_counter()` readings, never NaN.
"""

from __future__ import annotations

import threading
import time
from bisect import bisect_left
from collections.abc import Callable, Iterable, Sequence
from itertools import pairwise
from typing import Generic, TypeVar, cast

import prometheus_client.metrics as _prometheus_metrics
from prometheus_client import CollectorRegistry
from prometheus_client.metrics_core import Metric
from prometheus_client.utils import INF, floatToGoString

__all__ = ["FastCounter", "FastCounterChild", "FastHistogram", "FastHistogramChild"]

_Child = TypeVar("_Child")

#: How prometheus_client spells a bucket bound in `le` ("0.001", "1.0", "+Inf").
_le_text = cast(Callable[[float], str], floatToGoString)


def _created_enabled() -> bool:
    """Whether prometheus_client exports `_created` series (PROMETHEUS_DISABLE_CREATED_SERIES)."""
    return bool(getattr(_prometheus_metrics, "_use_created", True))


class _Family(Generic[_Child]):
    """A labelled metric: one child per label-value tuple, created on first `labels()`."""

    _type = ""

    def __init__(
        self,
        name: str,
        documentation: str,
        labelnames: Sequence[str],
        registry: CollectorRegistry | None,
        new_child: Callable[[], _Child],
    ) -> None:
        self.name = name
        self.documentation = documentation
        self.labelnames = tuple(labelnames)
        if not self.labelnames:
            raise ValueError(f"{name}: a fast metric needs at least one label")
        self._new_child = new_child
        self._lock = threading.Lock()
        #: Keyed by label values as strings; `labels()` first tries its arguments as given.
        self._children: dict[tuple[object, ...], _Child] = {}
        if registry is not None:
            registry.register(self)

    def labels(self, *values: object, **kwargs: object) -> _Child:
        """The child for these label values (positional, or by name), created on first use."""
        child = None if kwargs else self._children.get(values)
        if child is None:
            key = self._key(values, kwargs)
            with self._lock:
                child = self._children.get(key)
                if child is None:
                    child = self._children[key] = self._new_child()
        return child

    def _key(self, values: tuple[object, ...], kwargs: dict[str, object]) -> tuple[str, ...]:
        if kwargs:
            if values or sorted(kwargs) != sorted(self.labelnames):
                raise ValueError(f"{self.name}: expected labels {self.labelnames}")
            values = tuple(kwargs[n] for n in self.labelnames)
        if len(values) != len(self.labelnames):
            raise ValueError(f"{self.name}: expected labels {self.labelnames}, got {values}")
        return tuple(str(v) for v in values)

    def _snapshot(self) -> list[tuple[tuple[object, ...], _Child]]:
        with self._lock:
            return list(self._children.items())

    def describe(self) -> Iterable[Metric]:
        return [Metric(self.name, self.documentation, self._type)]

    def collect(self) -> Iterable[Metric]:
        raise NotImplementedError


class FastCounterChild:
    """One labelled counter: a plain number, incremented without a lock."""

    __slots__ = ("created", "value")

    def __init__(self) -> None:
        self.value: float = 0
        self.created = time.time()

    def inc(self, amount: float = 1) -> None:
        """Add `amount` (default 1). From one thread only; see the module docstring."""
        if amount < 0:
            raise ValueError("Counters can only be incremented by non-negative amounts.")
        self.value += amount

    def get(self) -> float:
        return self.value


class FastCounter(_Family[FastCounterChild]):
    """Like a labelled `prometheus_client.Counter`: `labels(...).inc()`, exported as `_total`."""

    _type = "counter"

    def __init__(
        self,
        name: str,
        documentation: str,
        labelnames: Sequence[str],
        registry: CollectorRegistry | None,
    ) -> None:
        super().__init__(name, documentation, labelnames, registry, FastCounterChild)

    def collect(self) -> Iterable[Metric]:
        metric = Metric(self.name, self.documentation, "counter")
        created = _created_enabled()
        for key, child in self._snapshot():
            labels = dict(zip(self.labelnames, map(str, key), strict=True))
            metric.add_sample(self.name + "_total", labels, float(child.value))
            if created:
                metric.add_sample(self.name + "_created", labels, child.created)
        return [metric]


class FastHistogramChild:
    """One labelled histogram.

    `cells` holds the observation count of each bucket, not cumulative (cell i
    counts values v with bounds[i-1] < v <= bounds[i]; the last bound is +Inf),
    followed by one more cell with the sum of all observations.
    """

    __slots__ = ("bounds", "cells", "created")

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self.bounds = bounds
        self.cells: list[float] = [0] * (len(bounds) + 1)
        self.created = time.time()

    def observe(self, amount: float) -> None:
        """Record one observation. From one thread only; see the module docstring."""
        cells = self.cells
        # bisect_left: the first bound >= amount, i.e. the bucket with amount <= le.
        # Bucket first, then sum: a concurrent snapshot may lack the sum, never the count.
        cells[bisect_left(self.bounds, amount)] += 1
        cells[-1] += amount

    def snapshot(self) -> tuple[list[float], float]:
        """(cumulative bucket counts, sum), from one consistent copy of the cells."""
        cells = self.cells.copy()
        total = cells.pop()
        acc = 0.0
        cumulative = []
        for n in cells:
            acc += n
            cumulative.append(acc)
        return cumulative, total


class FastHistogram(_Family[FastHistogramChild]):
    """Like a labelled `prometheus_client.Histogram`: `labels(...).observe(v)`."""

    _type = "histogram"

    def __init__(
        self,
        name: str,
        documentation: str,
        labelnames: Sequence[str],
        buckets: Sequence[float],
        registry: CollectorRegistry | None,
    ) -> None:
        bounds = [float(b) for b in buckets]
        if bounds and bounds[-1] != INF:
            bounds.append(INF)
        if len(bounds) < 2 or any(a >= b for a, b in pairwise(bounds)):
            raise ValueError(f"{name}: buckets must be sorted and hold at least one finite bound")
        self.bounds = tuple(bounds)
        self._le = tuple(_le_text(b) for b in self.bounds)
        super().__init__(
            name, documentation, labelnames, registry, lambda: FastHistogramChild(self.bounds)
        )

    def collect(self) -> Iterable[Metric]:
        metric = Metric(self.name, self.documentation, "histogram")
        created = _created_enabled()
        name = self.name
        for key, child in self._snapshot():
            cumulative, total = child.snapshot()
            labels = dict(zip(self.labelnames, map(str, key), strict=True))
            for le, count in zip(self._le, cumulative, strict=True):
                metric.add_sample(name + "_bucket", {**labels, "le": le}, count)
            metric.add_sample(name + "_count", labels, cumulative[-1])
            # Like prometheus_client: no _sum when a bucket bound is negative.
            if self.bounds[0] >= 0:
                metric.add_sample(name + "_sum", labels, total)
            if created:
                metric.add_sample(name + "_created", labels, child.created)
        return [metric]
