"""vLLM's metrics beside ours: the load, cache and latency signals that routers read.

The routers and autoscalers people put in front of LLM servers (the Gateway API
Inference Extension and llm-d's endpoint picker, vLLM's production-stack router,
KEDA) and vLLM's Grafana dashboard read vLLM's metric names. This module exports
them, with vLLM 0.32's names, types, help texts, labels (`model_name`, `engine`) and
histogram buckets, and the meaning vLLM gives them, so a replica of this server is
read like a vLLM replica without any change to those tools.

Two sources:

* the engine's state, read at scrape time from its `snapshot()` (`engine/snapshot.py`;
  this layer sees it through `EngineReading`, the same fields): running and waiting
  requests, KV-cache use and geometry, prefix-cache queries and hits, preemptions;
* each request's stream of engine outputs, recorded by a `GenerationRecord` that
  `pipeline/generation.py` keeps for every engine request of a client (not for
  speculative warm-ups): time to first token and inter-token latency, end-to-end
  latency and decode time, prompt and generation tokens, success by finish reason.
  Time is measured from when the request is handed to the engine (after templating
  and tokenization, as vLLM's `arrival_time` is set after its API server's), on the
  engine's outputs, not on the chunks a transport sends (that is what our own
  `realtime_time_to_first_token_seconds` measures). A request the client abandons, or
  that ends with the engine raising (unavailable, a request it refuses), counts its
  tokens but no success and no request histograms, as in vLLM, where only requests
  that end with a finish reason are recorded as finished.

Which of vLLM's metrics are left out, and why, is `NOT_EXPORTED`; the test checks
it with the exported ones against the list read from vLLM's source.

The per-output path (`GenerationRecord.output`) runs once per engine output on the
event loop: it updates fast_metrics' lock-free cells directly, like `RequestTimer`,
under the same thread contract (updates from the event loop's thread only).
"""

from __future__ import annotations

import time
from bisect import bisect_left
from collections.abc import Callable, Iterable
from time import perf_counter
from typing import Protocol

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.metrics_core import Metric

from realtime.observability.fast_metrics import FastCounter, FastCounterChild, FastHistogram

__all__ = [
    "ENGINE",
    "FINISHED_REASON",
    "NOT_EXPORTED",
    "EngineReading",
    "GenerationRecord",
    "KvCacheReading",
    "VllmMetrics",
    "request_tokens_buckets",
]

#: The `engine` label: vLLM numbers its engine cores (data parallel); a server here has one.
ENGINE = "0"
_LABELS = ("model_name", "engine")

# vLLM 0.32's default bucket families (vllm/v1/metrics/buckets.py).
TIME_TO_FIRST_TOKEN_BUCKETS = (
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5,
    10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0,
)  # fmt: skip
INTER_TOKEN_LATENCY_BUCKETS = (
    0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
    20.0, 40.0, 80.0,
)  # fmt: skip
REQUEST_LATENCY_BUCKETS = (
    0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0,
    240.0, 480.0, 960.0, 1920.0, 7680.0,
)  # fmt: skip
REQUEST_PARAMS_N_BUCKETS = (1.0, 2.0, 5.0, 10.0, 20.0)


def request_tokens_buckets(max_model_len: int) -> list[float]:
    """vLLM's token-count buckets: 1, 2, 5, 10, 20, 50, ... up to the context length."""
    bounds: list[float] = []
    scale = 1
    while True:
        for mantissa in (1, 2, 5):
            value = mantissa * scale
            if value > max_model_len:
                return bounds
            bounds.append(float(value))
        scale *= 10


#: Our finish reasons (`model.generation.FinishReason` values) as vLLM's `finished_reason`.
FINISHED_REASON = {
    "eos": "stop",
    "stop": "stop",
    "length": "length",
    "cancelled": "abort",
    "error": "error",
}

