"""The hot-path metrics (frames sent, time to first token, inter-token latency).

They are kept in plain Python state and exported by collectors at scrape time
(realtime/observability/fast_metrics.py); these tests pin the exported text to
known observations, and to what prometheus_client's own Counter and Histogram
export for the same observations.
"""

from __future__ import annotations

import random
import re
import sys
import threading
from typing import Any

import prometheus_client.metrics as prometheus_metrics
import pytest
from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.openmetrics.exposition import generate_latest as generate_openmetrics

from realtime.observability import metrics as metrics_module
from realtime.observability.fast_metrics import FastCounter, FastHistogram
from realtime.observability.metrics import _LATENCY_BUCKETS, Metrics, RequestTimer

LE = [*(repr(float(b)) for b in _LATENCY_BUCKETS), "+Inf"]


def _lines(text: str, prefix: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith(prefix)]


def _mask_created(text: str) -> str:
    """`_created` values are creation times: equal only up to when each child was made."""
    return re.sub(r"^(\w+_created(\{[^}]*\})?) \S+$", r"\1 <created>", text, flags=re.M)


def _content(text: str = "x") -> dict[str, Any]:
    return {"object": "chat.completion.chunk", "choices": [{"delta": {"content": text}}]}


class _Clock:
    """Stands in for time.perf_counter in the metrics module."""

    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> _Clock:
    fake = _Clock(0.0)
    monkeypatch.setattr(metrics_module, "perf_counter", fake)
    return fake


