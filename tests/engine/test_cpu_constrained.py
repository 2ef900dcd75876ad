"""The CPU engine under a constraint: masked rows, finishing, batching beside free rows.

The model is the tiny random-weight model, so without the mask its answers are never
JSON (tests/constrain/test_structured_sampling.py shows that); with it they always
parse. The server path (HTTP and the socket) is tested in tests/e2e/test_structured.py.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import jsonschema
import pytest

pytest_plugins = ["tests.model_fixtures"]

torch = pytest.importorskip("torch")

from realtime.constrain import BannedTokens, ConstraintLimits, json_schema_grammar  # noqa: E402
from realtime.constrain.matcher import CompiledConstraint, ConstraintCompiler  # noqa: E402
from realtime.engine.base import (  # noqa: E402
    ConstrainingEngine,
    EngineOutput,
    EngineRequest,
    SamplingParams,
    StopConditions,
)
from realtime.engine.cpu.engine import CpuEngine  # noqa: E402
from realtime.model.generation import FinishReason  # noqa: E402

pytestmark = pytest.mark.anyio

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


@asynccontextmanager
async def running(model_dir: Path, **options: Any) -> AsyncIterator[CpuEngine]:
    engine = CpuEngine(model_dir, **options)
    await engine.start()
    try:
        yield engine
    finally:
        await engine.close()


def compiled(engine: CpuEngine, spec: Any) -> CompiledConstraint:
    assert engine.grammar_binding is not None
    return ConstraintCompiler(engine.grammar_binding, ConstraintLimits()).compile(spec)


def prompt(engine: CpuEngine) -> list[int]:
    rendered = engine.info.chat_template.render([{"role": "user", "content": "A ticket, JSON."}])
    return engine.info.tokenizer.encode(rendered)


async def generate(
    engine: CpuEngine,
    constraint: CompiledConstraint | None,
    *,
    request_id: str = "r",
    seed: int = 0,
    temperature: float = 1.0,
    max_tokens: int = 200,
    ignore_eos: bool = False,
    min_tokens: int = 0,
) -> tuple[list[int], list[EngineOutput]]:
    request = EngineRequest(
        request_id,
        prompt(engine),
        SamplingParams(temperature=temperature, seed=seed),
        StopConditions(max_tokens=max_tokens, ignore_eos=ignore_eos, min_tokens=min_tokens),
        constraint=constraint,
    )
    outputs = [out async for out in engine.generate(request)]
    return [t for out in outputs for t in out.token_ids], outputs


def text(engine: CpuEngine, ids: list[int]) -> str:
    return engine.info.tokenizer.decode(ids, skip_special_tokens=True)


async def test_the_engine_binds_its_tokenizer_when_it_loads(tiny_model_dir: Path) -> None:
    engine = CpuEngine(tiny_model_dir)
    assert isinstance(engine, ConstrainingEngine)
    assert engine.grammar_binding is None and engine.grammar_unavailable_reason
    async with running(tiny_model_dir) as engine:
        binding = engine.grammar_binding
        assert binding is not None and engine.grammar_unavailable_reason is None
        assert engine.backend is not None and binding.width == engine.backend.vocab_size
        assert binding.eos_token_ids == engine.info.tokenizer.eos_token_ids


async def test_sampled_answers_under_a_schema_validate_and_end_on_eos(tiny_model_dir: Path) -> None:
    async with running(tiny_model_dir) as engine:
        constraint = compiled(engine, json_schema_grammar(TICKET))
        answers = set()
        for seed in range(3):
            ids, outputs = await generate(engine, constraint, seed=seed)
            assert outputs[-1].finish_reason is FinishReason.EOS and outputs[-1].stopped_on_token
            assert ids[-1] in engine.info.tokenizer.eos_token_ids
            answer = text(engine, ids[:-1])
            jsonschema.validate(json.loads(answer), TICKET)
            answers.add(answer)
        assert len(answers) > 1  # sampled, not forced: the seeds give different answers


async def test_the_grammar_ends_the_answer_even_under_ignore_eos(tiny_model_dir: Path) -> None:
    async with running(tiny_model_dir) as engine:
        constraint = compiled(engine, json_schema_grammar({"type": "boolean"}))
        ids, outputs = await generate(engine, constraint, ignore_eos=True, max_tokens=50)
    assert outputs[-1].finish_reason is FinishReason.EOS and outputs[-1].stopped_on_token
    assert text(engine, ids[:-1]) in ("true", "false")


async def test_max_tokens_cuts_a_constrained_answer_off_with_length(tiny_model_dir: Path) -> None:
    async with running(tiny_model_dir) as engine:
        constraint = compiled(engine, json_schema_grammar(TICKET))
        full, _ = await generate(engine, constraint, seed=3)
        cut, outputs = await generate(engine, constraint, seed=3, max_tokens=5)
    assert outputs[-1].finish_reason is FinishReason.LENGTH and len(cut) == 5
    assert full[:5] == cut  # the partial answer is the start of the whole one


async def test_min_tokens_cannot_hold_open_a_complete_answer(tiny_model_dir: Path) -> None:
    """EOS is banned before min_tokens, but a finished answer allows only EOS: the
    grammar wins, so the answer ends rather than breaking its grammar."""
    async with running(tiny_model_dir) as engine:
        constraint = compiled(engine, json_schema_grammar({"type": "boolean"}))
        ids, outputs = await generate(engine, constraint, min_tokens=30)
    assert outputs[-1].finish_reason is FinishReason.EOS
    assert text(engine, ids[:-1]) in ("true", "false")


async def test_a_ban_keeps_its_tokens_out_and_ends_nothing(tiny_model_dir: Path) -> None:
    async with running(tiny_model_dir) as engine:
        free, _ = await generate(engine, None, temperature=0.0, ignore_eos=True, max_tokens=12)
        banned = frozenset(free[:3])
        ban = compiled(engine, BannedTokens(banned, "tool_choice", "tool_choice none"))
        ids, outputs = await generate(engine, ban, temperature=0.0, ignore_eos=True, max_tokens=12)
    assert outputs[-1].finish_reason is FinishReason.LENGTH and len(ids) == 12
    assert not banned & set(ids) and ids != free


async def test_constrained_and_free_requests_share_passes_without_touching_each_other(
    tiny_model_dir: Path,
) -> None:
    """A batch mixes both: the free rows' greedy tokens are those of a lone run, and every
    constrained answer still validates."""
    async with running(tiny_model_dir) as engine:
        constraint = compiled(engine, json_schema_grammar(TICKET))
        alone, _ = await generate(engine, None, temperature=0.0, ignore_eos=True, max_tokens=24)
        passes = engine.stats.forward_passes
        results = await asyncio.gather(
            generate(
                engine, None, request_id="free", temperature=0.0, ignore_eos=True, max_tokens=24
            ),
            *(generate(engine, constraint, request_id=f"c{s}", seed=s) for s in range(3)),
        )
        assert engine.stats.largest_batch >= 2 and engine.stats.forward_passes > passes
    (free, _), *constrained = results
    assert free == alone
    for ids, outputs in constrained:
        assert outputs[-1].finish_reason is FinishReason.EOS
        jsonschema.validate(json.loads(text(engine, ids[:-1])), TICKET)


async def test_a_constraint_for_another_vocabulary_is_refused(tiny_model_dir: Path) -> None:
    from realtime.constrain.tokenizer import TokenizerBinding
    from realtime.engine.errors import EngineRequestError

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


async def test_a_slow_grammar_parks_only_its_own_sequence(
    tiny_model_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A grammar whose masks take long (a hostile schema, within its step budget) is
    computed off the engine's thread: while its mask is not ready, its sequence is parked
    and the rest of the batch goes on. Here the mask is held up by a gate, so the test
    knows: a neighbour runs all its tokens while the constrained request has none."""
    from realtime.constrain.matcher import GrammarMatcher

    gate = threading.Event()
    fill = GrammarMatcher.fill_bitmask_at

    def gated(self: GrammarMatcher, address: int, words: int) -> None:
        if not gate.wait(60):
            raise RuntimeError("the test never opened the gate")
        fill(self, address, words)

    monkeypatch.setattr(GrammarMatcher, "fill_bitmask_at", gated)
    async with running(tiny_model_dir) as engine:
        constraint = compiled(engine, json_schema_grammar(TICKET))
        slow = asyncio.create_task(generate(engine, constraint, request_id="slow", seed=1))
        try:
            neighbour, outputs = await asyncio.wait_for(
                generate(engine, None, request_id="n", ignore_eos=True, max_tokens=8), 30
            )
            assert len(neighbour) == 8 and outputs[-1].finish_reason is FinishReason.LENGTH
            assert not slow.done()
            assert engine.stats.request("slow").tokens_generated == 0
            assert engine.stats.tokens_parked >= 1  # its logits waited, not the batch
        finally:
            gate.set()
        ids, outputs = await slow
    assert outputs[-1].finish_reason is FinishReason.EOS
    jsonschema.validate(json.loads(text(engine, ids[:-1])), TICKET)


