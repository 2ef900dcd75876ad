"""vLLM's metrics, recorded from known engine outputs on a fake clock, and read from a
known engine snapshot: the exported text pinned to the values vLLM would export."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from realtime.engine.snapshot import EngineSnapshot, KvCacheSnapshot
from realtime.observability import vllm_metrics
from realtime.observability.vllm_metrics import (
    INTER_TOKEN_LATENCY_BUCKETS,
    VllmMetrics,
    request_tokens_buckets,
)


def key(name: str, **labels: str) -> str:
    """A sample's key in `scrape`'s dict: the engine's labels and `labels`, sorted."""
    every = {"engine": "0", "model_name": "m", **labels}
    return name + "{" + ",".join(f'{k}="{v}"' for k, v in sorted(every.items())) + "}"


class _Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> _Clock:
    fake = _Clock()
    monkeypatch.setattr(vllm_metrics, "perf_counter", fake)
    return fake


def scrape(registry: CollectorRegistry) -> dict[str, float]:
    samples = {}
    for family in text_string_to_metric_families(generate_latest(registry).decode()):
        for s in family.samples:
            if s.name.endswith("_created"):
                continue
            labels = ",".join(f'{k}="{v}"' for k, v in sorted(s.labels.items()))
            samples[f"{s.name}{{{labels}}}"] = s.value
    return samples


def test_request_token_buckets_are_vllms_1_2_5_series_up_to_the_context() -> None:
    assert request_tokens_buckets(4096) == [1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000]
    assert request_tokens_buckets(5000)[-1] == 5000
    assert request_tokens_buckets(1) == [1]


def test_a_finished_request_records_what_vllms_output_processor_records(clock: _Clock) -> None:
    registry = CollectorRegistry()
    meter = VllmMetrics(registry, "m", 4096)
    record = meter.start(prompt_tokens=10, max_tokens=64)
    assert meter.in_flight == 1
    clock.now = 100.25  # the first token, a quarter second after the request reached the engine
    record.output(1, cached=4)
    clock.now = 100.3125  # binary fractions: every difference below is exact
    record.output(2, None)  # two tokens in one output: one inter-token gap (vLLM: per output)
    clock.now = 100.5
    record.output(0, None)  # held back: no tokens, no gap
    clock.now = 101.25
    record.output(1, None)
    record.finish("eos", 4)
    record.close()
    record.close()  # idempotent: the stream's `finally` may follow a finish
    m = scrape(registry)
    assert meter.in_flight == 0
    assert m[key("vllm:time_to_first_token_seconds_count")] == 1
    assert m[key("vllm:time_to_first_token_seconds_sum")] == 0.25
    assert m[key("vllm:time_to_first_token_seconds_bucket", le="0.25")] == 1
    assert m[key("vllm:time_to_first_token_seconds_bucket", le="0.1")] == 0
    # Gaps 0.0625 and 0.9375: buckets le=0.075 and le=1.0.
    assert m[key("vllm:inter_token_latency_seconds_count")] == 2
    assert m[key("vllm:inter_token_latency_seconds_sum")] == 1.0
    assert m[key("vllm:inter_token_latency_seconds_bucket", le="0.05")] == 0
    assert m[key("vllm:inter_token_latency_seconds_bucket", le="0.075")] == 1
    assert m[key("vllm:inter_token_latency_seconds_bucket", le="0.75")] == 1
    assert m[key("vllm:inter_token_latency_seconds_bucket", le="1.0")] == 2
    assert m[key("vllm:e2e_request_latency_seconds_sum")] == 1.25
    assert m[key("vllm:request_decode_time_seconds_sum")] == 1.0
    # vLLM's mean time per output token leaves out the first: 1.0 s over 4 - 1 tokens.
    assert m[key("vllm:request_time_per_output_token_seconds_sum")] == pytest.approx(1 / 3)
    assert m[key("vllm:generation_tokens_total")] == 4
    assert m[key("vllm:request_generation_tokens_sum")] == 4
    assert m[key("vllm:request_max_num_generation_tokens_sum")] == 4
    assert m[key("vllm:request_prompt_tokens_sum")] == 10
    assert m[key("vllm:request_params_n_sum")] == 1
    assert m[key("vllm:request_params_max_tokens_sum")] == 64
    assert m[key("vllm:request_prefill_kv_computed_tokens_sum")] == 6
    assert m[key("vllm:prompt_tokens_total")] == 10
    assert m[key("vllm:prompt_tokens_by_source_total", source="local_compute")] == 6
    assert m[key("vllm:prompt_tokens_by_source_total", source="local_cache_hit")] == 4
    assert m[key("vllm:prompt_tokens_cached_total")] == 4
    assert m[key("vllm:prompt_tokens_cached_by_source_total", source="device")] == 4
    success = {r: m[key("vllm:request_success_total", finished_reason=r)] for r in
               ("stop", "length", "abort", "error")}  # fmt: skip
    assert success == {"stop": 1, "length": 0, "abort": 0, "error": 0}


