"""Sampling maths against hand-computed values: each step alone, then a sequence's state."""

from __future__ import annotations

import math

import pytest
import torch

from realtime.engine.base import SamplingParams
from realtime.engine.cpu.sampling import (
    SequenceSampler,
    apply_logit_bias,
    apply_presence_frequency,
    apply_repetition_penalty,
    apply_temperature,
    min_p_filter,
    sample_batch,
    suppress,
    top_k_filter,
    top_logprobs,
    top_p_filter,
)

INF = float("inf")


def t(*values: float) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.float32)


def log_probs(*probs: float) -> torch.Tensor:
    return torch.log(t(*probs))


def kept(logits: torch.Tensor) -> list[int]:
    return [i for i, v in enumerate(logits.tolist()) if v != -INF]


# --- the steps ---


def test_logit_bias_adds_to_the_named_ids_and_leaves_the_input_alone() -> None:
    logits = t(1.0, 2.0, 3.0)
    out = apply_logit_bias(logits, torch.tensor([0, 2]), t(5.0, -100.0))
    assert out.tolist() == [6.0, 2.0, -97.0]
    assert logits.tolist() == [1.0, 2.0, 3.0]


def test_suppress_sets_minus_infinity_and_ignores_ids_outside_the_vocabulary() -> None:
    logits = t(1.0, 2.0, 3.0)
    assert suppress(logits, {1, 99, -1}).tolist() == [1.0, -INF, 3.0]
    assert logits.tolist() == [1.0, 2.0, 3.0]
    assert suppress(logits, ()) is logits


def test_repetition_penalty_divides_positive_and_multiplies_negative_seen_logits() -> None:
    logits = t(2.0, -1.0, 3.0, 0.5)
    seen = torch.tensor([True, True, False, False])
    assert apply_repetition_penalty(logits, seen, 2.0).tolist() == [1.0, -2.0, 3.0, 0.5]


def test_presence_and_frequency_penalties_follow_openai() -> None:
    # logit - frequency * count - presence * (count > 0)
    counts = t(0.0, 1.0, 3.0)
    out = apply_presence_frequency(t(1.0, 1.0, 1.0), counts, presence=0.5, frequency=0.25)
    assert out.tolist() == pytest.approx([1.0, 0.25, -0.25])
    negative = apply_presence_frequency(t(0.0, 0.0, 0.0), counts, presence=-1.0, frequency=0.0)
    assert negative.tolist() == [0.0, 1.0, 1.0]


def test_temperature_divides() -> None:
    assert apply_temperature(t(2.0, -4.0), 2.0).tolist() == [1.0, -2.0]


def test_top_k_keeps_the_k_largest_and_ties_with_the_kth() -> None:
    logits = t(1.0, 3.0, 2.0, 3.0)
    assert kept(top_k_filter(logits, 3)) == [1, 2, 3]
    assert kept(top_k_filter(logits, 1)) == [1, 3]  # the tie at the top stays
    assert top_k_filter(logits, 0) is logits
    assert top_k_filter(logits, -1) is logits
    assert top_k_filter(logits, 4) is logits


def test_top_p_keeps_the_smallest_prefix_reaching_p_in_any_input_order() -> None:
    # probabilities 0.15, 0.5, 0.05, 0.3: ranked 0.5, 0.3, 0.15, 0.05 (mass before: 0, .5, .8, .95)
    logits = log_probs(0.15, 0.5, 0.05, 0.3)
    assert kept(top_p_filter(logits, 0.4)) == [1]
    assert kept(top_p_filter(logits, 0.7)) == [1, 3]
    assert kept(top_p_filter(logits, 0.85)) == [0, 1, 3]
    assert kept(top_p_filter(logits, 0.99)) == [0, 1, 2, 3]
    assert top_p_filter(logits, 1.0) is logits


def test_top_p_always_keeps_the_most_likely_token() -> None:
    assert kept(top_p_filter(log_probs(0.1, 0.9), 0.01)) == [1]


def test_min_p_drops_tokens_below_a_fraction_of_the_top_probability() -> None:
    logits = log_probs(0.5, 0.3, 0.15, 0.05)
    assert kept(min_p_filter(logits, 0.2)) == [0, 1, 2]  # floor 0.1
    assert kept(min_p_filter(logits, 0.5)) == [0, 1]  # floor 0.25
    assert min_p_filter(logits, 0.0) is logits


def test_filters_work_row_by_row_on_a_batch() -> None:
    batch = torch.stack([t(1.0, 2.0, 3.0), t(3.0, 2.0, 1.0)])
    out = top_k_filter(batch, 1)
    assert [kept(row) for row in out] == [[2], [0]]
    out = top_p_filter(torch.stack([log_probs(0.6, 0.4), log_probs(0.2, 0.8)]), 0.5)
    assert [kept(row) for row in out] == [[0], [1]]


