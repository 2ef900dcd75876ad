"""The exllamav2 engine against a fake exllamav2 that follows the library's source.

`fake_exllamav2` stands in for the package (no CUDA here); it reproduces the job
checks, the result dicts per stage, hold-back, eos reasons, paging and cancel the
way exllamav2 0.3.2 does, and counts every forward pass per job so cancellation
is proven by work not done. The model directory is the project's tiny model, so
the tokenizer, chat template and EOS ids are real.
"""

from __future__ import annotations

import asyncio
import json
import math
import subprocess
import sys
import threading
import types
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import aclosing, asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed

from realtime.config import ServerConfig
from realtime.engine.auto import can_run_exllamav2, choose_engine, resolve_engine_name
from realtime.engine.base import (
    BACKGROUND_PRIORITY,
    EngineOutput,
    EngineRequest,
    SamplingParams,
    StopConditions,
)
from realtime.engine.errors import EngineRequestError, EngineUnavailable
from realtime.engine.exllamav2.engine import (
    INSTALL_HINT,
    MIN_LOGPROB,
    ExLlamaV2Backend,
    ExLlamaV2Engine,
    ExLlamaV2LoadError,
)
from realtime.engine.registry import create_engine
from realtime.model.generation import FinishReason
from realtime.model.model_dir import ModelFiles, load_model_dir
from realtime.testing import fake_exllamav2 as fake
from tests.conftest import RunningServer, start_server, wait_until

pytestmark = pytest.mark.anyio
pytest_plugins = ["tests.model_fixtures"]

Logits = Callable[[list[int], int], list[float]]


# --- fixtures and helpers -------------------------------------------------------


@pytest.fixture(scope="module")
def model_dir(tiny_model_dir: Path) -> Path:
    return tiny_model_dir


@pytest.fixture(scope="module")
def files(model_dir: Path) -> ModelFiles:
    return load_model_dir(model_dir)


@pytest.fixture
def exl(monkeypatch: pytest.MonkeyPatch, model_dir: Path) -> Iterator[fake.FakeState]:
    state = fake.install(monkeypatch)
    state.logits_fn = chatty(model_dir)
    yield state
    state.open_gate()  # never leave an engine thread waiting at the gate


def vocab_size(model_dir: Path) -> int:
    return int(json.loads((model_dir / "config.json").read_text())["vocab_size"])


def script(model_dir: Path, tokens: list[int], then: int) -> Logits:
    """A model that answers `tokens`, then `then` forever, with certainty."""
    size = vocab_size(model_dir)

    def logits(sequence: list[int], prompt_length: int) -> list[float]:
        position = len(sequence) - prompt_length
        out = [0.0] * size
        out[tokens[position] if position < len(tokens) else then] = 100.0
        return out

    return logits


def chatty(model_dir: Path) -> Logits:
    """A model that is sure of every next token, printable ASCII, and never stops by itself.

    Tests that count tokens need this: a sampled EOS would end a request early, and a
    byte that starts a multibyte character would be held back by exllamav2.
    """
    size = vocab_size(model_dir)

    def logits(sequence: list[int], prompt_length: int) -> list[float]:
        out = [0.0] * size
        out[33 + len(sequence) % 90] = 100.0
        return out

    return logits


def distribution(model_dir: Path, probs: dict[int, float]) -> Logits:
    """A model whose next-token distribution is always `probs`."""
    size = vocab_size(model_dir)
    out = [-math.inf] * size
    for token, p in probs.items():
        out[token] = math.log(p)
    return lambda sequence, prompt_length: list(out)


def request(
    prompt: list[int] | None = None,
    *,
    max_tokens: int = 8,
    logprobs: int | None = None,
    **stop: Any,
) -> EngineRequest:
    sampling = stop.pop("sampling", SamplingParams())
    return EngineRequest(
        "req",
        prompt if prompt is not None else [10, 11, 12, 13],
        sampling=sampling,
        stop=StopConditions(max_tokens=max_tokens, **stop),
        logprobs=logprobs,
    )


@asynccontextmanager
async def running(engine: ExLlamaV2Engine) -> AsyncIterator[ExLlamaV2Engine]:
    await engine.start()
    try:
        yield engine
    finally:
        fake.state.open_gate()  # a thread held at the gate could not stop
        await engine.close()


async def outputs(engine: ExLlamaV2Engine, req: EngineRequest) -> list[EngineOutput]:
    return [out async for out in engine.generate(req)]


def ids_of(outs: list[EngineOutput]) -> list[int]:
    return [t for out in outs for t in out.token_ids]


async def until(predicate: Callable[[], bool], timeout: float = 10.0) -> None:
    """Wait for the engine thread to reach a state (a condition, not a timing assertion)."""
    for _ in range(int(timeout / 0.005)):
        if predicate():
            return
        await asyncio.sleep(0.005)
    raise AssertionError("condition not reached")


async def step_until(state: fake.FakeState, predicate: Callable[[], bool]) -> None:
    """Let the gated engine thread run one iterate() at a time until `predicate` holds."""
    assert state.step_gate is not None
    for _ in range(500):
        if predicate():
            return
        state.step_gate.release()
        await asyncio.sleep(0.01)
    raise AssertionError("condition not reached")


# --- job construction -----------------------------------------------------------


async def test_jobs_stop_on_every_eos_id_and_the_requests_stop_token_ids(exl, model_dir, files):
    assert len(files.eos_token_ids) >= 2, "the tiny model should have several EOS ids"
    async with running(ExLlamaV2Engine(model_dir)) as engine:
        await outputs(engine, request(stop_token_ids=[65, 99999]))
        await outputs(engine, request(stop_token_ids=[65], ignore_eos=True))
    with_eos, ignoring_eos = exl.jobs
    # Token ids only: stop strings are the pipeline's; an id past the vocabulary can never
    # be sampled and is dropped.
    assert with_eos.stop_tokens == set(files.eos_token_ids) | {65}
    assert with_eos.stop_strings == set()
    assert ignoring_eos.stop_tokens == {65}


async def test_the_prompt_goes_in_as_ids_with_the_requests_limits(exl, model_dir):
    prompt = [5, 600, 7, 8, 9]
    async with running(ExLlamaV2Engine(model_dir)) as engine:
        await outputs(engine, request(prompt, max_tokens=6, min_tokens=2))
    (job,) = exl.jobs
    assert job.input_ids == prompt  # exactly the pipeline's tokens, never re-tokenized
    assert job.max_new_tokens == 6
    assert job.min_new_tokens == 2
    assert job.identifier == 1  # the engine core's job id
    assert job.decode_special_tokens is False