@pytest.mark.parametrize(
    ("reason", "label"),
    [("eos", "stop"), ("stop", "stop"), ("length", "length"), ("cancelled", "abort"),
     ("error", "error")],
)  # fmt: skip
def test_finish_reasons_are_counted_under_vllms_names(reason: str, label: str) -> None:
    registry = CollectorRegistry()
    record = VllmMetrics(registry, "m", 4096).start(3, None)
    record.finish(reason, 0)
    record.close()
    m = scrape(registry)
    assert m[key("vllm:request_success_total", finished_reason=label)] == 1
    assert sum(v for k, v in m.items() if k.startswith("vllm:request_success_total")) == 1
    # No max_tokens: nothing to observe, as vLLM skips a request without one.
    assert m[key("vllm:request_params_max_tokens_count")] == 0


def test_a_request_the_client_abandons_counts_its_tokens_not_a_success(clock: _Clock) -> None:
    registry = CollectorRegistry()
    meter = VllmMetrics(registry, "m", 4096)
    record = meter.start(5, 100)
    clock.now += 0.5
    record.output(1, 0)
    clock.now += 0.5
    record.output(1, None)
    record.close()  # the stream was closed before any finish reason
    m = scrape(registry)
    assert m[key("vllm:generation_tokens_total")] == 2
    assert m[key("vllm:prompt_tokens_total")] == 5
    assert m[key("vllm:time_to_first_token_seconds_count")] == 1
    assert m[key("vllm:inter_token_latency_seconds_count")] == 1
    assert m[key("vllm:e2e_request_latency_seconds_count")] == 0
    assert not any(v for k, v in m.items() if k.startswith("vllm:request_success_total"))
    assert meter.in_flight == 0


def test_a_request_that_never_got_a_token_does_not_count_its_prompt() -> None:
    registry = CollectorRegistry()
    record = VllmMetrics(registry, "m", 4096).start(7, 10)
    record.output(0, None)
    record.close()
    m = scrape(registry)
    assert m[key("vllm:prompt_tokens_total")] == 0
    assert m[key("vllm:time_to_first_token_seconds_count")] == 0


def test_the_engine_families_are_read_from_its_snapshot_at_scrape_time() -> None:
    @dataclass
    class Engine:
        state: EngineSnapshot

        def snapshot(self) -> EngineSnapshot:
            return self.state

    kv = KvCacheSnapshot(
        block_size=256, total_blocks=8, used_blocks=2, prefix_caching=True, dtype="fp16"
    )
    engine = Engine(EngineSnapshot(3, 4, kv, prefix_cache_queries=100, prefix_cache_hits=60))
    registry = CollectorRegistry()
    VllmMetrics(registry, "m", 4096, engine.snapshot)
    m = scrape(registry)
    assert m[key("vllm:num_requests_running")] == 3
    assert m[key("vllm:num_requests_waiting")] == 4
    assert m[key("vllm:kv_cache_usage_perc")] == 0.25
    assert m[key("vllm:prefix_cache_queries_total")] == 100
    assert m[key("vllm:prefix_cache_hits_total")] == 60
    assert m[key("vllm:num_preemptions_total")] == 0
    info = (
        'vllm:cache_config_info{block_size="256",cache_dtype="fp16",'
        'enable_prefix_caching="True",engine="0",num_gpu_blocks="8"}'
    )
    assert m[info] == 1
    (lora,) = [k for k in m if k.startswith("vllm:lora_requests_info")]
    assert lora == (
        'vllm:lora_requests_info{max_lora="0",running_lora_adapters="",waiting_lora_adapters=""}'
    )
    engine.state = EngineSnapshot(running=1)  # read again at the next scrape; no KV cache
    m = scrape(registry)
    assert m[key("vllm:num_requests_running")] == 1
    assert m[key("vllm:kv_cache_usage_perc")] == 0
    assert not any(k.startswith("vllm:cache_config_info") for k in m)


def test_without_a_snapshot_the_running_count_is_the_requests_streaming() -> None:
    registry = CollectorRegistry()
    meter = VllmMetrics(registry, "m", 4096)
    records = [meter.start(1, None) for _ in range(3)]
    records[0].close()
    assert scrape(registry)[key("vllm:num_requests_running")] == 2


def test_the_inter_token_fast_path_matches_observe(clock: _Clock) -> None:
    """`output` updates the histogram's cells inline; the result is `observe`'s, on the
    bounds (10 ms is the first bucket's), around them and past the last one."""
    gaps = [0.0, 0.001, 0.01, 0.0100001, 0.3, 79.0, 81.0]
    meter = VllmMetrics(CollectorRegistry(), "m", 4096)
    expected = VllmMetrics(CollectorRegistry(), "m", 4096).itl
    record = meter.start(1, None)
    record.output(1, None)
    for gap in gaps:
        last = clock.now
        clock.now += gap
        record.output(1, None)
        expected.observe(clock.now - last)
    assert meter.itl.cells == expected.cells
    assert len(meter.itl.bounds) == len(INTER_TOKEN_LATENCY_BUCKETS) + 1
