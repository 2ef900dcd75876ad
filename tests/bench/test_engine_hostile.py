"""The engine-under-hostile-input scenario's arithmetic: tokens inside a window, the
engine's counter read from a Prometheus page, and the large body's exact size."""

from __future__ import annotations

import math

import orjson
import pytest

from bench.scenarios.engine_hostile import (
    GENERATION_COUNTER,
    Answer,
    _large_body,
    counter_total,
    tokens_in_window,
)


def test_answers_inside_the_window_count_whole() -> None:
    answers = [Answer(1.0, 2.0, 64), Answer(2.0, 3.0, 64)]
    assert tokens_in_window(answers, 0.5, 3.5) == 128


def test_answers_outside_the_window_count_nothing() -> None:
    answers = [Answer(0.0, 1.0, 64), Answer(4.0, 5.0, 64)]
    assert tokens_in_window(answers, 1.0, 4.0) == 0


def test_an_answer_across_an_edge_counts_its_share_inside() -> None:
    # A quarter of the first answer's life and half of the second's fall in the window.
    answers = [Answer(0.0, 4.0, 64), Answer(9.0, 11.0, 64)]
    assert tokens_in_window(answers, 3.0, 10.0) == pytest.approx(16 + 32)


def test_an_answer_longer_than_the_window_counts_the_window_only() -> None:
    assert tokens_in_window([Answer(0.0, 10.0, 100)], 2.0, 3.0) == pytest.approx(10)


def test_the_counter_sums_its_label_sets_and_skips_look_alikes() -> None:
    page = "\n".join(
        [
            f"# TYPE {GENERATION_COUNTER} counter",
            f'{GENERATION_COUNTER}{{engine="0",model_name="m"}} 64.0',
            f'{GENERATION_COUNTER}{{engine="1",model_name="m"}} 36.0',
            'vllm:generation_tokens_created{engine="0",model_name="m"} 1.7e+09',
            'vllm:request_generation_tokens_sum{engine="0",model_name="m"} 999.0',
        ]
    )
    assert counter_total(page, GENERATION_COUNTER) == 100.0


def test_a_missing_counter_is_nan() -> None:
    assert math.isnan(counter_total("up 1\n", GENERATION_COUNTER))


def test_the_large_body_has_its_size_and_puts_the_bulk_in_the_message() -> None:
    request = _large_body(1 << 20)
    head, body = request.split(b"\r\n\r\n", 1)
    assert len(body) == 1 << 20
    assert f"Content-Length: {1 << 20}".encode() in head
    message = orjson.loads(body)["messages"][0]["content"]
    assert len(message) > (1 << 20) - 100