async def test_default_sampling_is_openai_neutral_not_exllamav2s_defaults(exl, model_dir):
    library = fake.ExLlamaV2Sampler.Settings()
    assert (library.temperature, library.top_k, library.top_p) == (0.8, 50, 0.8)
    assert library.token_repetition_penalty == 1.025
    async with running(ExLlamaV2Engine(model_dir)) as engine:
        await outputs(engine, request())
    s = exl.jobs[0].gen_settings
    assert (s.temperature, s.top_k, s.top_p, s.min_p) == (1.0, 0, 1.0, 0.0)
    assert s.token_repetition_penalty == 1.0
    assert (s.token_presence_penalty, s.token_frequency_penalty) == (0.0, 0.0)
    assert (s.typical, s.tfs, s.top_a, s.xtc_probability, s.dry_multiplier) == (0, 0, 0, 0, 0)
    assert s.mirostat is False and s.temperature_last is False
    assert s.token_bias is None


async def test_sampling_params_map_onto_the_sampler_settings(exl, model_dir):
    sampling = SamplingParams(
        temperature=0.7,
        top_p=0.9,
        top_k=40,
        min_p=0.05,
        seed=1234,
        presence_penalty=0.5,
        frequency_penalty=0.25,
        repetition_penalty=1.1,
    )
    async with running(ExLlamaV2Engine(model_dir)) as engine:
        await outputs(engine, request(sampling=sampling))
    job = exl.jobs[0]
    s = job.gen_settings
    assert (s.temperature, s.top_k, s.top_p, s.min_p) == (0.7, 40, 0.9, 0.05)
    assert (s.token_presence_penalty, s.token_frequency_penalty) == (0.5, 0.25)
    assert s.token_repetition_penalty == 1.1
    assert job.seed == 1234


async def test_temperature_zero_is_greedy(exl, model_dir):
    exl.logits_fn = distribution(model_dir, {70: 0.4, 71: 0.35, 72: 0.25})
    async with running(ExLlamaV2Engine(model_dir)) as engine:
        outs = await outputs(engine, request(max_tokens=6, sampling=SamplingParams(temperature=0)))
    s = exl.jobs[0].gen_settings
    assert (s.temperature, s.top_k) == (1.0, 1)  # exllamav2's own greedy form
    assert ids_of(outs) == [70] * 6


async def test_logit_bias_becomes_a_padded_token_bias_and_steers_sampling(exl, model_dir):
    exl.logits_fn = distribution(model_dir, {70: 0.5, 71: 0.5})
    sampling = SamplingParams(temperature=0, logit_bias={71: 5.0, 300: -100.0})
    async with running(ExLlamaV2Engine(model_dir)) as engine:
        outs = await outputs(engine, request(max_tokens=4, sampling=sampling))
    bias = exl.jobs[0].gen_settings.token_bias
    assert bias is not None
    assert bias.shape == (exl.generator.padded_vocab_size,)
    assert exl.generator.padded_vocab_size % 32 == 0
    assert bias[71].item() == 5.0 and bias[300].item() == -100.0
    assert bias.abs().sum().item() == 105.0
    assert ids_of(outs) == [71] * 4


async def test_the_same_seed_gives_the_same_tokens(exl, model_dir):
    exl.logits_fn = distribution(model_dir, {t: 1 / 200 for t in range(200)})

    def seeded(seed: int) -> EngineRequest:
        return request(max_tokens=12, sampling=SamplingParams(seed=seed))

    async with running(ExLlamaV2Engine(model_dir)) as engine:
        first = ids_of(await outputs(engine, seeded(7)))
        again = ids_of(await outputs(engine, seeded(7)))
        other = ids_of(await outputs(engine, seeded(8)))
    assert first == again
    assert first != other


async def test_logprobs_ask_for_probabilities_and_top_tokens(exl, model_dir):
    async with running(ExLlamaV2Engine(model_dir)) as engine:
        for logprobs in (None, 0, 3):
            await outputs(engine, request(max_tokens=2, logprobs=logprobs))
    flags = [(job.return_probs, job.return_top_tokens) for job in exl.jobs]
    assert flags == [(False, 0), (True, 0), (True, 3)]


async def test_requests_exllamav2_cannot_run_are_rejected_alone_as_client_errors(exl, model_dir):
    size = vocab_size(model_dir)
    bad_bias = request(sampling=SamplingParams(logit_bias={size + 5: 1.0}))
    async with running(ExLlamaV2Engine(model_dir, cache_size=512)) as engine:
        with pytest.raises(EngineRequestError, match="outside the model's vocabulary"):
            await outputs(engine, request([1, 2, size]))
        with pytest.raises(EngineRequestError, match="logit_bias token id"):
            await outputs(engine, bad_bias)
        # Too big for a 512-token cache: exllamav2's own assert, turned into a rejection.
        with pytest.raises(EngineRequestError, match="Job requires 3 pages"):
            await outputs(engine, request([1] * 400, max_tokens=300))
        outs = await outputs(engine, request(max_tokens=3))
    assert len(ids_of(outs)) == 3
    assert exl.generator.num_remaining_jobs() == 0
    # The first two never became jobs; the third was refused by enqueue; none ran.
    assert [job.identifier for job in exl.jobs] == [3, 4]
    assert {ident for _, ident, _ in exl.forwards} == {4}


# --- results -> outputs ---------------------------------------------------------


async def test_max_tokens_ends_with_length(exl, model_dir):
    exl.logits_fn = script(model_dir, [20, 21, 22, 23, 24, 25], then=26)
    async with running(ExLlamaV2Engine(model_dir)) as engine:
        outs = await outputs(engine, request(max_tokens=4))
    assert [out.token_ids for out in outs] == [[20], [21], [22], [23]]
    assert [out.finish_reason for out in outs] == [None, None, None, FinishReason.LENGTH]
    assert not any(out.stopped_on_token for out in outs)


async def test_token_ids_come_from_the_results_not_the_text(exl, model_dir, files):
    # With ignore_eos an EOS token is just a special token: "" in exllamav2's text, yet
    # a generated token the client's token ids and usage must count.
    eos = min(files.eos_token_ids)
    exl.logits_fn = script(model_dir, [eos, 30, eos], then=31)
    async with running(ExLlamaV2Engine(model_dir)) as engine:
        outs = await outputs(engine, request(max_tokens=3, ignore_eos=True))
    assert ids_of(outs) == [eos, 30, eos]
    assert outs[-1].finish_reason is FinishReason.LENGTH