def test_request_timer_exports_exact_cumulative_buckets(clock: _Clock) -> None:
    m = Metrics()
    timer = RequestTimer(m, "ws", started=10.0)
    # Every time and gap below is a binary fraction, so each difference is exact and
    # the values that sit on a bucket bound (0.5, 1.0) land exactly on it.
    clock.now = 10.5
    timer.chunk(_content())  # time to first token: 0.5, on the le="0.5" bound
    clock.now = 10.75
    timer.chunk({"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]})
    gaps = [2**-10, 2**-8, 0.5, 1.0, 64.0, 0.0]  # 0.0: two content chunks at one instant
    last = 10.5  # the role-only chunk at 10.75 must not restart the gap
    for gap in gaps:
        last += gap
        clock.now = last
        timer.chunk(_content())
    timer.chunk({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
    timer.chunk({"choices": [], "usage": {"prompt_tokens": 1}})

    assert timer.started == 10.0
    assert timer.first_token_at == 10.5
    assert timer.ttft_ms == 500.0
    text = _mask_created(m.render().decode())

    itl = "realtime_inter_token_latency_seconds"
    # Per bucket (not cumulative): 2**-10 and 0.0 -> le 0.001; 2**-8 -> le 0.005;
    # 0.5 -> le 0.5 (on the bound); 1.0 -> le 1.0 (on the bound); 64 -> +Inf only.
    cumulative = [2, 2, 3, 3, 3, 3, 3, 3, 3, 4, 4, 5, 5, 5, 5, 5, 5, 6]
    assert _lines(text, itl + "_") == [
        *(
            f'{itl}_bucket{{le="{le}",transport="ws"}} {n:.1f}'
            for le, n in zip(LE, cumulative, strict=True)
        ),
        f'{itl}_count{{transport="ws"}} 6.0',
        f'{itl}_sum{{transport="ws"}} 65.5048828125',
        f'{itl}_created{{transport="ws"}} <created>',
    ]
    ttft = "realtime_time_to_first_token_seconds"
    assert [line.split()[-1] for line in _lines(text, ttft + "_bucket")] == (
        ["0.0"] * 9 + ["1.0"] * 9
    )
    assert f'{ttft}_bucket{{le="0.25",transport="ws"}} 0.0' in text
    assert f'{ttft}_bucket{{le="0.5",transport="ws"}} 1.0' in text
    assert f'{ttft}_count{{transport="ws"}} 1.0' in text
    assert f'{ttft}_sum{{transport="ws"}} 0.5' in text
    assert "# TYPE realtime_inter_token_latency_seconds histogram" in text
    assert (
        "# HELP realtime_inter_token_latency_seconds"
        " Gap between consecutive content chunks of one streamed request"
    ) in text


@pytest.mark.parametrize(
    ("chunk", "counts"),
    [
        (_content(), True),
        ({"choices": [{"index": 0, "text": "t"}]}, True),
        ({"choices": [{"index": 0, "delta": {"reasoning_content": "r"}}]}, True),
        ({"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0}]}}]}, True),
        ({"choices": [{"index": 0, "delta": None, "text": "t"}]}, True),
        ({"choices": [{"index": 0, "delta": {"content": ""}}]}, False),
        ({"choices": [{"index": 0, "delta": {"role": "assistant"}}]}, False),
        ({"choices": [{"index": 0, "delta": {"tool_calls": []}}]}, False),
        ({"choices": [{"index": 0, "text": ""}]}, False),
        ({"choices": [{"index": 0, "delta": None}]}, False),
        ({"choices": []}, False),
        ({"usage": {"completion_tokens": 1}}, False),
    ],
)
def test_only_content_chunks_are_timed(clock: _Clock, chunk: dict[str, Any], counts: bool) -> None:
    m = Metrics()
    timer = RequestTimer(m, "http", started=1.0)
    clock.now = 3.0
    timer.chunk(chunk)
    assert timer.first_token_at == (3.0 if counts else None)
    assert timer.ttft_ms == (2000.0 if counts else None)
    count = m.registry.get_sample_value(
        "realtime_time_to_first_token_seconds_count", {"transport": "http"}
    )
    assert count == (1.0 if counts else 0.0)


def test_frames_sent_counters_export_each_kind(clock: _Clock) -> None:
    m = Metrics()
    for _ in range(3):
        m.sent["chunk"].inc()
    m.sent["done"].inc()
    ready = m.frames_out.labels("ready")  # what a WebSocket session adds to `sent`
    assert ready is m.frames_out.labels(kind="ready")
    ready.inc()
    ready.inc(2)
    text = m.render().decode()
    name = "realtime_ws_frames_sent"
    assert _lines(text, f"{name}_total{{") == [
        f'{name}_total{{kind="chunk"}} 3.0',
        f'{name}_total{{kind="completion"}} 0.0',
        f'{name}_total{{kind="done"}} 1.0',
        f'{name}_total{{kind="error"}} 0.0',
        f'{name}_total{{kind="expiring"}} 0.0',
        f'{name}_total{{kind="ready"}} 3.0',
    ]
    assert f"# TYPE {name}_total counter" in text
    assert f"# HELP {name}_total Frames sent, by kind (chunk, completion, done, error," in text
    created = _lines(text, f"{name}_created{{")
    assert [line.split()[0] for line in created] == [
        f'{name}_created{{kind="{kind}"}}'
        for kind in ("chunk", "completion", "done", "error", "expiring", "ready")
    ]
    assert all(float(line.split()[1]) > 1e9 for line in created)  # unix times
    with pytest.raises(ValueError, match="non-negative"):
        m.sent["chunk"].inc(-1)
    with pytest.raises(ValueError):
        m.frames_out.labels("a", "b")


def test_created_series_follow_prometheus_client_switch(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(prometheus_metrics, "_use_created", False)
    m = Metrics()
    m.sent["chunk"].inc()
    m.itl.labels("ws").observe(0.01)
    text = m.render().decode()
    assert "_created" not in text
    assert 'realtime_ws_frames_sent_total{kind="chunk"} 1.0' in text
    assert 'realtime_inter_token_latency_seconds_count{transport="ws"} 1.0' in text


@pytest.mark.parametrize("render", [generate_latest, generate_openmetrics])
def test_exported_text_matches_prometheus_client(render: Any) -> None:
    """Same observations into prometheus_client's classes and the fast ones: same text."""
    rng = random.Random(20240601)
    reference, fast = CollectorRegistry(), CollectorRegistry()
    args = ("demo_latency_seconds", "Help text", ["transport"])
    ref_hist = Histogram(*args, buckets=_LATENCY_BUCKETS, registry=reference)
    fast_hist = FastHistogram(*args, buckets=_LATENCY_BUCKETS, registry=fast)
    ref_count = Counter("demo_frames", "Frames", ["kind"], registry=reference)
    fast_count = FastCounter("demo_frames", "Frames", ["kind"], registry=fast)
    values = [*_LATENCY_BUCKETS, 0.0, 60.0001, 1e9, 0.0009999, 0.0010001]
    for transport in ("ws", "http", "idle"):
        ref_hist.labels(transport)
        fast_hist.labels(transport)
    for _ in range(2000):
        transport = rng.choice(["ws", "http"])
        value = rng.choice([rng.choice(values), rng.expovariate(20.0), rng.uniform(0, 70)])
        ref_hist.labels(transport).observe(value)
        fast_hist.labels(transport).observe(value)
        kind = rng.choice(["chunk", "done", "error"])
        ref_count.labels(kind).inc()
        fast_count.labels(kind).inc()
    expected = _mask_created(render(reference).decode())
    assert _mask_created(render(fast).decode()) == expected
    assert 'demo_latency_seconds_bucket{le="+Inf",transport="idle"} 0.0' in expected


def test_a_scrape_from_another_thread_sees_a_consistent_histogram() -> None:
    """The documented guarantee: buckets and _count always agree; _sum lags by <= 1 value."""
    m = Metrics()
    name = "realtime_inter_token_latency_seconds"
    child = m.itl.labels("ws")
    stop = threading.Event()
    violations: list[str] = []
    scrapes: list[float] = []

    def scrape() -> None:
        while not stop.is_set():
            before = m.registry.get_sample_value(f"{name}_count", {"transport": "ws"}) or 0
            text = m.render().decode()
            buckets = [float(line.split()[-1]) for line in _lines(text, f"{name}_bucket{{")]
            [count] = [float(line.split()[-1]) for line in _lines(text, f"{name}_count{{")]
            [total] = [float(line.split()[-1]) for line in _lines(text, f"{name}_sum{{")]
            scrapes.append(count)
            if buckets != sorted(buckets) or buckets[-1] != count or count < before:
                violations.append(f"buckets {buckets} count {count} (before: {before})")
            # Every observation is 1.0: the sum is the count, or one behind it.
            if total not in (count, count - 1):
                violations.append(f"sum {total} count {count}")
            for _ in range(100):  # and many more tries at catching an update half-done
                cumulative, total = child.snapshot()
                if total not in (cumulative[-1], cumulative[-1] - 1):
                    violations.append(f"sum {total} count {cumulative[-1]}")

    previous = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    scraper = threading.Thread(target=scrape)
    try:
        scraper.start()
        for _ in range(300_000):
            child.observe(1.0)
    finally:
        stop.set()
        scraper.join()
        sys.setswitchinterval(previous)
    assert violations == []
    assert len(set(scrapes)) > 10  # the scrapes did land while observations went on
    assert m.registry.get_sample_value(f"{name}_sum", {"transport": "ws"}) == 300_000.0


def test_fast_metrics_refuse_what_prometheus_client_refuses() -> None:
    registry = CollectorRegistry(auto_describe=True)
    FastCounter("demo_frames", "Frames", ["kind"], registry=registry)
    with pytest.raises(ValueError, match="Duplicated timeseries"):
        Counter("demo_frames", "Frames", ["kind"], registry=registry)
    with pytest.raises(ValueError, match="sorted"):
        FastHistogram("demo_h", "H", ["t"], buckets=(1.0, 0.5), registry=None)
    with pytest.raises(ValueError):
        FastHistogram("demo_h", "H", ["t"], buckets=(1.0,), registry=None).labels()
