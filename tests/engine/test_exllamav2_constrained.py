"""The exllamav2 engine under a constraint, against the fake exllamav2.

The fake calls a job's filters as exllamav2 0.3.2 does (generator/dynamic.py and
generator/sampler.py; `realtime/testing/fake_exllamav2.py` names the lines), so
the first tests here pin that order down on its own, with a filter that records
its calls; the rest run the engine with the grammar filter it builds. The "model"
is a seeded random distribution over the tiny model's vocabulary.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import torch

from realtime.constrain import BannedTokens, json_schema_grammar
from realtime.constrain.exllamav2_filter import GrammarFilter
from realtime.constrain.matcher import CompiledConstraint, ConstraintCompiler
from realtime.engine.base import (
    ConstrainingEngine,
    EngineOutput,
    EngineRequest,
    SamplingParams,
    StopConditions,
)
from realtime.engine.errors import EngineRequestError
from realtime.engine.exllamav2.engine import ExLlamaV2Engine
from realtime.model.generation import FinishReason
from realtime.testing import fake_exllamav2 as fake

pytestmark = pytest.mark.anyio
pytest_plugins = ["tests.model_fixtures"]

TICKET = {
    "type": "object",
    "properties": {
        "color": {"type": "string", "enum": ["red", "green", "blue"]},
        "urgent": {"type": "boolean"},
        "priority": {"type": "integer", "minimum": 1, "maximum": 5},
    },
    "required": ["color", "urgent", "priority"],
    "additionalProperties": False,
}
PROMPT = [10, 11, 12, 13]


def vocab_size(model_dir: Path) -> int:
    return int(json.loads((model_dir / "config.json").read_text())["vocab_size"])


def random_model(size: int) -> fake.LogitsFn:
    """Logits drawn from a normal distribution seeded by the sequence: a random model."""

    def logits(sequence: list[int], prompt_length: int) -> list[float]:
        seed = hash((len(sequence), *sequence[-3:])) % 2**31
        generator = torch.Generator().manual_seed(seed)
        return torch.randn(size, generator=generator).tolist()

    return logits


@pytest.fixture
def exl(monkeypatch: pytest.MonkeyPatch, tiny_model_dir: Path) -> Iterator[fake.FakeState]:
    state = fake.install(monkeypatch)
    state.logits_fn = random_model(vocab_size(tiny_model_dir))
    yield state
    state.open_gate()


@asynccontextmanager
async def running(model_dir: Path) -> Any:
    engine = ExLlamaV2Engine(model_dir)
    await engine.start()
    try:
        yield engine
    finally:
        await engine.close()


def compiled(engine: ExLlamaV2Engine, spec: Any) -> CompiledConstraint:
    assert engine.grammar_binding is not None
    return ConstraintCompiler(engine.grammar_binding).compile(spec)


async def generate(
    engine: ExLlamaV2Engine,
    constraint: CompiledConstraint | None,
    *,
    seed: int = 0,
    max_tokens: int = 200,
    ignore_eos: bool = False,
    temperature: float = 1.0,
) -> tuple[list[int], list[EngineOutput]]:
    request = EngineRequest(
        "r",
        PROMPT,
        SamplingParams(temperature=temperature, seed=seed),
        StopConditions(max_tokens=max_tokens, ignore_eos=ignore_eos),
        constraint=constraint,
    )
    outputs = [out async for out in engine.generate(request)]
    return [t for out in outputs for t in out.token_ids], outputs


def text(engine: ExLlamaV2Engine, ids: list[int]) -> str:
    return engine.info.tokenizer.decode(ids, skip_special_tokens=True)


# --- the fake calls filters as exllamav2 0.3.2 does --------------------------------


class RecordingFilter(GrammarFilter):
    """The grammar filter, with a log of the generator's calls into it."""

    masks = True

    def __init__(self, constraint: CompiledConstraint) -> None:
        super().__init__(constraint)
        self.calls: list[str] = []

    def can_mask_logits(self) -> bool:
        return self.masks

    def background_drop(self) -> None:
        self.calls.append("background_drop")
        super().background_drop()

    def begin(self, prefix_str: str = "") -> None:
        self.calls.append("begin")
        super().begin(prefix_str)

    def get_next(self, mask: bool = False) -> Any:
        self.calls.append("get_next(mask)" if mask else "get_next")
        return super().get_next(mask)

    def mask_logits(self, logits: torch.Tensor) -> torch.Tensor:
        self.calls.append("mask_logits")
        assert logits.dim() == 1  # the job's flat (1, 1, vocab) row
        return super().mask_logits(logits)

    def feed(self, token: Any) -> None:
        assert isinstance(token, torch.Tensor) and token.shape == (1, 1)
        self.calls.append("feed")
        super().feed(token)

    def background_prepare_logit_mask(self, pool: Any) -> None:
        self.calls.append("background_prepare_logit_mask")
        super().background_prepare_logit_mask(pool)

    def background_next(self, pool: Any) -> None:
        self.calls.append("background_next")
        super().background_next(pool)


