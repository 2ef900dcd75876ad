"""Merging front ends' expositions: counts add up, engine state is taken once, the text parses."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

from realtime.observability.merge import merge_expositions
from realtime.observability.metrics import Metrics


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def test_counters_and_histograms_add_up_across_front_ends() -> None:
    first, second = Metrics(), Metrics()
    first.ws_closes.labels("1000").inc(2)
    second.ws_closes.labels("1000").inc(3)
    second.ws_closes.labels("1001").inc()  # only the second front end saw one
    first.ttft.labels("sse").observe(0.002)
    second.ttft.labels("sse").observe(0.2)
    merged = samples(merge_expositions([first.render().decode(), second.render().decode()]))
    assert merged[("realtime_ws_closes_total", (("code", "1000"),))] == 5
    assert merged[("realtime_ws_closes_total", (("code", "1001"),))] == 1
    count = [
        v for (name, _), v in merged.items() if name == "realtime_time_to_first_token_seconds_count"
    ]
    assert count == [2]


def test_engine_state_is_taken_once_and_created_is_the_earliest() -> None:
    one = (
        "# HELP vllm:num_requests_running Running\n# TYPE vllm:num_requests_running gauge\n"
        "vllm:num_requests_running 4.0\n"
        "# HELP x_created c\n# TYPE x_created gauge\nx_created 10.0\n"
    )
    two = one.replace("x_created 10.0", "x_created 7.0")
    merged = samples(merge_expositions([one, two]))
    assert merged[("vllm:num_requests_running", ())] == 4
    assert merged[("x_created", ())] == 7


def test_one_exposition_comes_out_as_it_went_in() -> None:
    metrics = Metrics()
    metrics.ws_closes.labels("1000").inc()
    text = metrics.render().decode()
    assert samples(merge_expositions([text])) == samples(text)