#: vLLM 0.32 metrics this server does not export, and why.
NOT_EXPORTED = {
    "vllm:num_requests_waiting_by_reason": (
        "splits the waiting requests into 'capacity' (all of them here) and 'deferred' (LoRA "
        "budget, KV transfer, blocked status: none of which exists here)"
    ),
    "vllm:engine_sleep_state": "the engines have no sleep mode",
    "vllm:external_prefix_cache_queries": "no KV connector shares KV across instances",
    "vllm:external_prefix_cache_hits": "no KV connector shares KV across instances",
    "vllm:mm_cache_queries": "no multi-modal inputs",
    "vllm:mm_cache_hits": "no multi-modal inputs",
    "vllm:admission_rejections": (
        "no server-wide request queue limit; refused requests are "
        'realtime_requests_total{status="rejected"}'
    ),
    "vllm:iteration_tokens_total": "the engines do not report tokens per step",
    "vllm:request_queue_time_seconds": (
        "the engines do not report when a request was first scheduled"
    ),
    "vllm:request_prefill_time_seconds": (
        "the engines do not report when a request was first scheduled"
    ),
    "vllm:request_inference_time_seconds": (
        "the engines do not report when a request was first scheduled"
    ),
    "vllm:request_num_preemptions": (
        "the engines do not report preemptions per request (the built-in ones preempt only "
        "speculative warm-ups, which are not client requests)"
    ),
    "vllm:num_requests_kv_fetch_by_stage": "vLLM's KV-transfer consumer mode only",
    "vllm:corrupted_requests": "vLLM's VLLM_COMPUTE_NANS_IN_LOGITS mode only",
    "vllm:watermark_requests": "vLLM's watermark_config only",
    "vllm:kv_block_lifetime_seconds": "vLLM's --kv-cache-metrics only",
    "vllm:kv_block_idle_before_evict_seconds": "vLLM's --kv-cache-metrics only",
    "vllm:kv_block_reuse_gap_seconds": "vLLM's --kv-cache-metrics only",
}


class KvCacheReading(Protocol):
    """`engine.snapshot.KvCacheSnapshot` as this layer sees it (it cannot import engines)."""

    @property
    def block_size(self) -> int: ...
    @property
    def total_blocks(self) -> int: ...
    @property
    def used_blocks(self) -> int: ...
    @property
    def prefix_caching(self) -> bool: ...
    @property
    def dtype(self) -> str: ...
    @property
    def usage(self) -> float: ...


class EngineReading(Protocol):
    """`engine.snapshot.EngineSnapshot` as this layer sees it."""

    @property
    def running(self) -> int: ...
    @property
    def waiting(self) -> int: ...
    @property
    def kv_cache(self) -> KvCacheReading | None: ...
    @property
    def prefix_cache_queries(self) -> int: ...
    @property
    def prefix_cache_hits(self) -> int: ...
    @property
    def preemptions(self) -> int: ...


class VllmMetrics:
    """vLLM's metrics for one served model, on the app's registry."""

    def __init__(
        self,
        registry: CollectorRegistry,
        model_name: str,
        max_model_len: int,
        read_engine: Callable[[], EngineReading] | None = None,
    ) -> None:
        self.model_name = model_name
        #: The engine's `snapshot`; None for an engine without one (see `in_flight`).
        self.read_engine = read_engine
        #: Engine requests between `start` and `close`: the running count of an engine
        #: that reports no snapshot.
        self.in_flight = 0
        key = (model_name, ENGINE)
        tokens = request_tokens_buckets(max_model_len)

        def counter(name: str, doc: str, extra: str | None = None) -> FastCounter:
            labels = (*_LABELS, extra) if extra else _LABELS
            return FastCounter(name, doc, labels, registry)

        def histogram(name: str, doc: str, buckets: Iterable[float]) -> FastHistogram:
            return FastHistogram(name, doc, _LABELS, list(buckets), registry)

        self.generation_tokens = counter(
            "vllm:generation_tokens", "Number of generation tokens processed."
        ).labels(*key)
        self.prompt_tokens = counter(
            "vllm:prompt_tokens", "Number of prefill tokens processed."
        ).labels(*key)
        by_source = counter(
            "vllm:prompt_tokens_by_source", "Number of prompt tokens by source.", "source"
        )
        self.prompt_tokens_computed = by_source.labels(*key, "local_compute")
        self.prompt_tokens_hit = by_source.labels(*key, "local_cache_hit")
        self.prompt_tokens_cached = counter(
            "vllm:prompt_tokens_cached", "Number of cached prompt tokens (local + external)."
        ).labels(*key)
        self.prompt_tokens_cached_device = counter(
            "vllm:prompt_tokens_cached_by_source",
            "Prefix-cache hit tokens by the cache tier that supplied them: device (local HBM), "
            "host (offloaded to DRAM), disk, p2p (transferred from another vLLM instance) or "
            "external_unspecified. Counted at admission; sums to vllm:prefix_cache_hits + "
            "vllm:external_prefix_cache_hits.",
            "source",
        ).labels(*key, "device")
        success = counter(
            "vllm:request_success", "Count of successfully processed requests.", "finished_reason"
        )
        self.success: dict[str, FastCounterChild] = {
            reason: success.labels(*key, reason) for reason in ("stop", "length", "abort", "error")
        }
        self.ttft = histogram(
            "vllm:time_to_first_token_seconds",
            "Histogram of time to first token in seconds.",
            TIME_TO_FIRST_TOKEN_BUCKETS,
        ).labels(*key)
        self.itl = histogram(
            "vllm:inter_token_latency_seconds",
            "Histogram of inter-token latency in seconds.",
            INTER_TOKEN_LATENCY_BUCKETS,
        ).labels(*key)
        self.time_per_output_token = histogram(
            "vllm:request_time_per_output_token_seconds",
            "Histogram of time_per_output_token_seconds per request.",
            INTER_TOKEN_LATENCY_BUCKETS,
        ).labels(*key)
        self.e2e = histogram(
            "vllm:e2e_request_latency_seconds",
            "Histogram of e2e request latency in seconds.",
            REQUEST_LATENCY_BUCKETS,
        ).labels(*key)
        self.decode_time = histogram(
            "vllm:request_decode_time_seconds",
            "Histogram of time spent in DECODE phase for request.",
            REQUEST_LATENCY_BUCKETS,
        ).labels(*key)
        self.request_prompt_tokens = histogram(
            "vllm:request_prompt_tokens", "Number of prefill tokens processed.", tokens
        ).labels(*key)
        self.request_generation_tokens = histogram(
            "vllm:request_generation_tokens", "Number of generation tokens processed.", tokens
        ).labels(*key)
        self.request_max_generation_tokens = histogram(
            "vllm:request_max_num_generation_tokens",
            "Histogram of maximum number of requested generation tokens.",
            tokens,
        ).labels(*key)
        self.request_n = histogram(
            "vllm:request_params_n",
            "Histogram of the n request parameter.",
            REQUEST_PARAMS_N_BUCKETS,
        ).labels(*key)
        self.request_max_tokens = histogram(
            "vllm:request_params_max_tokens",
            "Histogram of the max_tokens request parameter.",
            tokens,
        ).labels(*key)
        self.request_prefill_computed = histogram(
            "vllm:request_prefill_kv_computed_tokens",
            "Histogram of new KV tokens computed during prefill (excluding cached tokens).",
            tokens,
        ).labels(*key)
        registry.register(_EngineState(self))

    def start(self, prompt_tokens: int, max_tokens: int | None) -> GenerationRecord:
        """Begin recording one engine request (its prompt is handed to the engine now)."""
        self.in_flight += 1
        return GenerationRecord(self, prompt_tokens, max_tokens)