async def test_an_eos_token_ends_with_eos_and_is_marked_as_the_stop_token(exl, model_dir, files):
    eos = max(files.eos_token_ids)
    exl.logits_fn = script(model_dir, [40, 41], then=eos)
    async with running(ExLlamaV2Engine(model_dir)) as engine:
        outs = await outputs(engine, request(max_tokens=10))
    assert ids_of(outs) == [40, 41, eos]
    assert outs[-1].finish_reason is FinishReason.EOS
    assert outs[-1].stopped_on_token is True
    assert exl.generator.num_remaining_jobs() == 0


async def test_a_stop_token_id_ends_with_stop(exl, model_dir):
    exl.logits_fn = script(model_dir, [40, 41, 42, 43], then=44)
    async with running(ExLlamaV2Engine(model_dir)) as engine:
        outs = await outputs(engine, request(max_tokens=10, stop_token_ids=[42]))
    assert ids_of(outs) == [40, 41, 42]
    assert outs[-1].finish_reason is FinishReason.STOP
    assert outs[-1].stopped_on_token is True


async def test_held_back_tokens_are_passed_on_together_once_the_text_is_whole(exl, model_dir):
    # In the fake's byte vocabulary, 0xE6 0x97 0xA5 is "日": exllamav2 holds the first
    # two bytes back (their text is U+FFFD) and emits all three with the third.
    sun = list("日".encode())
    eos = 642
    exl.logits_fn = script(model_dir, [*sun, ord("!")], then=eos)
    async with running(ExLlamaV2Engine(model_dir)) as engine:
        outs = await outputs(engine, request(max_tokens=10, logprobs=1))
    assert [out.token_ids for out in outs] == [sun, [ord("!")], [eos]]
    assert [len(out.logprobs or []) for out in outs] == [3, 1, 1]
    assert outs[-1].finish_reason is FinishReason.EOS


async def test_tokens_held_at_a_stop_token_arrive_with_it(exl, model_dir):
    partial = list("日".encode())[:2]  # never completed
    eos = 642
    exl.logits_fn = script(model_dir, [ord("a"), *partial], then=eos)
    async with running(ExLlamaV2Engine(model_dir)) as engine:
        outs = await outputs(engine, request(max_tokens=10, logprobs=0))
    # exllamav2 reports the held bytes and the stop token under "held", not as output.
    assert [out.token_ids for out in outs] == [[ord("a")], [*partial, eos]]
    assert outs[-1].stopped_on_token is True
    assert [e.token_id for e in outs[-1].logprobs or []] == [*partial, eos]
    assert sum(len(out.token_ids) for out in outs) == 4  # exllamav2's new_tokens


async def test_min_tokens_bans_stop_tokens_until_reached(exl, model_dir, files):
    eos = max(files.eos_token_ids)
    exl.logits_fn = distribution(model_dir, {eos: 0.9, 50: 0.1})
    sampling = SamplingParams(temperature=0)
    async with running(ExLlamaV2Engine(model_dir)) as engine:
        outs = await outputs(engine, request(max_tokens=10, min_tokens=3, sampling=sampling))
    assert ids_of(outs) == [50, 50, 50, eos]
    assert outs[-1].finish_reason is FinishReason.EOS


async def test_logprobs_are_the_final_sampling_probabilities(exl, model_dir):
    exl.logits_fn = distribution(model_dir, {70: 0.5, 71: 0.3, 72: 0.2})
    neutral = SamplingParams(temperature=0)
    truncated = SamplingParams(temperature=0.5, top_k=2, seed=3)
    async with running(ExLlamaV2Engine(model_dir)) as engine:
        (plain,) = await outputs(engine, request(max_tokens=1, logprobs=2, sampling=neutral))
        (cut,) = await outputs(engine, request(max_tokens=1, logprobs=3, sampling=truncated))
    assert plain.logprobs is not None and cut.logprobs is not None
    # Greedy is exllamav2's top_k=1: the chosen token had probability 1 after truncation.
    (entry,) = plain.logprobs
    assert entry.token_id == 70 and entry.logprob == 0.0
    assert entry.top[0] == (70, 0.0) and entry.top[1][1] == MIN_LOGPROB
    # Temperature 0.5 squares the odds (0.25 : 0.09 : 0.04); top_k=2 renormalises the two
    # kept, and a third requested entry is exllamav2's zero-probability filler.
    (entry,) = cut.logprobs
    kept = {70: 0.25 / 0.34, 71: 0.09 / 0.34}
    assert [t for t, _ in entry.top[:2]] == [70, 71]
    for (token, logprob), p in zip(entry.top[:2], kept.values(), strict=True):
        assert logprob == pytest.approx(math.log(p))
        assert token in kept
    assert entry.top[2][1] == MIN_LOGPROB and entry.top[2][0] not in kept
    assert entry.logprob == pytest.approx(math.log(kept[entry.token_id]))


async def test_cached_tokens_are_reported_once_and_count_reused_pages(exl, model_dir):
    prompt = [i % 600 for i in range(600)]  # two full 256-token pages and a partial one
    async with running(ExLlamaV2Engine(model_dir)) as engine:
        first = await outputs(engine, request(prompt, max_tokens=3))
        second = await outputs(engine, request(prompt, max_tokens=3))
        other = await outputs(engine, request([7, *prompt[1:]], max_tokens=3))
    # The second prompt finds both full pages by hash and copies the rest of its
    # prompt (87 tokens, all but the last) from the first job's partial page.
    for outs, expected in ((first, 0), (second, 599), (other, 0)):
        reported = [out.cached_tokens for out in outs if out.cached_tokens is not None]
        assert reported == [expected]
    prefill = [n for stage, ident, n in exl.forwards if stage == "prefill"]
    assert prefill == [599, 599]  # the first and the third; the second computed nothing
    assert [(ident, tokens) for ident, _, tokens in exl.copies] == [(2, 87)]


