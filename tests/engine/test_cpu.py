"""The CPU engine on the tiny random-weight model.

Everything is proven by token ids and counters, never by timing: outputs are compared
with a bare transformers loop, reuse is counted in prompt tokens computed, and
cancellation in forward passes. Where a test needs "the engine is busy right now", it
holds a forward pass open with a gate instead of relying on how long one takes.
"""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import sys
import threading
from collections.abc import AsyncIterator, Callable
from contextlib import aclosing, asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

pytest_plugins = ["tests.model_fixtures"]

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from realtime.engine.base import EngineOutput, EngineRequest, SamplingParams, StopConditions  # noqa: E402
from realtime.engine.cpu.backend import BackendOptions, CpuBackend, CpuStats  # noqa: E402
from realtime.engine.cpu.engine import CpuEngine  # noqa: E402
from realtime.engine.errors import EngineRequestError, EngineUnavailable, RequestPart  # noqa: E402
from realtime.engine.registry import create_engine  # noqa: E402
from realtime.model.generation import FinishReason  # noqa: E402

pytestmark = pytest.mark.anyio

TEXT = "Tell me a story about a lighthouse keeper who counts the waves every night."


# --- helpers ---


@asynccontextmanager
async def running(model_dir: Path, **options: Any) -> AsyncIterator[CpuEngine]:
    engine = CpuEngine(model_dir, **options)
    await engine.start()
    try:
        yield engine
    finally:
        await engine.close()


@dataclass
class Result:
    outputs: list[EngineOutput]

    @property
    def token_ids(self) -> list[int]:
        return [t for out in self.outputs for t in out.token_ids]

    @property
    def finish(self) -> FinishReason | None:
        return self.outputs[-1].finish_reason

    @property
    def logprobs(self) -> list[Any]:
        return [lp for out in self.outputs for lp in out.logprobs or []]


async def run(
    engine: CpuEngine,
    prompt: list[int],
    *,
    request_id: str = "r",
    max_tokens: int = 8,
    ignore_eos: bool = True,
    min_tokens: int = 0,
    stop_token_ids: list[int] | None = None,
    logprobs: int | None = None,
    cache_salt: str | None = None,
    **sampling: Any,
) -> Result:
    sampling.setdefault("temperature", 0.0)
    request = EngineRequest(
        request_id,
        prompt,
        SamplingParams(**sampling),
        StopConditions(
            max_tokens=max_tokens,
            stop_token_ids=stop_token_ids or [],
            ignore_eos=ignore_eos,
            min_tokens=min_tokens,
        ),
        logprobs=logprobs,
        cache_salt=cache_salt,
    )
    outputs = [out async for out in engine.generate(request)]
    assert outputs and outputs[-1].finish_reason is not None
    assert all(out.finish_reason is None for out in outputs[:-1])
    return Result(outputs)


def chat_prompt(engine: CpuEngine, text: str = TEXT) -> list[int]:
    rendered = engine.info.chat_template.render([{"role": "user", "content": text}])
    return engine.info.tokenizer.encode(rendered)


def synthetic_prompt(length: int, first: int = 5) -> list[int]:
    """Token ids inside the tiny vocabulary (651 ids), starting with `first`."""
    return [first] + [7 + (i * 37) % 600 for i in range(length - 1)]


def bare_greedy(model: Any, prompt: list[int], n: int) -> tuple[list[int], list[Any]]:
    """Greedy decoding the plainest way: the whole sequence through the model each step."""
    ids = list(prompt)
    all_logits = []
    with torch.inference_mode():
        for _ in range(n):
            logits = model(input_ids=torch.tensor([ids])).logits[0, -1].float()
            all_logits.append(logits)
            ids.append(int(torch.argmax(logits)))
    return ids[len(prompt) :], all_logits


def next_logits(model: Any, ids: list[int]) -> Any:
    with torch.inference_mode():
        return model(input_ids=torch.tensor([ids])).logits[0, -1].float()


async def until(predicate: Callable[[], bool]) -> None:
    """Wait for the engine thread to reach a state (bounded; not a timing assertion)."""
    for _ in range(2000):
        if predicate():
            return
        await asyncio.sleep(0.005)
    raise AssertionError("the engine did not reach the expected state")


