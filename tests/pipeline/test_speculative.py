"""Multi-turn reuse and speculative next-turn prefill through ChatPipeline (CPU engine,
tiny model). Reuse is proven by the tokens the engine computed, scheduling by its
forward-pass log, and cancellation by its counters; nothing depends on timing."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

pytest_plugins = ["tests.model_fixtures"]

torch = pytest.importorskip("torch")

from realtime.dialects.chat.request import parse_chat_request  # noqa: E402
from realtime.dialects.chat.run import ChatRun  # noqa: E402
from realtime.engine.cpu.engine import CpuEngine  # noqa: E402
from realtime.pipeline import ChatPipeline  # noqa: E402
from realtime.pipeline.speculative import NextTurn  # noqa: E402
from realtime.protocol.output import ParsedOutput  # noqa: E402
from tests.conftest import wait_until  # noqa: E402
from tests.engine.step_gate import step_gate  # noqa: E402

pytestmark = pytest.mark.anyio

MODEL = "tiny"
SYSTEM = {"role": "system", "content": "You are an agent. Read the documents and answer."}
DOCUMENT = "Harbour log: the tide rose at six, the ferry left at seven, the gulls stayed. " * 6


@asynccontextmanager
async def pipeline_on(model_dir: Path, **options: Any) -> AsyncIterator[ChatPipeline]:
    speculative = {k: options.pop(k) for k in ("speculative_timeout",) if k in options}
    engine = CpuEngine(model_dir, model_name=MODEL, **options)
    await engine.start()
    pipeline = ChatPipeline(engine, **speculative)
    try:
        yield pipeline
    finally:
        await pipeline.aclose()
        await engine.close()


def cpu(pipeline: ChatPipeline) -> CpuEngine:
    assert isinstance(pipeline.engine, CpuEngine)
    return pipeline.engine


def body(messages: list[dict[str, Any]], *, warm: bool = False, **fields: Any) -> Any:
    data: dict[str, Any] = {
        "model": MODEL,
        "messages": messages,
        "temperature": 0,
        "max_tokens": 10,
        "ignore_eos": True,
        "nvext": {"extra_fields": ["completion_token_ids"]},
        **fields,
    }
    if warm:
        data["nvext"]["agent_hints"] = {"speculative_prefill": True}
    return parse_chat_request(data)


async def turn(
    pipeline: ChatPipeline, messages: list[dict[str, Any]], **options: Any
) -> dict[str, Any]:
    session = options.pop("session_id", None)
    prepared = ChatRun.prepare(
        pipeline, body(messages, **options), stream=False, session_id=session
    )
    completion = await prepared.complete()
    completion["prompt_ids"] = prepared.engine_request.prompt_token_ids
    return completion


def followed(messages: list[dict[str, Any]], completion: dict[str, Any], text: str) -> Any:
    """The conversation the client sends next: its history, the answer as received, more."""
    message = completion["choices"][0]["message"]
    answer = {k: message[k] for k in ("role", "content", "tool_calls") if message.get(k)}
    return [*messages, answer, {"role": "user", "content": text}]


def cached(completion: dict[str, Any]) -> int:
    value: int = completion["usage"]["prompt_tokens_details"]["cached_tokens"]
    return value


def cancelled_in_engine(engine: CpuEngine, request_id: str) -> None:
    """Wait (bounded) for the engine thread to have handled a request's cancel."""
    wait_until(lambda: engine.stats.request(request_id).cancelled)


def shared(a: list[int], b: list[int]) -> int:
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return n


# --- reuse across turns ---


async def test_a_follow_up_reuses_the_prompt_and_the_answer(tiny_model_dir: Path) -> None:
    first_messages = [SYSTEM, {"role": "user", "content": DOCUMENT}]
    async with pipeline_on(tiny_model_dir) as pipeline:
        first = await turn(pipeline, first_messages)
        second_messages = followed(first_messages, first, "And the ferry?")
        second = await turn(pipeline, second_messages)
        stats = cpu(pipeline).stats.request(second["id"])
    generated = first["nvext"]["completion_token_ids"]
    fed = first["prompt_ids"] + generated[:-1]  # the last token was sampled, never fed
    # The template reproduces the answer's tokens here, so all that was fed is reused.
    assert second["prompt_ids"][: len(fed)] == fed
    assert cached(second) == len(fed) == stats.prefill_reused
    assert stats.prefill_computed == len(second["prompt_ids"]) - len(fed)
    assert cached(first) == 0
    async with pipeline_on(tiny_model_dir, max_cache_tokens=0) as cold:
        fresh = await turn(cold, second_messages)
        assert cpu(cold).stats.request(fresh["id"]).prefill_reused == 0
    assert cached(fresh) == 0
    assert fresh["nvext"]["completion_token_ids"] == second["nvext"]["completion_token_ids"]