async def test_the_snapshot_reports_jobs_pages_and_prefix_hits(exl, model_dir):
    exl.step_gate = threading.Semaphore(0)
    prompt = [i % 600 for i in range(600)]  # two full 256-token pages and a partial one
    async with running(ExLlamaV2Engine(model_dir, max_batch_size=1)) as engine:
        empty = engine.snapshot()
        assert (empty.running, empty.waiting, empty.prefix_cache_queries) == (0, 0, 0)
        assert empty.kv_cache is not None
        assert (empty.kv_cache.block_size, empty.kv_cache.total_blocks) == (256, 4096 // 256)
        assert empty.kv_cache.used_blocks == 0 and empty.kv_cache.dtype == "fp16"
        first = asyncio.create_task(outputs(engine, request(prompt, max_tokens=3)))
        await until(lambda: engine.snapshot().running == 1)  # held at the end of a step
        second = asyncio.create_task(outputs(engine, request([7, 8, 9], max_tokens=3)))
        # Sent while the engine thread is in a step: it waits for the thread to take it...
        await until(lambda: engine.snapshot().waiting == 1)
        exl.step_gate.release()
        # ...then in exllamav2's queue, as the batch (one job) is full.
        await until(lambda: len(exl.generator.pending_jobs) == 1)
        held = engine.snapshot()
        assert (held.running, held.waiting) == (1, 1)
        assert held.kv_cache is not None
        # exllamav2 takes the pages for the prompt and max_new_tokens when a job starts.
        assert held.kv_cache.used_blocks == 3 == len(exl.generator.referenced_pages)
        exl.open_gate()
        await first
        await second
        again = await outputs(engine, request(prompt, max_tokens=3))
        after = engine.snapshot()
    assert cached_of(again) == 599
    assert (after.running, after.waiting) == (0, 0)
    assert after.kv_cache is not None and after.kv_cache.used_blocks == 0  # pages kept, free
    assert after.prefix_cache_queries == 600 + 3 + 600
    assert after.prefix_cache_hits == 599
    assert after.preemptions == 0


class CannedGenerator:
    """Replays result dicts exllamav2 can send but the fake cannot make (no stop strings)."""

    padded_vocab_size = 672

    def __init__(self, results: list[list[dict[str, Any]]]):
        self.results = results

    def enqueue(self, job: Any) -> int:
        return 0

    def cancel(self, job: Any) -> None: ...

    def iterate(self) -> list[dict[str, Any]]:
        return self.results.pop(0) if self.results else []

    def clear_queue(self) -> None: ...

    def reset_page_table(self) -> None: ...


@pytest.mark.parametrize("reason", ["stop_string", "end_filter", "a_reason_from_the_future"])
def test_other_eos_reasons_end_with_stop_and_keep_their_tokens(exl, reason):
    import torch

    final = {
        "stage": "streaming",
        "identifier": 1,
        "serial": 0,
        "eos": True,
        "eos_reason": reason,
        "text": "ignored",
        "token_ids": torch.tensor([[5, 6]]),
        "cached_tokens": 256,
        "held": {"text": "also ignored"},
    }
    started = {"stage": "started", "identifier": 1, "serial": 0, "eos": False}
    backend = ExLlamaV2Backend(
        CannedGenerator([[started], [final]]),
        job_class=fake.ExLlamaV2DynamicJob,
        settings_class=fake.ExLlamaV2Sampler.Settings,
        torch=torch,
        vocab_size=651,
        eos_token_ids=frozenset({642}),
        context_length=4096,
    )
    backend.add(1, request())
    assert backend.step() == []  # "started" carries nothing
    ((job_id, out),) = backend.step()
    assert job_id == 1
    assert out.token_ids == [5, 6]
    assert out.finish_reason is FinishReason.STOP and not out.stopped_on_token
    assert out.cached_tokens == 256
    assert not backend.has_work()


# --- cache_salt -------------------------------------------------------------------


def salted(prompt: list[int], salt: str | None, *, max_tokens: int = 2) -> EngineRequest:
    return EngineRequest(
        f"salt-{salt}", prompt, stop=StopConditions(max_tokens=max_tokens), cache_salt=salt
    )


def cached_of(outs: list[EngineOutput]) -> int | None:
    (reported,) = [out.cached_tokens for out in outs if out.cached_tokens is not None]
    return reported


def assert_reuse_within_salts(exl: fake.FakeState, salts: list[str | None]) -> None:
    """Every page a job used without computing it holds only KV of its own salt."""
    salt_of = {job.identifier: salt for job, salt in zip(exl.jobs, salts, strict=True)}
    for job in exl.jobs:
        for _, writers in job.reused:
            assert writers, "a reused page holds someone's KV"
            assert {salt_of[w] for w in writers} == {salt_of[job.identifier]}, (
                f"job {job.identifier} ({salt_of[job.identifier]!r}) reused the KV of "
                f"jobs {sorted(writers)}"
            )


SYSTEM = [(i * 7) % 600 for i in range(600)]
PROMPT = [*SYSTEM, 1, 2, 3]  # two full pages and 91 tokens: whole pages and a partial copy


async def test_salted_requests_never_reuse_pages_made_under_another_salt(exl, model_dir):
    salts = ["a", "b", None, "a", "b", None, ""]
    async with running(ExLlamaV2Engine(model_dir)) as engine:
        cached = [cached_of(await outputs(engine, salted(PROMPT, salt))) for salt in salts]
    # Each salt's first request computes the whole prompt, even though the same prompt
    # is in the cache under another salt; its second reuses all of it but the last token.
    assert cached == [0, 0, 0, 602, 602, 602, 0]
    assert_reuse_within_salts(exl, salts)
    assert {n for _, _, n in exl.copies} == {90}  # the partial pages were copied too


async def test_pages_filled_while_decoding_stay_with_their_salt(exl, model_dir):
    async with running(ExLlamaV2Engine(model_dir)) as engine:
        # 200 prompt tokens and 100 more decoded: the first page completes while decoding.
        await outputs(engine, salted(SYSTEM[:200], "a", max_tokens=100))
        follow_up = [*exl.jobs[0].sequence_ids[:256], 9, 9]
        salts = ["a", "b", None, "a"]
        cached = [cached_of(await outputs(engine, salted(follow_up, salt))) for salt in salts[1:]]
    assert cached == [0, 0, 256]
    assert_reuse_within_salts(exl, salts)


async def test_kv_written_only_while_decoding_stays_with_its_salt(exl, model_dir):
    async with running(ExLlamaV2Engine(model_dir)) as engine:
        # A one-token prompt has nothing to prefill: its page is filled by decoding alone.
        await outputs(engine, salted([5], "a", max_tokens=40))
        follow_up = [*exl.jobs[0].sequence_ids[:40], 9]
        salts = ["a", None, "b", "a"]
        cached = [cached_of(await outputs(engine, salted(follow_up, salt))) for salt in salts[1:]]
    assert cached == [0, 0, 40]  # a's partial page, copied for a alone
    assert_reuse_within_salts(exl, salts)


async def test_without_paged_attention_a_salt_never_matches_another_salts_prompt(
    monkeypatch, model_dir
):
    state = fake.install(monkeypatch, paged_attention=False)
    state.logits_fn = chatty(model_dir)
    salts = ["a", "b", "b", "a", None, None]
    async with running(ExLlamaV2Engine(model_dir)) as engine:
        assert engine.paged is False
        cached = [cached_of(await outputs(engine, salted(PROMPT, salt))) for salt in salts]
    # Unpaged there is one page: it holds the last job's tokens, reusable by its salt only.
    assert cached == [0, 0, 602, 0, 0, 602]
    assert_reuse_within_salts(state, salts)


async def test_without_the_hash_hook_salted_requests_are_refused_not_shared(
    monkeypatch, exl, model_dir
):
    # An exllamav2 whose page hashing this engine does not know: it cannot isolate salts.
    unknown = types.ModuleType("exllamav2.generator.dynamic")
    monkeypatch.setitem(sys.modules, "exllamav2.generator.dynamic", unknown)
    async with running(ExLlamaV2Engine(model_dir)) as engine:
        assert engine.salting is False
        with pytest.raises(EngineRequestError, match="cache_salt is not supported"):
            await outputs(engine, salted(PROMPT, "a"))
        unsalted = await outputs(engine, salted(PROMPT, None))
    assert len(ids_of(unsalted)) == 2
    assert [job.identifier for job in exl.jobs] == [2]


# --- background priority (speculative warm-ups) -----------------------------------


def warmup(prompt: list[int], salt: str | None = None) -> EngineRequest:
    """What `SpeculativePrefill` sends: one token, at background priority."""
    return EngineRequest(
        "warm",
        prompt,
        SamplingParams(temperature=0.0),
        StopConditions(max_tokens=1, ignore_eos=True),
        cache_salt=salt,
        priority=BACKGROUND_PRIORITY,
    )


def forwards_of(exl: fake.FakeState, identifier: int) -> list[tuple[str, int]]:
    return [(stage, n) for stage, ident, n in exl.forwards if ident == identifier]


async def test_the_engine_schedules_background_work(model_dir):
    from realtime.engine.base import schedules_background

    assert schedules_background(ExLlamaV2Engine(model_dir))


async def test_a_warm_up_yields_to_a_request_and_resumes_from_its_finished_pages(exl, model_dir):
    exl.step_gate = threading.Semaphore(0)
    long_prompt = [(i * 3) % 600 for i in range(1000)]
    async with running(ExLlamaV2Engine(model_dir)) as engine:
        warm = asyncio.create_task(outputs(engine, warmup(long_prompt)))
        # It prefills alone, a page per iterate(): let it finish two pages.
        await step_until(exl, lambda: exl.work_for(1) == 2)
        assert engine.snapshot().running == 0  # a warm-up is not a client request
        real = asyncio.create_task(outputs(engine, request(PROMPT, max_tokens=5)))
        await asyncio.sleep(0)  # the task queues its request (nothing awaits before that)
        exl.open_gate()
        real_outs = await real
        warm_outs = await warm
    order = [ident for _, ident, _ in exl.forwards]
    first_real, last_real = order.index(2), len(order) - 1 - order[::-1].index(2)
    # Nothing of the warm-up ran from the request's arrival to its end.
    assert 1 not in order[first_real : last_real + 1]
    assert order[:first_real] == [1, 1]
    assert len(ids_of(real_outs)) == 5
    # The warm-up's chunks are a page; the request's prefill is not cut to that size.
    assert forwards_of(exl, 1)[:2] == [("prefill", 256), ("prefill", 256)]
    assert forwards_of(exl, 2)[0] == ("prefill", 602)
    # Afterwards it starts again, finds its two finished pages, and completes.
    assert forwards_of(exl, 1)[2:] == [("prefill", 256), ("prefill", 231), ("gen", 1)]
    assert warm_outs[-1].finish_reason is FinishReason.LENGTH
    assert warm_outs[-1].cached_tokens == 512
    assert (engine.background.yields, engine.background.drops) == (1, 0)
    # Taken out of the generator to start again later: vLLM's preemption.
    assert engine.snapshot().preemptions == 1


async def test_a_warm_up_ends_when_the_turn_it_warms_arrives_and_leaves_its_pages(exl, model_dir):
    exl.step_gate = threading.Semaphore(0)
    prefix = [(i * 3) % 600 for i in range(700)]
    async with running(ExLlamaV2Engine(model_dir)) as engine:
        warm = asyncio.create_task(outputs(engine, warmup(prefix, "t")))
        await step_until(exl, lambda: exl.work_for(1) == 2)
        turn = asyncio.create_task(outputs(engine, salted([*prefix, 5, 6, 7], "t")))
        await asyncio.sleep(0)  # the task queues its request (nothing awaits before that)
        exl.open_gate()
        turn_outs = await turn
        warm_outs = await warm
    assert [out.finish_reason for out in warm_outs] == [FinishReason.CANCELLED]
    assert exl.work_for(1) == 2, "the warm-up ran on after its turn arrived"
    assert cached_of(turn_outs) == 512  # the warm-up's two pages
    assert forwards_of(exl, 2)[0] == ("prefill", 703 - 512 - 1)
    assert (engine.background.yields, engine.background.drops) == (0, 1)


async def test_a_warm_up_of_another_salt_is_not_taken_for_the_turn(exl, model_dir):
    exl.step_gate = threading.Semaphore(0)
    prefix = [(i * 3) % 600 for i in range(700)]
    async with running(ExLlamaV2Engine(model_dir)) as engine:
        warm = asyncio.create_task(outputs(engine, warmup(prefix, "other")))
        await step_until(exl, lambda: exl.work_for(1) == 2)
        turn = asyncio.create_task(outputs(engine, salted([*prefix, 5, 6, 7], "t")))
        await asyncio.sleep(0)  # the task queues its request (nothing awaits before that)
        exl.open_gate()
        turn_outs = await turn
        warm_outs = await warm
    assert cached_of(turn_outs) == 0
    assert warm_outs[-1].finish_reason is FinishReason.LENGTH  # it yielded, then finished
    assert (engine.background.yields, engine.background.drops) == (1, 0)


async def test_background_requests_wait_while_any_request_runs(exl, model_dir):
    exl.step_gate = threading.Semaphore(0)
    async with running(ExLlamaV2Engine(model_dir)) as engine:
        real = asyncio.create_task(outputs(engine, request(max_tokens=20)))
        await step_until(exl, lambda: exl.work_for(1) >= 1)
        warm = asyncio.create_task(outputs(engine, warmup(PROMPT)))
        await asyncio.sleep(0)  # the task queues its request (nothing awaits before that)
        exl.open_gate()
        await real
        await warm
    order = [ident for _, ident, _ in exl.forwards]
    assert order.index(2) > len(order) - 1 - order[::-1].index(1)  # strictly after


async def test_cancelling_a_waiting_or_running_warm_up_stops_it(exl, model_dir):
    exl.step_gate = threading.Semaphore(0)
    long_prompt = [(i * 3) % 600 for i in range(1000)]
    async with running(ExLlamaV2Engine(model_dir)) as engine:
        real = asyncio.create_task(outputs(engine, request(max_tokens=30)))
        await step_until(exl, lambda: exl.work_for(1) >= 1)
        waiting = asyncio.create_task(outputs(engine, warmup(PROMPT)))
        await asyncio.sleep(0)  # queued behind the running request
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting
        exl.open_gate()
        await until(lambda: engine.stats.jobs_cancelled == 1)
        await real
        exl.step_gate = threading.Semaphore(0)
        running_warmup = asyncio.create_task(outputs(engine, warmup(long_prompt)))
        await until(lambda: exl.work_for(3) == 1)  # its first chunk, then the gate
        running_warmup.cancel()
        with pytest.raises(asyncio.CancelledError):
            await running_warmup
        exl.open_gate()
        await until(lambda: engine.stats.jobs_cancelled == 2)
        after = await outputs(engine, request(max_tokens=3))
    assert exl.work_for(2) == 0
    assert exl.work_for(3) == 1
    assert len(ids_of(after)) == 3
    assert exl.generator.num_remaining_jobs() == 0
    assert engine.stats.jobs_added == 4


# --- cancellation ---------------------------------------------------------------


async def test_cancel_mid_prefill_stops_the_prefill(exl, model_dir):
    exl.step_gate = threading.Semaphore(0)
    async with running(ExLlamaV2Engine(model_dir, max_chunk_size=256)) as engine:
        long_prompt = [i % 600 for i in range(1000)]  # four 256-token prefill chunks
        task = asyncio.create_task(outputs(engine, request(long_prompt, max_tokens=5)))
        # One permit: the first iterate() starts the job and prefills a chunk; the second
        # prefills another and then waits at the gate, so nothing more can happen yet.
        exl.step_gate.release()
        await until(lambda: exl.work_for(1) == 2)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        work_at_cancel = exl.work_for(1)
        exl.open_gate()
        await until(lambda: engine.stats.jobs_cancelled == 1)
        after = await outputs(engine, request(max_tokens=4))  # the engine keeps stepping
    assert len(ids_of(after)) == 4
    assert work_at_cancel == 2
    assert exl.work_for(1) == work_at_cancel, "the cancelled prefill kept running"
    assert [stage for stage, ident, _ in exl.forwards if ident == 1] == ["prefill", "prefill"]
    assert exl.generator.num_remaining_jobs() == 0
    assert exl.generator.referenced_pages == {}  # its pages went back to the pool


async def test_cancel_mid_decode_stops_decoding(exl, model_dir):
    exl.step_gate = threading.Semaphore(0)
    async with running(ExLlamaV2Engine(model_dir)) as engine:
        got: list[int] = []
        exl.step_gate.release()
        async with aclosing(engine.generate(request(max_tokens=1000))) as stream:
            async for out in stream:
                got.extend(out.token_ids)
                if got:
                    break
        exl.open_gate()
        await until(lambda: engine.stats.jobs_cancelled == 1)
        work_at_cancel = exl.work_for(1)
        after = await outputs(engine, request(max_tokens=4))  # many more iterate() calls
    assert len(ids_of(after)) == 4
    assert exl.work_for(1) == work_at_cancel, "the cancelled job kept decoding"
    decode_steps = [stage for stage, ident, _ in exl.forwards if ident == 1].count("gen")
    assert 1 <= decode_steps <= 2  # the step that produced the token, at most one more
    assert exl.generator.num_remaining_jobs() == 0


async def test_cancel_of_a_job_still_waiting_for_a_batch_slot(exl, model_dir):
    exl.step_gate = threading.Semaphore(0)
    async with running(ExLlamaV2Engine(model_dir, max_batch_size=1)) as engine:
        first = asyncio.create_task(outputs(engine, request(max_tokens=50)))
        await step_until(exl, lambda: exl.work_for(1) >= 1)
        waiting = asyncio.create_task(outputs(engine, request(max_tokens=3)))
        await step_until(exl, lambda: len(exl.generator.pending_jobs) == 1)
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting
        exl.open_gate()
        await until(lambda: engine.stats.jobs_cancelled == 1)
        assert len(ids_of(await first)) == 50
    assert exl.work_for(2) == 0
    assert exl.generator.pending_jobs == []


# --- a failing generator --------------------------------------------------------


@pytest.mark.parametrize("stage", ["prefill", "gen"])
async def test_a_generator_exception_fails_the_active_requests_and_the_engine_recovers(
    exl, model_dir, stage
):
    prompt = list(range(300))  # more than a page, so the prefix cache matters
    # The failing request shares the first page but not the rest, so it prefills.
    diverging = [*prompt[:256], *range(400, 444)]
    async with running(ExLlamaV2Engine(model_dir)) as engine:
        before = await outputs(engine, request(prompt, max_tokens=3))
        exl.fail_next = (stage, RuntimeError("CUDA error: an illegal memory access"))
        with pytest.raises(EngineUnavailable) as failure:
            await outputs(engine, request(diverging, max_tokens=3))
        after = await outputs(engine, request(prompt, max_tokens=3))
    assert "RuntimeError" in failure.value.message
    assert "illegal memory access" not in failure.value.message  # no internals to clients
    assert len(ids_of(before)) == len(ids_of(after)) == 3
    assert engine.stats.step_failures == 1
    # Recovery dropped the page table, which the failed pass may have corrupted: the
    # next request reuses nothing.
    assert exl.generator.page_table_resets == 1
    assert [out.cached_tokens for out in after if out.cached_tokens is not None] == [0]
    assert exl.generator.num_remaining_jobs() == 0


async def test_every_request_active_in_the_failed_step_fails(exl, model_dir):
    exl.step_gate = threading.Semaphore(0)
    async with running(ExLlamaV2Engine(model_dir)) as engine:
        one = asyncio.create_task(outputs(engine, request(max_tokens=50)))
        two = asyncio.create_task(outputs(engine, request(max_tokens=50)))
        await step_until(exl, lambda: len(exl.generator.active_jobs) == 2)
        exl.fail_next = ("gen", RuntimeError("device lost"))
        exl.open_gate()
        results = await asyncio.gather(one, two, return_exceptions=True)
        assert all(isinstance(r, EngineUnavailable) for r in results)
        assert len(ids_of(await outputs(engine, request(max_tokens=2)))) == 2


# --- starting ---------------------------------------------------------------------


def test_the_module_imports_without_exllamav2_or_cuda():
    code = (
        "import sys, realtime.engine.exllamav2;"
        "assert 'exllamav2' not in sys.modules and 'torch' not in sys.modules, sorted(sys.modules)"
    )
    root = Path(__file__).resolve().parents[2]
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60, cwd=root)