class GatedModel:
    """Stands in for the model: records each forward's input length, and holds the
    forward passes until `open` is set, so a test knows the engine is mid-pass."""

    def __init__(self, model: Any):
        self.model = model
        self.open = threading.Event()
        self.entered = threading.Event()
        self.feeds: list[int] = []

    def __call__(self, **kwargs: Any) -> Any:
        self.feeds.append(int(kwargs["input_ids"].shape[1]))
        self.entered.set()
        if not self.open.wait(timeout=60):
            raise RuntimeError("the test never opened the gate")
        return self.model(**kwargs)


def gate(engine: CpuEngine) -> GatedModel:
    assert engine.backend is not None
    gated = GatedModel(engine.backend.model)
    engine.backend.model = gated
    return gated


@pytest.fixture(scope="module")
def reference(tiny_model_dir: Path) -> Any:
    """The same weights loaded by plain transformers, for parity checks."""
    return transformers.AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32)


# --- lifecycle, registry, validation ---


async def test_lifecycle_and_model_info(tiny_model_dir: Path) -> None:
    engine = create_engine("cpu", model_dir=tiny_model_dir, model_name="tiny")
    assert isinstance(engine, CpuEngine)
    assert engine.info.name == "tiny"
    assert engine.info.context_length == engine.files.context_length
    assert not engine.ready and engine.unavailable_reason == "the model is not loaded yet"
    with pytest.raises(EngineUnavailable):
        await run(engine, [1, 2, 3])
    await engine.start()
    try:
        assert engine.ready and engine.unavailable_reason is None
        assert engine.core.running
    finally:
        await engine.close()
    assert not engine.ready and engine.unavailable_reason == "the engine has stopped"


async def test_missing_weights_fail_start_with_the_loader_error(
    tiny_model_dir: Path, tmp_path: Path
) -> None:
    broken = tmp_path / "no-weights"
    shutil.copytree(tiny_model_dir, broken, ignore=shutil.ignore_patterns("*.safetensors"))
    engine = CpuEngine(broken)
    with pytest.raises(OSError):
        await engine.start()
    assert not engine.ready


def test_bad_options_are_refused(tiny_model_dir: Path) -> None:
    with pytest.raises(ValueError, match="dtype"):
        CpuEngine(tiny_model_dir, dtype="int3")
    with pytest.raises(ValueError, match="prefill_chunk_tokens"):
        CpuEngine(tiny_model_dir, prefill_chunk_tokens=0)
    with pytest.raises(ValueError, match="max_cache_tokens"):
        CpuEngine(tiny_model_dir, max_cache_tokens=-1)


async def test_bfloat16_weights_and_cache(tiny_model_dir: Path) -> None:
    async with running(tiny_model_dir, dtype="bfloat16") as engine:
        assert engine.backend is not None
        assert next(engine.backend.model.parameters()).dtype == torch.bfloat16
        result = await run(engine, chat_prompt(engine), max_tokens=4, logprobs=2)
        again = await run(engine, chat_prompt(engine), max_tokens=4, logprobs=2)
    assert len(result.token_ids) == 4 and again.outputs[0].cached_tokens
    assert all(entry.logprob <= 0.0 and len(entry.top) == 2 for entry in result.logprobs)


async def test_requests_the_model_cannot_run_are_client_errors(tiny_model_dir: Path) -> None:
    async with running(tiny_model_dir) as engine:
        assert engine.backend is not None
        vocab = engine.backend.vocab_size
        with pytest.raises(EngineRequestError, match="prompt token ids"):
            await run(engine, [1, vocab])
        with pytest.raises(EngineRequestError, match="logit_bias"):
            await run(engine, [1, 2], logit_bias={vocab + 5: 1.0})
        with pytest.raises(EngineRequestError, match="min_p"):
            await run(engine, [1, 2], min_p=2.0)  # nvext's min_p is not range-checked upstream
        with pytest.raises(EngineRequestError) as info:
            await run(engine, [1] * engine.info.context_length)
        assert info.value.exceeds_context and info.value.part is RequestPart.PROMPT
        assert engine.stats.forward_passes == 0
        assert len((await run(engine, [1, 2], max_tokens=2)).token_ids) == 2