async def test_a_grammar_that_fails_mid_answer_is_the_request_s_fault(
    tiny_model_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A step over its budget fails the request as its own fault (`RequestPart.CONSTRAINT`:
    the client is told which field), not as the engine's; the engine carries on."""
    from realtime.constrain.matcher import GrammarMatcher
    from realtime.engine.errors import RequestPart

    calls = 0
    fill = GrammarMatcher.fill_bitmask_at
    error = GrammarMatcher.error

    def failing_after_three(self: GrammarMatcher, address: int, words: int) -> None:
        nonlocal calls
        calls += 1
        fill(self, address, words)

    monkeypatch.setattr(GrammarMatcher, "fill_bitmask_at", failing_after_three)
    monkeypatch.setattr(
        GrammarMatcher,
        "error",
        property(lambda self: "one token needs more than 5 parser items" if calls > 3 else None),
    )
    async with running(tiny_model_dir) as engine:
        constraint = compiled(engine, json_schema_grammar(TICKET))
        ids, outputs = await generate(engine, constraint, seed=2)
        assert outputs[-1].finish_reason is FinishReason.ERROR
        assert outputs[-1].error_part is RequestPart.CONSTRAINT
        assert "5 parser items" in (outputs[-1].error or "")
        assert len(ids) == 3  # three tokens under working masks, then the failure
        monkeypatch.setattr(GrammarMatcher, "error", error)
        ids, outputs = await generate(engine, constraint, seed=2)
    assert outputs[-1].finish_reason is FinishReason.EOS


LARGE_PARAMETERS = {
    "enum of 3,000 objects": {"enum": [{"k": i} for i in range(3000)]},
    "anyOf of 400 objects": {
        "anyOf": [
            {"type": "object", "properties": {f"p{i}": {"type": "integer"}}, "required": [f"p{i}"]}
            for i in range(400)
        ]
    },
    "1,500 optional properties": {
        "type": "object",
        "properties": {f"property_{i:04d}": {"type": "string"} for i in range(1500)},
        "additionalProperties": False,
    },
}


@pytest.mark.parametrize("argument", list(LARGE_PARAMETERS.values()), ids=list(LARGE_PARAMETERS))
async def test_large_tool_parameters_compile_and_run_to_valid_calls(
    tiny_model_dir: Path, argument: dict[str, Any]
) -> None:
    """Tool parameters of these sizes got a 500 mid-answer under `tool_choice: required`
    (issue 27). Through a server they overflow the tiny model's 4k prompt (tools are in
    the prompt), so the grammar is driven here, on the engine, as the server would."""
    from realtime.chat.tools import ToolSpec
    from realtime.chat.tools.grammar import tool_call_grammar

    schema = {"type": "object", "properties": {"arg": argument}, "required": ["arg"]}
    async with running(tiny_model_dir) as engine:
        binding = engine.grammar_binding
        assert binding is not None
        spec = tool_call_grammar(
            "hermes", [ToolSpec("t", schema)], added_tokens=binding.added_tokens, parallel=False
        )
        constraint = compiled(engine, spec)
        for seed in range(2):
            ids, outputs = await generate(engine, constraint, seed=seed, max_tokens=300)
            assert outputs[-1].finish_reason in (FinishReason.EOS, FinishReason.LENGTH)
            if outputs[-1].finish_reason is FinishReason.EOS:
                written = engine.info.tokenizer.decode(ids[:-1], skip_special_tokens=False)
                call = json.loads(written.split("<tool_call>")[1].split("</tool_call>")[0])
                assert call["name"] == "t"
                jsonschema.validate(call["arguments"], schema)