def test_top_logprobs_lists_the_most_likely_and_skips_impossible_tokens() -> None:
    dist = t(math.log(0.25), -INF, math.log(0.75))
    assert top_logprobs(dist, 3) == [
        (2, pytest.approx(math.log(0.75))),
        (0, pytest.approx(math.log(0.25))),
    ]
    assert top_logprobs(dist, 0) == []


# --- a sequence ---


def sampler(
    vocab: int = 3,
    prompt: tuple[int, ...] = (),
    logprobs: int | None = None,
    **p: float | int | dict[int, float] | None,
) -> SequenceSampler:
    return SequenceSampler(
        SamplingParams(**p),  # type: ignore[arg-type]
        vocab_size=vocab,
        prompt_token_ids=prompt,
        logprobs=logprobs,
    )


def test_greedy_takes_the_argmax_and_reports_the_model_distribution() -> None:
    s = sampler(2, logprobs=2, temperature=0.0)
    got = s.sample(t(0.0, math.log(3.0)))  # probabilities 1/4, 3/4
    assert got.token_id == 1
    assert got.logprob is not None
    assert got.logprob.token_id == 1
    assert got.logprob.logprob == pytest.approx(math.log(0.75))
    assert got.logprob.top == [
        (1, pytest.approx(math.log(0.75))),
        (0, pytest.approx(math.log(0.25))),
    ]


def test_no_logprobs_unless_asked() -> None:
    assert sampler(2, temperature=0.0).sample(t(0.0, 1.0)).logprob is None
    assert sampler(2, seed=1).sample(t(0.0, 1.0)).logprob is None
    zero = sampler(2, logprobs=0, temperature=0.0).sample(t(0.0, 1.0)).logprob
    assert zero is not None and zero.top == []


def test_tiny_temperatures_decode_greedily() -> None:
    s = sampler(3, temperature=1e-7)
    assert s.greedy
    assert [s.sample(t(0.0, 5.0, 4.999)).token_id for _ in range(3)] == [1, 1, 1]


def test_repetition_penalty_counts_the_prompt() -> None:
    logits = t(2.0, 1.5)
    with_prompt = sampler(2, prompt=(0,), temperature=0.0, repetition_penalty=2.0)
    assert with_prompt.sample(logits).token_id == 1  # token 0 seen: 2.0 / 2 = 1.0 < 1.5
    without = sampler(2, temperature=0.0, repetition_penalty=2.0)
    assert without.sample(logits).token_id == 0


def test_frequency_penalty_grows_with_each_use_and_presence_penalty_does_not() -> None:
    logits = t(1.0, 0.9, 0.0)
    freq = sampler(3, temperature=0.0, frequency_penalty=0.2)
    # step by step: (1.0, .9) -> 0; (.8, .9) -> 1; (.8, .7) -> 0; (.6, .7) -> 1
    assert [freq.sample(logits).token_id for _ in range(4)] == [0, 1, 0, 1]
    presence = sampler(3, temperature=0.0, presence_penalty=0.5)
    # (1.0, .9) -> 0; (.5, .9) -> 1; (.5, .4) -> 0; (.5, .4) -> 0
    assert [presence.sample(logits).token_id for _ in range(4)] == [0, 1, 0, 0]


def test_penalties_only_see_tokens_generated_by_this_sequence() -> None:
    a = sampler(3, temperature=0.0, frequency_penalty=0.2)
    b = sampler(3, temperature=0.0, frequency_penalty=0.2)
    logits = t(1.0, 0.9, 0.0)
    a.sample(logits)
    assert b.sample(logits).token_id == 0  # a's token did not penalise b


def test_logit_bias_and_banned_ids_change_the_greedy_choice_and_the_logprobs() -> None:
    s = sampler(3, logprobs=3, temperature=0.0, logit_bias={2: -100.0, 0: 1.0})
    got = s.sample(t(0.0, 0.5, 3.0))  # biased: 1.0, 0.5, -97.0
    assert got.token_id == 0
    assert got.logprob is not None
    expected = torch.log_softmax(t(1.0, 0.5, -97.0), dim=-1)
    assert got.logprob.logprob == pytest.approx(float(expected[0]))
    assert [i for i, _ in got.logprob.top] == [0, 1, 2]
    banned = sampler(3, logprobs=3, temperature=0.0).sample(t(0.0, 0.5, 3.0), banned={2})
    assert banned.token_id == 1
    assert banned.logprob is not None
    assert [i for i, _ in banned.logprob.top] == [1, 0]  # the banned id is not listed
    assert banned.logprob.logprob == pytest.approx(math.log(math.exp(0.5) / (1 + math.exp(0.5))))