class GenerationRecord:
    """One engine request's outputs, as vLLM's output processor records them.

    `output` runs for every engine output; `finish` once, when the request ends with a
    finish reason (the engine's, or a stop string's); `close` once, however the stream
    ended (a client that went away, or the engine raising, included).
    """

    __slots__ = (
        "_generation",
        "_itl",
        "_itl_bounds",
        "_itl_first",
        "_metrics",
        "cached",
        "closed",
        "first",
        "last",
        "max_tokens",
        "prompt_tokens",
        "started",
    )

    def __init__(self, metrics: VllmMetrics, prompt_tokens: int, max_tokens: int | None):
        self._metrics = metrics
        self._generation = metrics.generation_tokens
        itl = metrics.itl
        self._itl = itl.cells
        self._itl_bounds = itl.bounds
        self._itl_first = itl.bounds[0]
        self.prompt_tokens = prompt_tokens
        self.max_tokens = max_tokens
        self.started = perf_counter()
        self.first: float | None = None
        self.last: float | None = None
        #: prompt tokens the engine reused (its `cached_tokens`), once it has said
        self.cached = 0
        self.closed = False

    def output(self, tokens: int, cached: int | None) -> None:
        """An engine output with `tokens` new token ids (and `cached_tokens`, if set)."""
        if cached is not None:
            self.cached = cached
        if tokens:
            now = perf_counter()
            self._generation.value += tokens
            last = self.last
            self.last = now
            if last is not None:
                # The inter-token gap, straight into the histogram's cells (bucket, then
                # sum: the order fast_metrics relies on); most gaps fall in the first
                # bucket (10 ms).
                gap = now - last
                cells = self._itl
                if gap <= self._itl_first:
                    cells[0] += 1
                else:
                    cells[bisect_left(self._itl_bounds, gap)] += 1
                cells[-1] += gap
            else:
                self.first = now
                self._metrics.ttft.observe(now - self.started)

    def finish(self, reason: str, generated: int) -> None:
        """The request ended with `reason` (a `FinishReason` value), after `generated`
        tokens (counted by the caller, which counts them anyway)."""
        m = self._metrics
        now = perf_counter()
        label = FINISHED_REASON.get(reason, "error")
        m.success[label].value += 1
        m.e2e.observe(now - self.started)
        first, last = self.first, self.last
        decode = last - first if first is not None and last is not None else 0.0
        m.decode_time.observe(decode)
        prompt = self.prompt_tokens
        m.time_per_output_token.observe(decode / (generated - 1) if generated > 1 else 0.0)
        m.request_prompt_tokens.observe(prompt)
        m.request_generation_tokens.observe(generated)
        # n > 1 is refused, so every request is its own parent: n is 1 and the most
        # tokens any of its sequences generated is its own count.
        m.request_max_generation_tokens.observe(generated)
        m.request_n.observe(1)
        if self.max_tokens:
            m.request_max_tokens.observe(self.max_tokens)
        m.request_prefill_computed.observe(prompt - min(self.cached, prompt))

    def close(self) -> None:
        """The stream is over. The prompt counts once its prefill produced a token."""
        if self.closed:
            return
        self.closed = True
        m = self._metrics
        m.in_flight -= 1
        if self.first is None:
            return
        prompt = self.prompt_tokens
        hit = min(self.cached, prompt)
        m.prompt_tokens.value += prompt
        m.prompt_tokens_computed.value += prompt - hit
        m.prompt_tokens_hit.value += hit
        m.prompt_tokens_cached.value += hit
        m.prompt_tokens_cached_device.value += hit