def test_the_echo_path_never_imports_torch() -> None:
    code = (
        "import sys\n"
        "from realtime.app import engine_from_config\n"
        "from realtime.config import ServerConfig\n"
        "engine_from_config(ServerConfig(engine='echo'))\n"
        "assert 'torch' not in sys.modules and 'transformers' not in sys.modules\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_a_missing_torch_says_how_to_install_it() -> None:
    code = (
        "import sys\n"
        "sys.modules['torch'] = None\n"  # makes `import torch` raise ImportError
        "from realtime.engine.registry import create_engine\n"
        "try:\n"
        "    create_engine('cpu', model_dir='.')\n"
        "except ImportError as exc:\n"
        "    print(exc)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True)
    assert "pip install -c constraints.txt -e '.[cpu]'" in done.stdout


# --- outputs ---


async def test_greedy_output_equals_a_bare_transformers_loop(
    tiny_model_dir: Path, reference: Any
) -> None:
    async with running(tiny_model_dir, prefill_chunk_tokens=16) as engine:
        prompt = chat_prompt(engine)
        assert len(prompt) > 16  # the prefill really is chunked
        result = await run(engine, prompt, max_tokens=16)
        stats = engine.stats.request("r")
    expected, _ = bare_greedy(reference, prompt, 16)
    assert result.token_ids == expected
    assert result.finish is FinishReason.LENGTH
    assert not any(out.stopped_on_token for out in result.outputs)
    assert result.outputs[0].cached_tokens == 0
    assert all(out.cached_tokens is None for out in result.outputs[1:])
    chunks = -(-len(prompt) // 16)
    assert stats.forward_passes == chunks + 15
    assert stats.prefill_computed == len(prompt) and stats.tokens_generated == 16


async def test_logprobs_match_a_manual_log_softmax(tiny_model_dir: Path, reference: Any) -> None:
    async with running(tiny_model_dir) as engine:
        prompt = chat_prompt(engine)
        greedy = await run(engine, prompt, max_tokens=6, logprobs=5)
        tempered = await run(engine, prompt, max_tokens=6, logprobs=3, temperature=0.7, seed=4)
    _, logits = bare_greedy(reference, prompt, 6)
    assert len(greedy.logprobs) == 6
    for token, entry, step_logits in zip(greedy.token_ids, greedy.logprobs, logits, strict=True):
        expected = torch.log_softmax(step_logits, dim=-1)
        assert entry.token_id == token
        assert entry.logprob == pytest.approx(float(expected[token]), abs=1e-4)
        values, ids = torch.topk(expected, 5)
        assert [i for i, _ in entry.top] == ids.tolist()
        assert [v for _, v in entry.top] == pytest.approx(values.tolist(), abs=1e-4)
        assert entry.top[0][0] == token  # greedy takes the most likely token
    # Sampled logprobs are those of the distribution the token was drawn from (T = 0.7).
    ids_so_far = list(prompt)
    for entry in tempered.logprobs:
        expected = torch.log_softmax(next_logits(reference, ids_so_far) / 0.7, dim=-1)
        assert entry.logprob == pytest.approx(float(expected[entry.token_id]), abs=1e-4)
        assert len(entry.top) == 3
        ids_so_far.append(entry.token_id)


async def test_seeded_sampling_is_deterministic_and_differs_across_seeds(
    tiny_model_dir: Path,
) -> None:
    async with running(tiny_model_dir) as engine:
        prompt = chat_prompt(engine)

        async def sample(seed: int | None, request_id: str = "s") -> list[int]:
            result = await run(
                engine, prompt, request_id=request_id, max_tokens=12, temperature=1.0, seed=seed
            )
            return result.token_ids

        first = await sample(1)
        assert await sample(1) == first
        assert await sample(2) != first
        # A concurrent request (unseeded, other prompt) does not change a seeded one.
        other = run(engine, synthetic_prompt(40), request_id="o", max_tokens=12, temperature=1.0)
        together, _ = await asyncio.gather(sample(1, "s2"), other)
        assert together == first


# --- stop conditions ---


async def test_every_eos_id_ends_generation_and_is_marked(tiny_model_dir: Path) -> None:
    async with running(tiny_model_dir) as engine:
        eos_ids = sorted(engine.files.eos_token_ids)
        assert len(eos_ids) >= 2  # the tiny model lists <|im_end|> and <|endoftext|>
        for eos in eos_ids:
            result = await run(
                engine, [1, 2, 3], max_tokens=5, ignore_eos=False, logit_bias={eos: 100.0}
            )
            assert result.token_ids == [eos]
            assert result.finish is FinishReason.EOS
            assert result.outputs[-1].stopped_on_token


async def test_ignore_eos_and_min_tokens(tiny_model_dir: Path) -> None:
    async with running(tiny_model_dir) as engine:
        eos = min(engine.files.eos_token_ids)
        favour_eos = {eos: 100.0}
        ignored = await run(engine, [1, 2, 3], max_tokens=3, logit_bias=favour_eos)
        assert ignored.token_ids == [eos, eos, eos]
        assert ignored.finish is FinishReason.LENGTH
        assert not any(out.stopped_on_token for out in ignored.outputs)
        delayed = await run(
            engine, [1, 2, 3], max_tokens=9, ignore_eos=False, min_tokens=3, logit_bias=favour_eos
        )
        assert len(delayed.token_ids) == 4 and delayed.token_ids[-1] == eos
        assert not set(delayed.token_ids[:3]) & engine.files.eos_token_ids
        assert delayed.finish is FinishReason.EOS and delayed.outputs[-1].stopped_on_token


async def test_stop_token_ids(tiny_model_dir: Path) -> None:
    async with running(tiny_model_dir) as engine:
        prompt = chat_prompt(engine)
        free = (await run(engine, prompt, max_tokens=12)).token_ids
        k = next(i for i in range(1, len(free)) if free[i] not in free[:i])
        stopped = await run(engine, prompt, max_tokens=12, stop_token_ids=[free[k]])
        assert stopped.token_ids == free[: k + 1]
        assert stopped.finish is FinishReason.STOP and stopped.outputs[-1].stopped_on_token
        # min_tokens holds a stop id back too.
        late = await run(
            engine,
            prompt,
            max_tokens=9,
            stop_token_ids=[42],
            min_tokens=2,
            logit_bias={42: 100.0},
        )
        assert (
            len(late.token_ids) == 3 and late.token_ids[-1] == 42 and 42 not in late.token_ids[:2]
        )
        assert late.finish is FinishReason.STOP


async def test_max_tokens_gives_length(tiny_model_dir: Path) -> None:
    async with running(tiny_model_dir) as engine:
        result = await run(engine, [1, 2, 3], max_tokens=1)
    assert len(result.token_ids) == 1 and result.finish is FinishReason.LENGTH


def test_the_context_window_ends_generation_with_length(reference: Any) -> None:
    prompt = synthetic_prompt(10)
    options = BackendOptions(
        context_length=13, eos_token_ids=frozenset(), max_cache_tokens=0, prefill_chunk_tokens=8
    )
    backend = CpuBackend(reference, options, CpuStats())
    request = EngineRequest("ctx", prompt, SamplingParams(temperature=0.0), StopConditions(None))
    backend.add(1, request)
    outputs = []
    while backend.has_work():
        outputs += [out for _, out in backend.step()]
    assert [len(out.token_ids) for out in outputs] == [1, 1, 1]  # 10 + 3 = the whole window
    assert outputs[-1].finish_reason is FinishReason.LENGTH
    with pytest.raises(ValueError, match="context"):
        backend.add(2, EngineRequest("big", synthetic_prompt(13)))


# --- cancellation ---


async def test_cancelling_during_decode_stops_the_forward_passes(tiny_model_dir: Path) -> None:
    async with running(tiny_model_dir) as engine:
        request = EngineRequest(
            "long",
            chat_prompt(engine),
            SamplingParams(temperature=0.0),
            StopConditions(max_tokens=2000, ignore_eos=True),
        )
        received = 0
        async with aclosing(engine.generate(request)) as outputs:
            async for _ in outputs:
                received += 1
                if received == 3:
                    break
        await until(lambda: engine.stats.requests_cancelled == 1)
        stopped_at = engine.stats.request("long").forward_passes
        # The engine keeps working for others, and never again for the cancelled request.
        await run(engine, [1, 2, 3], request_id="next", max_tokens=4)
        assert engine.stats.request("long").forward_passes == stopped_at
    long_stats = engine.stats.request("long")
    assert long_stats.cancelled and long_stats.finish_reason is None
    assert stopped_at < 100
    assert engine.core.stats.jobs_cancelled == 1


async def test_a_cancel_during_a_prefill_chunk_prevents_the_next_chunk(
    tiny_model_dir: Path,
) -> None:
    async with running(tiny_model_dir, prefill_chunk_tokens=16) as engine:
        gated = gate(engine)
        task = asyncio.create_task(run(engine, synthetic_prompt(200), request_id="c"))
        assert await asyncio.to_thread(gated.entered.wait, 30)
        task.cancel()  # the cancel is queued while the first chunk is still computing
        with pytest.raises(asyncio.CancelledError):
            await task
        gated.open.set()
        await until(lambda: engine.stats.requests_cancelled == 1)
        await run(engine, [1, 2, 3], request_id="next", max_tokens=2)
        stats = engine.stats.request("c")
    assert stats.forward_passes == 1 and stats.prefill_computed == 16
    assert stats.tokens_generated == 0


# --- concurrency and the event loop ---


async def test_the_event_loop_runs_while_a_prefill_is_computing(tiny_model_dir: Path) -> None:
    async with running(tiny_model_dir, prefill_chunk_tokens=32) as engine:
        gated = gate(engine)
        long_prompt, short_prompt = synthetic_prompt(300), synthetic_prompt(20, first=9)
        long_task = asyncio.create_task(run(engine, long_prompt, request_id="long", max_tokens=2))
        assert await asyncio.to_thread(gated.entered.wait, 30)
        ticks = 0
        for _ in range(200):  # a blocked loop would never get through this
            await asyncio.sleep(0)
            ticks += 1
        short_task = asyncio.create_task(
            run(engine, short_prompt, request_id="short", max_tokens=3)
        )
        for _ in range(5):
            await asyncio.sleep(0)  # let it hand its request to the engine thread
        assert ticks == 200 and gated.feeds == [32] and not gated.open.is_set()
        gated.open.set()
        long_result, short_result = await long_task, await short_task
    # Prefill chunks take turns and alternate with decode passes: the short request's
    # prompt ran right after the chunk that was computing when it came, its tokens were
    # decoded between the long prompt's chunks, and it was done long before that prefill.
    assert gated.feeds[:7] == [32, 20, 1, 32, 1, 32, 32]
    assert len(long_result.token_ids) == 2 and len(short_result.token_ids) == 3


async def test_concurrent_requests_each_get_their_own_answer(
    tiny_model_dir: Path, reference: Any
) -> None:
    async with running(tiny_model_dir, prefill_chunk_tokens=8) as engine:
        a, b = chat_prompt(engine), chat_prompt(engine, "What is the capital of the moon?")
        got_a, got_b = await asyncio.gather(
            run(engine, a, request_id="a", max_tokens=10),
            run(engine, b, request_id="b", max_tokens=10, logprobs=2),
        )
    assert got_a.token_ids == bare_greedy(reference, a, 10)[0]
    assert got_b.token_ids == bare_greedy(reference, b, 10)[0]
    assert len(got_b.logprobs) == 10 and got_a.logprobs == []


# --- KV prefix reuse ---


async def test_a_shared_prefix_is_reused_and_gives_the_same_tokens(tiny_model_dir: Path) -> None:
    async with running(tiny_model_dir) as engine:
        base = chat_prompt(engine)
        first = await run(engine, base, request_id="first", max_tokens=6)
        follow = base + first.token_ids + engine.info.tokenizer.encode(" And then what?")
        second = await run(engine, follow, request_id="second", max_tokens=8, logprobs=3)
        stats = engine.stats.request("second")
    fed_by_first = len(base) + 5  # the prompt and every generated token but the last
    assert first.outputs[0].cached_tokens == 0
    assert second.outputs[0].cached_tokens == fed_by_first
    assert stats.prefill_reused == fed_by_first
    assert stats.prefill_computed == len(follow) - fed_by_first
    assert engine.stats.prefill_tokens_reused == fed_by_first

    async with running(tiny_model_dir, max_cache_tokens=0) as cold:
        again = await run(cold, follow, request_id="cold", max_tokens=8, logprobs=3)
        cold_stats = cold.stats.request("cold")
    assert cold_stats.prefill_reused == 0 and cold_stats.prefill_computed == len(follow)
    assert again.outputs[0].cached_tokens == 0
    assert again.token_ids == second.token_ids
    for warm, fresh in zip(second.logprobs, again.logprobs, strict=True):
        assert warm.logprob == pytest.approx(fresh.logprob, abs=1e-4)


async def test_the_same_prompt_again_computes_only_its_last_token(tiny_model_dir: Path) -> None:
    async with running(tiny_model_dir) as engine:
        prompt = chat_prompt(engine)
        one = await run(engine, prompt, request_id="one", max_tokens=4)
        two = await run(engine, prompt, request_id="two", max_tokens=4)
        stats = engine.stats.request("two")
    assert one.token_ids == two.token_ids
    assert stats.prefill_reused == len(prompt) - 1 and stats.prefill_computed == 1
    assert stats.forward_passes == 4


async def test_different_cache_salts_never_share_a_prefix(tiny_model_dir: Path) -> None:
    async with running(tiny_model_dir) as engine:
        prompt = chat_prompt(engine)
        await run(engine, prompt, request_id="a1", cache_salt="tenant-a", max_tokens=2)
        await run(engine, prompt, request_id="b1", cache_salt="tenant-b", max_tokens=2)
        await run(engine, prompt, request_id="n1", max_tokens=2)
        await run(engine, prompt, request_id="a2", cache_salt="tenant-a", max_tokens=2)
        stats = engine.stats
    assert stats.request("b1").prefill_reused == 0
    assert stats.request("b1").prefill_computed == len(prompt)
    assert stats.request("n1").prefill_reused == 0
    assert stats.request("a2").prefill_reused == len(prompt) - 1


async def test_lru_eviction_keeps_the_cache_within_its_budget(tiny_model_dir: Path) -> None:
    async with running(tiny_model_dir, max_cache_tokens=100) as engine:
        prompts = {f"p{first}": synthetic_prompt(40, first=first) for first in (1, 2, 3)}
        for name, prompt in prompts.items():
            await run(engine, prompt, request_id=name, max_tokens=1)
            assert engine.stats.cache_tokens <= 100
        assert engine.stats.cache_evictions == 1 and engine.stats.cache_entries == 2
        await run(engine, prompts["p3"], request_id="p3-again", max_tokens=1)
        await run(engine, prompts["p1"], request_id="p1-again", max_tokens=1)
        assert engine.backend is not None
        kept = [tokens[0] for _, tokens in engine.backend.prefixes.entries()]
        stats = engine.stats
    assert stats.request("p3-again").prefill_reused == 39  # still cached
    assert stats.request("p1-again").prefill_reused == 0  # evicted first
    assert kept == [3, 1]  # p2 was the least recently used when p1 came back
    assert stats.cache_tokens == 0  # closing the engine frees the cache


async def test_a_cancelled_request_leaves_its_computed_prefix_behind(tiny_model_dir: Path) -> None:
    async with running(tiny_model_dir, prefill_chunk_tokens=16) as engine:
        prompt = synthetic_prompt(100)
        gated = gate(engine)
        task = asyncio.create_task(run(engine, prompt, request_id="warm", max_tokens=50))
        assert await asyncio.to_thread(gated.entered.wait, 30)
        gated.open.set()
        await until(lambda: engine.stats.request("warm").forward_passes >= 3)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await until(lambda: engine.stats.requests_cancelled == 1)
        computed = engine.stats.request("warm").prefill_computed
        await run(engine, prompt, request_id="real", max_tokens=1)
        reused = engine.stats.request("real").prefill_reused
    assert computed >= 48 and reused == min(computed, len(prompt) - 1)


def test_torch_threads_leave_a_core_to_the_event_loop(tiny_model_dir: Path) -> None:
    import os

    usable = len(os.sched_getaffinity(0))
    assert CpuEngine(tiny_model_dir).threads == max(1, usable - 1)
    assert CpuEngine(tiny_model_dir, threads=3).threads == 3
