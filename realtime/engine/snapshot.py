"""What an engine holds right now, as one value: the load and cache signals routers read.

The server exports these under vLLM's metric names (`observability/vllm_metrics.py`),
so a router or autoscaler that reads a vLLM replica's queue, running count and KV-cache
use reads ours the same way. An engine reports them through one method, `snapshot()`,
and the front end never looks inside an engine: an engine that runs in a process of
its own answers from behind its proxy with the same value.

The contract of `snapshot()`:
- it is called on the event loop's thread (at every scrape of `/metrics`), so it must
  be cheap and never block: no I/O, no lock an engine thread may hold for a step, no
  waiting on a step. It may read counters an engine thread writes (plain ints, read
  whole under the GIL), and may return a value a step or two old; a proxy answers
  with the last snapshot its engine process reported;
- it may be called at any time: before `start()`, after `close()`, after a failed
  step (then it reports what the engine holds, usually nothing);
- the counters in it (`prefix_cache_queries`, `prefix_cache_hits`, `preemptions`) only
  grow over the engine object's life, as Prometheus counters must.

An engine without `snapshot()` is served all the same: the server then counts as
running the requests it is streaming from the engine, and reports no KV cache.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable


@dataclass(frozen=True, slots=True)
class KvCacheSnapshot:
    """The engine's KV cache as vLLM's block pool describes one.

    A block is the unit the cache is allocated in (vLLM's `block_size` tokens, an
    exllamav2 page), or, for an engine that allocates per token (cpu), the unit it
    counts tokens in. `used_blocks` counts the blocks held by
    requests in the engine; blocks that only keep a finished request's prefix for
    reuse are free (they are given up when needed), as in vLLM, so
    `used_blocks / total_blocks` is vLLM's `kv_cache_usage_perc`.
    """

    #: tokens one block holds
    block_size: int
    #: blocks the cache has in all (vLLM's `num_gpu_blocks`)
    total_blocks: int
    #: blocks held by requests in the engine now
    used_blocks: int
    #: whether a request may start from KV that an earlier request computed
    prefix_caching: bool
    #: the cache's element type, as the engine names it ("float32", "fp16", "q4", ...)
    dtype: str

    @property
    def usage(self) -> float:
        """Fraction of the blocks held by requests: 0.0 (empty) to 1.0 (full)."""
        return self.used_blocks / self.total_blocks if self.total_blocks > 0 else 0.0


@dataclass(frozen=True, slots=True)
class EngineSnapshot:
    """An engine's state at one moment (see the module docstring for the contract).

    Background-priority requests (speculative warm-ups) are not counted in `running`
    or `waiting`: they give way to any client request, so they are not load a router
    should steer around. `kv_cache` describes the cache's blocks, whoever holds them.
    """

    #: client requests the engine is computing (vLLM's scheduler "running" set): in
    #: the batch, whether or not the last step included them
    running: int = 0
    #: client requests accepted and waiting for a place in the batch
    waiting: int = 0
    #: None for an engine without a bounded KV cache (echo, scripted; the cpu engine
    #: when it runs one sequence per pass)
    kv_cache: KvCacheSnapshot | None = None
    #: prompt tokens looked up in the prefix cache, summed over requests (vLLM counts
    #: a request's tokens when it is first scheduled); 0 for an engine without one
    prefix_cache_queries: int = 0
    #: of those, the tokens whose KV was found and reused
    prefix_cache_hits: int = 0
    #: requests taken out of the running set to be resumed later
    preemptions: int = 0


@runtime_checkable
class ReportsSnapshot(Protocol):
    """Engines that report their state (all of this package's engines do)."""

    def snapshot(self) -> EngineSnapshot:
        """The engine's state now; cheap, non-blocking, event-loop thread."""
        ...