async def test_starting_without_cuda_fails_with_a_clear_message(monkeypatch, model_dir):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)  # as on this machine
    engine = ExLlamaV2Engine(model_dir)
    assert engine.info.name == model_dir.name  # the model directory loads without CUDA
    with pytest.raises(ExLlamaV2LoadError) as failure:
        await engine.start()
    message = str(failure.value)
    assert message.startswith(INSTALL_HINT + ": ")
    assert "CUDA" in message
    assert engine.unavailable_reason == message
    assert not engine.ready
    with pytest.raises(EngineUnavailable):
        await outputs(engine, request())
    await engine.close()


async def test_no_cuda_is_reported_before_exllamav2_is_imported(monkeypatch, model_dir):
    state = fake.install(monkeypatch, cuda=False)
    with pytest.raises(ExLlamaV2LoadError, match=r"torch sees no CUDA device|no CUDA support"):
        await ExLlamaV2Engine(model_dir).start()
    assert state.models == []


async def test_a_broken_exllamav2_install_fails_start_clearly(monkeypatch, exl, model_dir):
    monkeypatch.setitem(sys.modules, "exllamav2", None)  # import raises ImportError
    with pytest.raises(ExLlamaV2LoadError, match="importing exllamav2 failed") as failure:
        await ExLlamaV2Engine(model_dir).start()
    assert str(failure.value).startswith(INSTALL_HINT)


