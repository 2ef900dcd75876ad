"""The CPU engine's counters: what it computed, reused, batched and stopped, per request too.

Written by the engine thread only; read from any thread by tests and benchmarks to
prove what happened (tokens computed, forward passes after a cancel) without timing.
"""

from __future__ import annotations

from collections import OrderedDict, deque
from dataclasses import dataclass, field

from realtime.engine.base import NORMAL_PRIORITY

#: Per-request counters kept for this many recent requests (older ones are dropped).
REQUEST_STATS_KEPT = 1024


@dataclass
class RequestStats:
    """What the engine did for one request (by `EngineRequest.request_id`)."""

    prompt_tokens: int = 0
    #: prompt tokens taken from the prefix cache (reported as `cached_tokens`)
    prefill_reused: int = 0
    #: prompt tokens run through the model
    prefill_computed: int = 0
    #: forward passes this request took part in (alone or batched with others)
    forward_passes: int = 0
    tokens_generated: int = 0
    finish_reason: str | None = None
    cancelled: bool = False
    #: ended by a more urgent request that took over its KV (a warm-up, usually)
    preempted: bool = False
    priority: int = NORMAL_PRIORITY
    #: forward passes run without this request between its arrival and its first one
    steps_waited: int | None = None
    #: the largest batch (sequences in one forward pass) this request was part of
    largest_batch: int = 0
    #: times it was paused because its reader lagged
    paused: int = 0


@dataclass
class CpuStats:
    """Counters tests and benchmarks read (from any thread) to prove what was computed."""

    #: model calls; a batched pass serving many sequences counts once
    forward_passes: int = 0
    #: sequences served, summed over forward passes (/ forward_passes = mean batch size)
    rows_forwarded: int = 0
    #: the most sequences one forward pass served
    largest_batch: int = 0
    #: whether client requests share forward passes (False: one sequence per pass)
    batching: bool = False
    prefill_tokens_computed: int = 0
    #: prompt tokens found in the prefix cache (vLLM's prefix-cache hits)
    prefill_tokens_reused: int = 0
    #: prompt tokens looked up in the prefix cache (vLLM's prefix-cache queries): a
    #: request's whole prompt, when it joins; 0 while the cache is off
    prefix_cache_queries: int = 0
    tokens_generated: int = 0
    requests_started: int = 0
    requests_finished: int = 0
    requests_cancelled: int = 0
    requests_preempted: int = 0
    #: sequences left out of the batch because their reader lagged (see threaded.py)
    requests_paused: int = 0
    #: forward passes run for background-priority jobs (speculative warm-ups)
    background_forward_passes: int = 0
    #: tokens whose logits waited for their grammar's mask (the sequence was parked out
    #: of passes meanwhile; see backend.py)
    tokens_parked: int = 0
    #: entries and tokens currently held by the prefix cache, and evictions so far
    cache_entries: int = 0
    cache_tokens: int = 0
    cache_evictions: int = 0
    requests: OrderedDict[str, RequestStats] = field(default_factory=OrderedDict)
    #: (request id, tokens fed) per sequence per forward pass, oldest first: the schedule
    recent_forwards: deque[tuple[str, int]] = field(default_factory=lambda: deque(maxlen=512))

    def request(self, request_id: str) -> RequestStats:
        """The counters of one recent request (KeyError if unknown or forgotten)."""
        return self.requests[request_id]

    def track(self, request_id: str) -> RequestStats:
        """Start the counters of a new request, forgetting the oldest beyond the limit."""
        stats = self.requests[request_id] = RequestStats()
        while len(self.requests) > REQUEST_STATS_KEPT:
            self.requests.popitem(last=False)
        return stats