def test_sampled_logprobs_are_those_of_the_tempered_distribution() -> None:
    # temperature 0.5 doubles the logits: probabilities become 1/10 and 9/10
    s = sampler(2, logprobs=2, temperature=0.5, seed=3)
    for _ in range(5):
        got = s.sample(t(0.0, math.log(3.0)))
        assert got.logprob is not None
        expected = math.log(0.9) if got.token_id == 1 else math.log(0.1)
        assert got.logprob.logprob == pytest.approx(expected, abs=1e-6)
        assert got.logprob.top[0] == (1, pytest.approx(math.log(0.9), abs=1e-6))


def test_truncated_tokens_are_never_drawn_and_logprobs_are_renormalised() -> None:
    logits = log_probs(0.5, 0.3, 0.2)
    s = sampler(3, logprobs=3, top_p=0.6, seed=0)  # keeps 0.5 and 0.3 -> 0.625 and 0.375
    draws = [s.sample(logits) for _ in range(200)]
    assert {d.token_id for d in draws} == {0, 1}
    for d in draws:
        assert d.logprob is not None
        assert d.logprob.logprob == pytest.approx(
            math.log(0.625 if d.token_id == 0 else 0.375), abs=1e-6
        )
        assert [i for i, _ in d.logprob.top] == [0, 1]
    top1 = sampler(3, logprobs=3, top_k=1, seed=0).sample(logits)
    assert top1.token_id == 0
    assert top1.logprob is not None and top1.logprob.logprob == 0.0
    assert top1.logprob.top == [(0, 0.0)]


def test_min_p_after_temperature() -> None:
    # T=2 halves log-probs: sqrt-probabilities .8, .4, .2 (normalised .571, .286, .143);
    # min_p 0.3 keeps those >= .3 * .571 = .171: ids 0 and 1 only.
    logits = log_probs(0.64, 0.16, 0.04)
    s = sampler(3, temperature=2.0, min_p=0.3, seed=1)
    assert {s.sample(logits).token_id for _ in range(100)} == {0, 1}


def test_draw_frequencies_follow_the_distribution() -> None:
    s = sampler(3, seed=1234)
    logits = log_probs(0.7, 0.2, 0.1)
    n = 4000
    counts = [0, 0, 0]
    for _ in range(n):
        counts[s.sample(logits).token_id] += 1
    for count, p in zip(counts, (0.7, 0.2, 0.1), strict=True):
        assert abs(count / n - p) < 0.03


def test_the_same_seed_gives_the_same_tokens_and_other_seeds_differ() -> None:
    logits = torch.zeros(100)

    def run(seed: int) -> list[int]:
        s = sampler(100, seed=seed)
        return [s.sample(logits).token_id for _ in range(20)]

    assert run(7) == run(7)
    assert run(7) != run(8)
    assert run(-1) == run(2**64 - 1)  # any Python int is a valid seed


def test_a_seeded_sequence_does_not_depend_on_other_sequences() -> None:
    logits = torch.zeros(50)
    alone = sampler(50, seed=11)
    expected = [alone.sample(logits).token_id for _ in range(10)]
    a, b, c = sampler(50, seed=11), sampler(50, seed=11), sampler(50)
    interleaved = []
    for _ in range(10):
        b.sample(logits)
        c.sample(logits)
        interleaved.append(a.sample(logits).token_id)
    assert interleaved == expected


def test_sample_batch_gives_each_row_its_own_parameters() -> None:
    logits = torch.stack([t(0.0, 1.0, 2.0), t(2.0, 1.0, 0.0)])
    greedy = sampler(3, temperature=0.0)
    penalised = sampler(3, temperature=0.0, logit_bias={0: -10.0})
    out = sample_batch([greedy, penalised], logits, banned=[{2}, ()])
    assert [o.token_id for o in out] == [1, 1]
    seeded = [sampler(3, seed=5), sampler(3, seed=5)]
    rows = sample_batch(seeded, torch.zeros(2, 3))
    assert rows[0].token_id == rows[1].token_id
    with pytest.raises(ValueError, match="shape"):
        sample_batch([greedy], logits)


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"temperature": -0.1}, "temperature"),
        ({"top_p": 0.0}, "top_p"),
        ({"min_p": 1.5}, "min_p"),
        ({"repetition_penalty": 0.0}, "repetition_penalty"),
        ({"logit_bias": {3: 1.0}}, "outside the vocabulary"),
        ({"logit_bias": {-1: 1.0}}, "outside the vocabulary"),
    ],
)
def test_values_the_maths_cannot_honour_are_rejected(
    params: dict[str, object], message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        sampler(3, **params)  # type: ignore[arg-type]