async def test_a_model_exllamav2_cannot_load_fails_start_with_its_reason(monkeypatch, model_dir):
    fake.install(monkeypatch, paged_attention=False)
    engine = ExLlamaV2Engine(model_dir, paged=True)
    with pytest.raises(ExLlamaV2LoadError, match="Paged attention required Flash Attention"):
        await engine.start()
    assert "could not load" in (engine.unavailable_reason or "")


async def test_by_default_it_autosplits_a_lazy_fp16_cache_and_runs_paged(exl, model_dir):
    async with running(ExLlamaV2Engine(model_dir)) as engine:
        assert engine.ready and engine.paged is True
    (model,) = exl.models
    (cache,) = exl.caches
    assert type(cache) is fake.ExLlamaV2Cache
    assert cache.lazy and model.autosplit_cache is cache and model.gpu_split is None
    assert cache.max_seq_len == engine.cache_size == 4096
    assert model.config.compat_overrides_applied
    assert exl.generator.paged and exl.generator.max_chunk_size == 2048
    assert not model.loaded  # close() unloaded it


@pytest.mark.parametrize(
    ("mode", "cls"),
    [
        ("Q4", fake.ExLlamaV2Cache_Q4),
        ("q6", fake.ExLlamaV2Cache_Q6),
        ("Q8", fake.ExLlamaV2Cache_Q8),
    ],
)
async def test_quantized_cache_modes(exl, model_dir, mode, cls):
    async with running(ExLlamaV2Engine(model_dir, cache_mode=mode)):
        pass
    assert type(exl.caches[0]) is cls


