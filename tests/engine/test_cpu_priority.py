"""The CPU engine's background priority, warm-up take-over and session-scoped reuse.

Proven by the engine's schedule (which request each forward pass served, in order)
and its counters, never by timing. A `StepGate` hands the engine thread one forward
pass at a time, so a test knows exactly where the engine is when a request arrives.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

pytest_plugins = ["tests.model_fixtures"]

torch = pytest.importorskip("torch")

from realtime.engine.base import (  # noqa: E402
    BACKGROUND_PRIORITY,
    EngineOutput,
    EngineRequest,
    SamplingParams,
    StopConditions,
)
from realtime.engine.cpu.engine import CpuEngine  # noqa: E402
from realtime.model.generation import FinishReason  # noqa: E402
from tests.engine.step_gate import step_gate  # noqa: E402
from tests.engine.test_cpu import Result, running, synthetic_prompt, until  # noqa: E402

pytestmark = pytest.mark.anyio


async def run(
    engine: CpuEngine,
    prompt: list[int],
    *,
    request_id: str = "r",
    max_tokens: int = 8,
    **fields: Any,
) -> Result:
    """A greedy request (ignoring EOS); `fields` go to EngineRequest (session_id, ...)."""
    request = EngineRequest(
        request_id,
        prompt,
        SamplingParams(temperature=0.0),
        StopConditions(max_tokens=max_tokens, ignore_eos=True),
        **fields,
    )
    return Result(await drain(engine, request))


def warm_up(request_id: str, prompt: list[int], **fields: Any) -> EngineRequest:
    return EngineRequest(
        request_id,
        prompt,
        SamplingParams(temperature=0.0),
        StopConditions(max_tokens=1, ignore_eos=True),
        priority=BACKGROUND_PRIORITY,
        **fields,
    )


async def drain(engine: CpuEngine, request: EngineRequest) -> list[EngineOutput]:
    return [out async for out in engine.generate(request)]


async def let_commands_reach_the_engine() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


def schedule(engine: CpuEngine) -> list[str]:
    return [request_id for request_id, _ in engine.stats.recent_forwards]


# --- priority ---


async def test_a_request_arriving_during_a_warm_up_runs_before_its_next_chunk(
    tiny_model_dir: Path,
) -> None:
    async with running(tiny_model_dir, background_chunk_tokens=16) as engine:
        gate = step_gate(engine)
        warm = asyncio.create_task(drain(engine, warm_up("warm", synthetic_prompt(200))))
        await gate.until_entered(1)  # the warm-up's first chunk is computing
        real = asyncio.create_task(
            run(engine, synthetic_prompt(40, first=9), request_id="real", max_tokens=3)
        )
        await let_commands_reach_the_engine()
        gate.open()
        await real
        outputs = await warm
        order = schedule(engine)
        real_stats, warm_stats = engine.stats.request("real"), engine.stats.request("warm")
    # One warm-up chunk was running when the request came; the request then ran to the
    # end (prefill and 3 tokens: 3 passes) before the warm-up got another step.
    assert order[:4] == ["warm", "real", "real", "real"]
    assert set(order[4:]) == {"warm"}
    assert real_stats.steps_waited == 0 and warm_stats.steps_waited == 0
    assert outputs[-1].finish_reason is FinishReason.LENGTH  # the warm-up still completed
    assert warm_stats.prefill_computed == 200 and warm_stats.forward_passes == 200 // 16 + 1
    assert engine.stats.background_forward_passes == warm_stats.forward_passes


async def test_normal_requests_still_take_turns(tiny_model_dir: Path) -> None:
    async with running(tiny_model_dir, prefill_chunk_tokens=16) as engine:
        gate = step_gate(engine)
        first = asyncio.create_task(run(engine, synthetic_prompt(64), request_id="a"))
        await gate.until_entered(1)
        second = asyncio.create_task(run(engine, synthetic_prompt(64, first=9), request_id="b"))
        await let_commands_reach_the_engine()
        gate.open()
        await asyncio.gather(first, second)
        order = schedule(engine)
    # Prefill chunks take turns at equal priority (a 16-token budget fits one chunk).
    assert order[:4] == ["a", "b", "a", "b"]


async def test_the_next_turn_takes_over_its_own_warm_up(tiny_model_dir: Path) -> None:
    history = synthetic_prompt(200)
    next_turn = history + synthetic_prompt(30, first=11)
    async with running(tiny_model_dir, background_chunk_tokens=16) as engine:
        gate = step_gate(engine)
        warm = asyncio.create_task(drain(engine, warm_up("warm", history)))
        gate.allow(3)
        await gate.until_entered(4)  # three chunks done, the fourth computing
        real = asyncio.create_task(run(engine, next_turn, request_id="real", max_tokens=6))
        await let_commands_reach_the_engine()
        gate.open()
        result = await real
        outputs = await warm
        warm_stats, real_stats = engine.stats.request("warm"), engine.stats.request("real")
        assert engine.stats.requests_preempted == 1
    assert warm_stats.preempted and warm_stats.prefill_computed == 64
    assert outputs[-1].finish_reason is FinishReason.CANCELLED and outputs[-1].token_ids == []
    # The real request started from everything the warm-up had computed.
    assert result.outputs[0].cached_tokens == real_stats.prefill_reused == 64
    assert real_stats.prefill_computed == len(next_turn) - 64
    async with running(tiny_model_dir, max_cache_tokens=0) as cold:
        assert (await run(cold, next_turn, max_tokens=6)).token_ids == result.token_ids


async def test_no_take_over_across_sessions_or_salts(tiny_model_dir: Path) -> None:
    history = synthetic_prompt(120)
    async with running(tiny_model_dir, background_chunk_tokens=16) as engine:
        gate = step_gate(engine)
        warm = asyncio.create_task(
            drain(engine, warm_up("warm", history, session_id="s1", cache_salt="t"))
        )
        gate.allow(2)
        await gate.until_entered(3)
        others = [
            run(engine, [*history, 9, 9], request_id="s2", session_id="s2", cache_salt="t"),
            run(engine, [*history, 9, 9], request_id="salt", session_id="s1", cache_salt="u"),
        ]
        tasks = [asyncio.create_task(other) for other in others]
        await let_commands_reach_the_engine()
        gate.open()
        await asyncio.gather(*tasks)
        outputs = await warm
        stats = engine.stats
    assert outputs[-1].finish_reason is FinishReason.LENGTH
    assert stats.requests_preempted == 0
    assert stats.request("s2").prefill_reused == 0 == stats.request("salt").prefill_reused


# --- sessions ---


async def test_sessions_are_isolated_by_default(tiny_model_dir: Path) -> None:
    prompt = synthetic_prompt(60)
    async with running(tiny_model_dir) as engine:
        await run(engine, prompt, request_id="a1", session_id="A", max_tokens=2)
        await run(engine, prompt, request_id="b1", session_id="B", max_tokens=2)
        await run(engine, prompt, request_id="none", max_tokens=2)
        await run(engine, prompt, request_id="a2", session_id="A", max_tokens=2)
        await run(engine, prompt, request_id="b-salt", session_id="B", cache_salt="x")
        stats = engine.stats
    assert stats.request("b1").prefill_computed == len(prompt)  # B paid in full after A
    assert stats.request("none").prefill_reused == 0
    assert stats.request("a2").prefill_reused == len(prompt) - 1
    assert stats.request("b-salt").prefill_reused == 0


async def test_the_salt_scope_shares_across_sessions_but_never_across_salts(
    tiny_model_dir: Path,
) -> None:
    prompt = synthetic_prompt(60)
    async with running(tiny_model_dir, cache_scope="salt") as engine:
        await run(engine, prompt, request_id="a", session_id="A", cache_salt="t", max_tokens=2)
        await run(engine, prompt, request_id="b", session_id="B", cache_salt="t", max_tokens=2)
        await run(engine, prompt, request_id="none", cache_salt="t", max_tokens=2)
        await run(engine, prompt, request_id="other", session_id="A", cache_salt="u")
        stats = engine.stats
    assert stats.request("b").prefill_reused == len(prompt) - 1
    assert stats.request("none").prefill_reused == len(prompt) - 1
    assert stats.request("other").prefill_reused == 0


@pytest.mark.parametrize("scope", ["session", "salt"])
async def test_ending_a_session_frees_or_unprotects_its_entries(
    tiny_model_dir: Path, scope: str
) -> None:
    prompt = synthetic_prompt(40)
    async with running(tiny_model_dir, cache_scope=scope) as engine:
        assert engine.backend is not None
        prefixes = engine.backend.prefixes
        await run(engine, prompt, request_id="a", session_id="A", max_tokens=2)
        assert set(prefixes.protected()) == {"A"}
        engine.end_session("A")
        await run(engine, [1, 2, 3], request_id="next", max_tokens=1)  # applies it
        assert "A" not in prefixes.protected()
        held = [tokens for _, tokens in prefixes.entries() if len(tokens) > 20]
        assert len(held) == (0 if scope == "session" else 1)
        # A late cancel or finish of the ended session protects nothing again.
        await run(engine, prompt, request_id="late", session_id="A", max_tokens=2)
        assert "A" not in prefixes.protected()


async def test_a_live_sessions_newest_entry_outlives_anonymous_ones(tiny_model_dir: Path) -> None:
    async with running(tiny_model_dir, max_cache_tokens=100) as engine:
        mine = synthetic_prompt(40, first=1)
        await run(engine, mine, request_id="mine", session_id="A", max_tokens=1)
        for first in (2, 3, 4):  # plain LRU would evict "mine" first
            await run(engine, synthetic_prompt(40, first=first), request_id=f"p{first}")
        await run(engine, mine, request_id="again", session_id="A", max_tokens=1)
        stats = engine.stats
    assert stats.cache_evictions >= 2
    assert stats.request("again").prefill_reused == 39


def test_bad_scheduling_and_scope_options_are_refused(tiny_model_dir: Path) -> None:
    with pytest.raises(ValueError, match="cache_scope"):
        CpuEngine(tiny_model_dir, cache_scope="global")
    with pytest.raises(ValueError, match="background_chunk_tokens"):
        CpuEngine(tiny_model_dir, background_chunk_tokens=0)
    assert CpuEngine.schedules_background is True


async def test_an_idle_engine_applies_an_ended_session_on_its_next_request(
    tiny_model_dir: Path,
) -> None:
    async with running(tiny_model_dir) as engine:
        engine.end_session("never-seen")  # harmless
        await run(engine, [1, 2, 3], max_tokens=1)
        await until(lambda: engine.stats.requests_finished == 1)