async def test_cached_tokens_in_usage_are_what_the_engine_skipped(tiny_model_dir: Path) -> None:
    messages = [SYSTEM, {"role": "user", "content": DOCUMENT}]
    async with pipeline_on(tiny_model_dir, prefill_chunk_tokens=32) as pipeline:
        engine = cpu(pipeline)
        results = [await turn(pipeline, messages)]
        for text in ("Next?", "Then?", "And then?"):
            messages = followed(messages, results[-1], text)
            results.append(await turn(pipeline, messages))
        # Streamed too: the usage chunk carries the same figure.
        prepared = ChatRun.prepare(
            pipeline, body(messages, stream=True, stream_options={"include_usage": True})
        )
        chunks = [chunk async for chunk in prepared.stream()]
        streamed = chunks[-1]["usage"]["prompt_tokens_details"]["cached_tokens"]
        for result in results:
            stats = engine.stats.request(result["id"])
            assert cached(result) == stats.prefill_reused
            assert stats.prefill_reused + stats.prefill_computed == result["usage"]["prompt_tokens"]
        assert streamed == engine.stats.request(prepared.delta.id).prefill_reused > 0
    assert all(cached(r) > 0 for r in results[1:])


# --- speculative next-turn prefill ---


async def test_a_warm_up_covers_the_next_turn_prefix(tiny_model_dir: Path) -> None:
    messages = [SYSTEM, {"role": "user", "content": DOCUMENT}]
    async with pipeline_on(tiny_model_dir) as pipeline:
        engine = cpu(pipeline)
        first = await turn(pipeline, messages, warm=True, session_id="s1")
        await pipeline.speculative.idle()
        (record,) = pipeline.speculative.stats.recent
        next_messages = followed(messages, first, "Now summarise the log, please.")
        second = await turn(pipeline, next_messages, session_id="s1")
        warm_stats = engine.stats.request(record.request_id)
        second_stats = engine.stats.request(second["id"])
        stats = pipeline.speculative.stats
    assert (stats.scheduled, stats.started, stats.completed) == (1, 1, 1)
    assert record.outcome == "completed" and record.session_id == "s1"
    # The warm-up extended what turn 1 left (prompt + answer) by the template's closing
    # of the answer and the next user header; the next turn reused all of it.
    left_by_turn_one = len(first["prompt_ids"]) + len(first["nvext"]["completion_token_ids"]) - 1
    assert record.cached_tokens == left_by_turn_one
    assert record.prompt_tokens > left_by_turn_one
    assert stats.tokens_warmed == record.prompt_tokens - left_by_turn_one
    assert warm_stats.prefill_computed == stats.tokens_warmed
    assert warm_stats.priority > 0 and warm_stats.tokens_generated == 1
    assert cached(second) == record.prompt_tokens == second_stats.prefill_reused
    assert shared(second["prompt_ids"], first["prompt_ids"]) == len(first["prompt_ids"])


async def test_without_the_hint_there_is_no_extra_work(tiny_model_dir: Path) -> None:
    messages = [SYSTEM, {"role": "user", "content": DOCUMENT}]
    async with pipeline_on(tiny_model_dir) as pipeline:
        engine = cpu(pipeline)
        first = await turn(pipeline, messages, session_id="s1")
        await asyncio.sleep(0.05)  # room for a (wrong) background task to show up
        await pipeline.speculative.idle()
        own = engine.stats.request(first["id"]).forward_passes
        assert engine.stats.requests_started == 1 == engine.core.stats.jobs_added
        assert engine.stats.forward_passes == own
        assert engine.stats.background_forward_passes == 0
        assert pipeline.speculative.stats.scheduled == 0
        assert ChatRun.prepare(pipeline, body(messages)).prepared.next_turn is None


