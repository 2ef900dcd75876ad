"""`bench.front_ends`: its server-side TTFT from the histogram, and one tiny real run.

No figure is judged here (timing on a shared CI machine proves nothing): the run
checks that the harness drives a real server and reads its metrics back.
"""

from __future__ import annotations

import math
from pathlib import Path

from bench.front_ends import _bucket_quantile, measure, start


def test_a_quantile_is_the_bound_of_the_bucket_it_falls_in_between_two_scrapes():
    before = {0.005: 10.0, 0.025: 10.0, 0.1: 10.0, math.inf: 10.0}
    # since then: 90 under 5 ms, 9 more under 25 ms, 1 under 100 ms
    after = {0.005: 100.0, 0.025: 109.0, 0.1: 110.0, math.inf: 110.0}
    assert _bucket_quantile(before, after, 0.5) == 5.0
    assert _bucket_quantile(before, after, 0.95) == 25.0
    assert _bucket_quantile(before, after, 1.0) == 100.0
    assert math.isnan(_bucket_quantile(after, after, 0.5))  # nothing observed


def test_a_tiny_run_against_a_real_server_reads_chunks_and_the_server_ttft(tmp_path: Path):
    server = start(1, tmp_path, tokens_per_step=4)
    try:
        cells = measure(server, streams=4, seconds=0.5, workers=1)
    finally:
        server.stop()
    assert cells["chunks/s"] > 0
    assert cells["TTFT p50 ms"] <= cells["TTFT p99 ms"]
    assert cells["server TTFT p50 <= ms"] <= cells["server TTFT p99 <= ms"]