async def test_a_gpu_split_loads_the_model_before_a_real_cache(exl, model_dir):
    options = {"gpu_split": [20, 24.5], "max_batch_size": 8, "max_chunk_size": 512}
    async with running(ExLlamaV2Engine(model_dir, cache_size=8192, **options)) as engine:
        assert engine.info.context_length == 4096  # the model's, within the cache
    (model,) = exl.models
    (cache,) = exl.caches
    assert model.gpu_split == [20.0, 24.5] and model.autosplit_cache is None
    assert not cache.lazy and cache.max_seq_len == 8192
    assert model.config.max_input_len == 512 and model.config.max_attention_size == 512**2
    assert (exl.generator.max_batch_size, exl.generator.max_chunk_size) == (8, 512)


async def test_without_paged_attention_it_runs_one_job_at_a_time(monkeypatch, model_dir):
    state = fake.install(monkeypatch, paged_attention=False)
    state.logits_fn = chatty(model_dir)
    async with running(ExLlamaV2Engine(model_dir, max_batch_size=16)) as engine:
        assert engine.paged is False
        outs = await outputs(engine, request(max_tokens=2))
    assert len(ids_of(outs)) == 2
    assert not state.generator.paged and state.generator.max_batch_size == 1


@pytest.mark.parametrize("flash_attn", [True, False])
async def test_without_flash_attn_torch_attention_stays_off_cudnn(
    monkeypatch, model_dir, flash_attn
):
    """cuDNN's SDPA sets up per new key length (46 ms each on an H100): a fresh server
    decoded at a tenth of its speed until it had seen every length."""
    import torch

    calls: list[bool] = []
    monkeypatch.setattr(torch.backends.cuda, "enable_cudnn_sdp", calls.append)
    state = fake.install(monkeypatch, paged_attention=flash_attn)
    state.logits_fn = chatty(model_dir)
    async with running(ExLlamaV2Engine(model_dir)) as engine:
        outs = await outputs(engine, request(max_tokens=2))
    assert len(ids_of(outs)) == 2
    assert calls == ([] if flash_attn else [False])


def test_the_registry_builds_it_without_importing_exllamav2(monkeypatch, model_dir):
    monkeypatch.delitem(sys.modules, "exllamav2", raising=False)
    engine = create_engine("exllamav2", model_dir=model_dir, cache_mode="Q4")
    assert isinstance(engine, ExLlamaV2Engine)
    assert "exllamav2" not in sys.modules