class _EngineState:
    """The families read from the engine's snapshot at scrape time."""

    def __init__(self, metrics: VllmMetrics) -> None:
        self._metrics = metrics

    def describe(self) -> list[Metric]:
        return [
            GaugeMetricFamily("vllm:num_requests_running", ""),
            GaugeMetricFamily("vllm:num_requests_waiting", ""),
            GaugeMetricFamily("vllm:kv_cache_usage_perc", ""),
            GaugeMetricFamily("vllm:cache_config_info", ""),
            GaugeMetricFamily("vllm:lora_requests_info", ""),
            CounterMetricFamily("vllm:prefix_cache_queries", ""),
            CounterMetricFamily("vllm:prefix_cache_hits", ""),
            CounterMetricFamily("vllm:num_preemptions", ""),
        ]

    def collect(self) -> list[Metric]:
        m = self._metrics
        key = [m.model_name, ENGINE]
        read = m.read_engine
        reading = read() if read is not None else None

        def gauge(name: str, doc: str, value: float) -> GaugeMetricFamily:
            family = GaugeMetricFamily(name, doc, labels=_LABELS)
            family.add_metric(key, value)
            return family

        def counter(name: str, doc: str, value: float) -> CounterMetricFamily:
            family = CounterMetricFamily(name, doc, labels=_LABELS)
            family.add_metric(key, value)
            return family

        kv = reading.kv_cache if reading is not None else None
        families: list[Metric] = [
            gauge(
                "vllm:num_requests_running",
                "Number of requests in model execution batches.",
                reading.running if reading is not None else m.in_flight,
            ),
            gauge(
                "vllm:num_requests_waiting",
                "Number of requests waiting to be processed.",
                reading.waiting if reading is not None else 0,
            ),
            gauge(
                "vllm:kv_cache_usage_perc",
                "KV-cache usage. 1 means 100 percent usage.",
                kv.usage if kv is not None else 0.0,
            ),
            counter(
                "vllm:prefix_cache_queries",
                "Prefix cache queries, in terms of number of queried tokens.",
                reading.prefix_cache_queries if reading is not None else 0,
            ),
            counter(
                "vllm:prefix_cache_hits",
                "Prefix cache hits, in terms of number of cached tokens.",
                reading.prefix_cache_hits if reading is not None else 0,
            ),
            counter(
                "vllm:num_preemptions",
                "Cumulative number of preemption from the engine.",
                reading.preemptions if reading is not None else 0,
            ),
        ]
        # LoRA adapters are not served: none runs or waits, at most 0 at once. The value
        # is the time of the reading, as vLLM sets it (pickers take the newest series).
        lora = GaugeMetricFamily(
            "vllm:lora_requests_info",
            "Running stats on lora requests.",
            labels=("max_lora", "waiting_lora_adapters", "running_lora_adapters"),
        )
        lora.add_metric(["0", "", ""], time.time())
        families.append(lora)
        if kv is not None:
            # A subset of vLLM's CacheConfig fields, with vLLM's spelling of their values.
            info = GaugeMetricFamily(
                "vllm:cache_config_info",
                "Information of the LLMEngine CacheConfig",
                labels=(
                    "block_size",
                    "num_gpu_blocks",
                    "cache_dtype",
                    "enable_prefix_caching",
                    "engine",
                ),
            )
            info.add_metric(
                [
                    str(kv.block_size),
                    str(kv.total_blocks),
                    kv.dtype,
                    str(kv.prefix_caching),
                    ENGINE,
                ],
                1.0,
            )
            families.append(info)
        return families