class ListFilter(RecordingFilter):
    """A filter that lists the allowed ids instead of masking (sampler.py's other path)."""

    masks = False


def run_fake_job(
    exl: fake.FakeState, model_dir: Path, flt: RecordingFilter, stop_tokens: list[int]
) -> dict[str, Any]:
    """One job with one filter on the fake generator, to its end; its final result."""
    config = fake.ExLlamaV2Config(str(model_dir))
    model = fake.ExLlamaV2(config)
    cache = fake.ExLlamaV2Cache(model, max_seq_len=4096, lazy=True)
    model.load_autosplit(cache)
    generator = fake.ExLlamaV2DynamicGenerator(model, cache, fake.ExLlamaV2Tokenizer(config))
    job = fake.ExLlamaV2DynamicJob(
        input_ids=torch.tensor([PROMPT]),
        max_new_tokens=300,
        gen_settings=fake.ExLlamaV2Sampler.Settings.greedy(temperature=1.0, top_k=0),
        seed=1,
        stop_conditions=stop_tokens,
        filters=[flt],
    )
    generator.enqueue(job)
    for _ in range(400):
        for result in generator.iterate():
            if result["stage"] == "streaming" and result["eos"]:
                return result
    raise AssertionError("the job never ended")


def test_the_fake_drives_a_masking_filter_in_exllamav2s_order(
    exl: fake.FakeState, tiny_model_dir: Path, compiler: ConstraintCompiler
) -> None:
    """dynamic.py 1867-1872 begin, sampler.py 436-444 mask, dynamic.py 1918-1935 feed and
    queue, dynamic.py 1211-1220 the background mask after the next pass is launched."""
    flt = RecordingFilter(compiler.compile(json_schema_grammar(TICKET)))
    eos = sorted(compiler.binding.eos_token_ids)
    final = run_fake_job(exl, tiny_model_dir, flt, eos)
    assert final["eos_reason"] == "stop_token" and flt.done
    steps = flt.calls.count("feed")
    per_token = ["get_next(mask)", "mask_logits", "feed"]
    expected = ["background_drop", "begin", *per_token]
    expected += ["background_prepare_logit_mask", *per_token] * (steps - 1)
    assert flt.calls == expected
    assert final["eos_triggering_token_id"] in eos


def test_the_fake_drives_a_listing_filter_to_end_filter(
    exl: fake.FakeState, tiny_model_dir: Path, compiler: ConstraintCompiler
) -> None:
    """sampler.py 446-491 and 572-576: the pass list, and `end_filter` on an end token;
    a lone passing token is taken without sampling (474-481)."""
    flt = ListFilter(compiler.compile(json_schema_grammar({"type": "boolean"})))
    final = run_fake_job(exl, tiny_model_dir, flt, stop_tokens=[])
    assert final["eos_reason"] == "end_filter" and flt.done
    assert flt.calls[:3] == ["background_drop", "begin", "get_next"]
    assert "mask_logits" not in flt.calls and "background_next" in flt.calls
    ids = final["token_ids"][0].tolist()
    assert ids[-1] in compiler.binding.eos_token_ids


# --- the engine -------------------------------------------------------------------


async def test_the_engine_binds_its_tokenizer_when_it_loads(exl, tiny_model_dir) -> None:
    engine = ExLlamaV2Engine(tiny_model_dir)
    assert isinstance(engine, ConstrainingEngine) and engine.grammar_binding is None
    async with running(tiny_model_dir) as engine:
        binding = engine.grammar_binding
        assert binding is not None and binding.width == vocab_size(tiny_model_dir)