def test_the_cache_size_rounds_up_to_pages_and_bounds_the_context(model_dir):
    engine = ExLlamaV2Engine(model_dir, cache_size=1000, model_name="served")
    assert engine.cache_size == 1024
    assert engine.info.context_length == 1024
    assert engine.info.name == "served"
    assert engine.unavailable_reason == "the engine has not started"


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"cache_mode": "Q3"}, "cache_mode"),
        ({"cache_size": 0}, "cache_size"),
        ({"max_batch_size": 0}, "max_batch_size"),
        ({"max_chunk_size": 300}, "multiple of 256"),
        ({"gpu_split": [10, -1]}, "gpu_split"),
        ({"gpu_split": []}, "gpu_split"),
    ],
)
def test_bad_options_are_refused_before_anything_loads(model_dir, options, message):
    with pytest.raises(ValueError, match=message):
        ExLlamaV2Engine(model_dir, **options)


# --- --engine auto ----------------------------------------------------------------


def test_auto_picks_exllamav2_when_it_can_run(exl):
    ok, reason = can_run_exllamav2()
    assert ok and "CUDA device" in reason
    assert choose_engine()[0] == "exllamav2"
    assert resolve_engine_name("auto") == "exllamav2"


def test_auto_picks_cpu_without_cuda(monkeypatch):
    fake.install(monkeypatch, cuda=False)
    ok, reason = can_run_exllamav2()
    assert not ok and "CUDA" in reason
    name, why = choose_engine()
    assert name == "cpu" and reason in why


def test_auto_picks_cpu_without_exllamav2(monkeypatch):
    monkeypatch.setitem(sys.modules, "exllamav2", None)
    ok, reason = can_run_exllamav2()
    assert not ok and "pip install 'realtime[exllamav2]'" in reason
    assert resolve_engine_name("auto") == "cpu"
    assert resolve_engine_name("echo") == "echo"


# --- end to end through the server ------------------------------------------------

REPLY = "Hi 日本!"


@pytest.fixture
def served(exl, model_dir, files) -> Iterator[RunningServer]:
    reply = files.tokenizer.encode(REPLY)
    exl.logits_fn = script(model_dir, reply, then=max(files.eos_token_ids))
    engine = ExLlamaV2Engine(model_dir, model_name="exl")
    running_server = start_server(ServerConfig(log_level="warning"), engine)  # type: ignore[arg-type]
    try:
        yield running_server
    finally:
        exl.open_gate()
        running_server.stop()


def body(**extra: Any) -> dict[str, Any]:
    return {"model": "exl", "messages": [{"role": "user", "content": "Say hi"}], **extra}


async def test_end_to_end_over_http_and_the_socket(served, files, exl):
    reply_ids = files.tokenizer.encode(REPLY)
    eos = max(files.eos_token_ids)
    extra = {
        "logprobs": True,
        "top_logprobs": 2,
        "nvext": {"extra_fields": ["completion_token_ids"]},
    }
    async with httpx.AsyncClient(base_url=served.http_url, timeout=30) as client:
        response = await client.post("/v1/chat/completions", json=body(**extra))
    assert response.status_code == 200, response.text
    answer = response.json()
    choice = answer["choices"][0]
    assert choice["message"]["content"] == REPLY
    assert choice["finish_reason"] == "stop"
    assert answer["nvext"]["completion_token_ids"] == [*reply_ids, eos]
    assert answer["usage"]["completion_tokens"] == len(reply_ids) + 1
    logprobs = choice["logprobs"]["content"]
    assert all(entry["logprob"] == 0.0 for entry in logprobs)  # the scripted model is certain
    assert all(len(entry["top_logprobs"]) == 2 for entry in logprobs)

    async with connect(served.ws_url) as ws:
        await ws.send(json.dumps({**body(), "request_id": "a"}))
        text = ""
        while True:
            frame = json.loads(await ws.recv())
            if frame.get("object") == "chat.completion.chunk":
                text += "".join(c["delta"].get("content") or "" for c in frame["choices"])
            if frame.get("type") in ("response.done", "error"):
                break
    assert frame["type"] == "response.done"
    assert text == REPLY
    assert exl.generator.num_remaining_jobs() == 0


async def test_end_to_end_a_generator_failure_is_503_and_1011_then_it_recovers(served, exl):
    async with httpx.AsyncClient(base_url=served.http_url, timeout=30) as client:
        exl.fail_next = ("gen", RuntimeError("CUDA error"))
        failed = await client.post("/v1/chat/completions", json=body(stream=False))
        assert failed.status_code == 503
        assert failed.json()["error"]["code"] == "engine_unavailable"
        ok = await client.post("/v1/chat/completions", json=body())
        assert ok.status_code == 200 and ok.json()["choices"][0]["message"]["content"] == REPLY

    exl.fail_next = ("gen", RuntimeError("CUDA error"))
    async with connect(served.ws_url) as ws:
        await ws.send(json.dumps({**body(), "request_id": "b"}))
        with pytest.raises(ConnectionClosed) as closed:
            while True:
                await ws.recv()
    assert closed.value.rcvd is not None and closed.value.rcvd.code == 1011

    async with httpx.AsyncClient(base_url=served.http_url, timeout=30) as client:
        ok = await client.post("/v1/chat/completions", json=body())
    assert ok.json()["choices"][0]["message"]["content"] == REPLY


async def test_end_to_end_speculative_prefill_warms_the_next_turn(served, exl):
    speculative = served.app.state.pipeline.speculative
    hint = {"nvext": {"agent_hints": {"speculative_prefill": True}}}
    async with httpx.AsyncClient(base_url=served.http_url, timeout=30) as client:
        first = await client.post("/v1/chat/completions", json=body(**hint))
        answer = first.json()["choices"][0]["message"]["content"]
        await asyncio.to_thread(wait_until, lambda: speculative.stats.completed == 1)
        record = speculative.stats.recent[-1]
        messages = [
            {"role": "user", "content": "Say hi"},
            {"role": "assistant", "content": answer},
            {"role": "user", "content": "Again"},
        ]
        # With max_tokens: without one, exllamav2 reserves the whole context, taking
        # (for the job's length) every free page, the warm-up's partial page too.
        second = await client.post(
            "/v1/chat/completions", json={"model": "exl", "messages": messages, "max_tokens": 4}
        )
    assert first.status_code == second.status_code == 200
    assert record.outcome == "completed" and record.prompt_tokens > 0
    usage = second.json()["usage"]
    assert usage["prompt_tokens_details"]["cached_tokens"] == record.prompt_tokens