async def test_aclose_cancels_a_warm_up_in_flight(tiny_model_dir: Path) -> None:
    messages = [SYSTEM, {"role": "user", "content": DOCUMENT}]
    # Without a cache to start from, the warm-up needs many chunks.
    options = {"background_chunk_tokens": 16, "max_cache_tokens": 0}
    async with pipeline_on(tiny_model_dir, **options) as pipeline:
        engine = cpu(pipeline)
        gate = step_gate(engine)
        prepared = ChatRun.prepare(pipeline, body(messages, warm=True, max_tokens=3))
        own_passes = -(-len(prepared.engine_request.prompt_token_ids) // 256) + 2
        gate.allow(own_passes)
        await prepared.complete()
        await gate.until_entered(own_passes + 1)  # the warm-up's first chunk
        assert pipeline.speculative.pending == 1
        await pipeline.aclose()
        gate.open()
        record = pipeline.speculative.stats.recent[-1]
        await asyncio.to_thread(cancelled_in_engine, engine, record.request_id)
        warm_stats = engine.stats.request(record.request_id)
        # Closed: a hinted request schedules nothing more.
        assert ChatRun.prepare(pipeline, body(messages, warm=True)).prepared.next_turn is None
    assert pipeline.speculative.stats.cancelled == 1 and record.outcome == "cancelled"
    assert warm_stats.cancelled and warm_stats.forward_passes == 1
    assert pipeline.speculative.pending == 0


async def test_the_next_turn_arriving_mid_warm_up_takes_its_work_over(
    tiny_model_dir: Path,
) -> None:
    messages = [SYSTEM, {"role": "user", "content": DOCUMENT}]
    async with pipeline_on(tiny_model_dir, background_chunk_tokens=16) as pipeline:
        engine = cpu(pipeline)
        first = await turn(pipeline, messages, session_id="a")
        # Warm session b's next turn by hand: b cannot see session a's cache entries, so
        # the warm-up computes the whole prefix, 16 tokens per step.
        conversation = ChatRun.prepare(pipeline, body(messages, warm=True)).prepared.next_turn
        assert conversation is not None
        content = first["choices"][0]["message"]["content"]
        gate = step_gate(engine)
        pipeline.speculative.schedule(
            NextTurn("warm", conversation, ParsedOutput(content=content), None, "b")
        )
        gate.allow(3)
        await gate.until_entered(4)  # three chunks done, the fourth computing
        next_messages = followed(messages, first, "Go on.")
        second_task = asyncio.create_task(turn(pipeline, next_messages, session_id="b"))
        for _ in range(5):
            await asyncio.sleep(0)
        gate.open()
        second = await second_task
        await pipeline.speculative.idle()
        record = pipeline.speculative.stats.recent[-1]
        warm_stats = engine.stats.request("warm-next")
        second_stats = engine.stats.request(second["id"])
        order = [request_id for request_id, _ in engine.stats.recent_forwards]
    assert record.outcome == "preempted" and pipeline.speculative.stats.preempted == 1
    assert warm_stats.preempted and warm_stats.forward_passes == 4
    # The next turn waited for nothing but the warm-up chunk already computing ...
    assert second_stats.steps_waited == 0
    assert order[order.index(second["id"]) - 4 :].count("warm-next") == 4
    # ... and started from everything the warm-up had computed.
    assert cached(second) == second_stats.prefill_reused == 64 == warm_stats.prefill_computed


async def test_a_warm_up_is_bounded_in_time(tiny_model_dir: Path) -> None:
    messages = [SYSTEM, {"role": "user", "content": DOCUMENT}]
    options = {"speculative_timeout": 0.2, "max_cache_tokens": 0}
    async with pipeline_on(tiny_model_dir, **options) as pipeline:
        engine = cpu(pipeline)
        gate = step_gate(engine)
        prepared = ChatRun.prepare(pipeline, body(messages, warm=True, max_tokens=2))
        own_passes = -(-len(prepared.engine_request.prompt_token_ids) // 256) + 1
        gate.allow(own_passes)
        await prepared.complete()
        await gate.until_entered(own_passes + 1)  # held until the deadline passes
        await pipeline.speculative.idle()
        gate.open()
        record = pipeline.speculative.stats.recent[-1]
        assert record.outcome == "timed_out" and pipeline.speculative.stats.timed_out == 1
        await asyncio.to_thread(cancelled_in_engine, engine, f"{prepared.delta.id}-next")