async def test_sampled_answers_under_a_schema_validate(exl, tiny_model_dir) -> None:
    async with running(tiny_model_dir) as engine:
        constraint = compiled(engine, json_schema_grammar(TICKET))
        answers = set()
        for seed in range(6):
            ids, outputs = await generate(engine, constraint, seed=seed)
            assert outputs[-1].finish_reason is FinishReason.EOS and outputs[-1].stopped_on_token
            answer = text(engine, ids[:-1])
            jsonschema.validate(json.loads(answer), TICKET)
            answers.add(answer)
        (job,) = [j for j in exl.jobs if j.filters][:1]
        assert isinstance(job.filters[0], GrammarFilter)
    assert len(answers) > 1


async def test_a_grammar_ends_with_eos_even_under_ignore_eos(exl, tiny_model_dir) -> None:
    async with running(tiny_model_dir) as engine:
        constraint = compiled(engine, json_schema_grammar({"type": "boolean"}))
        ids, outputs = await generate(engine, constraint, ignore_eos=True)
        assert set(engine.info.tokenizer.eos_token_ids) <= exl.jobs[-1].stop_tokens
    assert outputs[-1].finish_reason is FinishReason.EOS
    assert text(engine, ids[:-1]) in ("true", "false")


async def test_a_ban_under_ignore_eos_adds_no_stop_token(exl, tiny_model_dir) -> None:
    async with running(tiny_model_dir) as engine:
        free, _ = await generate(engine, None, ignore_eos=True, max_tokens=12, temperature=0)
        banned = frozenset(free[:3])
        ban = compiled(engine, BannedTokens(banned, "tool_choice", "tool_choice none"))
        ids, outputs = await generate(engine, ban, ignore_eos=True, max_tokens=12, temperature=0)
        assert not exl.jobs[-1].stop_tokens
    assert outputs[-1].finish_reason is FinishReason.LENGTH and len(ids) == 12
    assert not banned & set(ids)


async def test_max_tokens_cuts_a_constrained_answer_with_length(exl, tiny_model_dir) -> None:
    async with running(tiny_model_dir) as engine:
        constraint = compiled(engine, json_schema_grammar(TICKET))
        full, _ = await generate(engine, constraint, seed=2)
        cut, outputs = await generate(engine, constraint, seed=2, max_tokens=4)
    assert outputs[-1].finish_reason is FinishReason.LENGTH
    assert cut == full[: len(cut)] and 0 < len(cut) <= 4


async def test_a_token_the_grammar_refused_cancels_the_job(
    exl, tiny_model_dir, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A filter that failed to mask (here: one that masks nothing) lets a refused token
    through: the job is cancelled in exllamav2 and the request fails."""
    monkeypatch.setattr(GrammarFilter, "mask_logits", lambda self, logits: logits)
    exl.logits_fn = lambda sequence, prompt_length: [100.0 if t == 120 else 0.0 for t in range(651)]
    async with running(tiny_model_dir) as engine:
        constraint = compiled(engine, json_schema_grammar({"type": "boolean"}))
        ids, outputs = await generate(engine, constraint, max_tokens=50)
        assert exl.generator.num_remaining_jobs() == 0
        (job,) = exl.jobs
        assert job.new_tokens == 1  # ended at the refused token, not 50 tokens later
    assert outputs[-1].finish_reason is FinishReason.ERROR and ids == []  # never shown
    assert "constrained decoding failed" in (outputs[-1].error or "")


async def test_a_constraint_for_another_vocabulary_is_refused(exl, tiny_model_dir) -> None:
    from realtime.constrain.tokenizer import TokenizerBinding

    async with running(tiny_model_dir) as engine:
        binding = engine.grammar_binding
        assert binding is not None
        other = TokenizerBinding(
            engine.info.tokenizer.backend,  # type: ignore[attr-defined]
            eos_token_ids=binding.eos_token_ids,
            logits_width=binding.width + 64,
        )
        constraint = ConstraintCompiler(other).compile(json_schema_grammar({"type": "boolean"}))
        with pytest.raises(EngineRequestError, match="compiled for"):
            await generate(engine, constraint)
