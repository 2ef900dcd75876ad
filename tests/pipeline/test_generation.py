"""The generation loop records every engine request for vLLM's metrics, however it ends:
a finish reason (the engine's or a stop string's) is a success; an engine that raises and
a consumer that stops reading end the record without one. Echo engine, no sockets."""

from __future__ import annotations

from contextlib import aclosing
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from realtime.chat.stops import StopMatcher
from realtime.dialects.chat.completion_run import CompletionRun
from realtime.dialects.chat.completions import parse_completion_request
from realtime.dialects.chat.request import parse_chat_request
from realtime.dialects.chat.run import ChatRun
from realtime.engine.base import EngineRequest, StopConditions
from realtime.engine.echo import EchoEngine
from realtime.observability.vllm_metrics import VllmMetrics
from realtime.pipeline import ChatPipeline
from realtime.pipeline.completions import ChoiceEcho, ChoiceFinish, ChoiceStep, CompletionPipeline
from realtime.pipeline.generation import text_steps
from realtime.protocol.errors import EngineError

pytestmark = pytest.mark.anyio


@pytest.fixture
async def engine() -> EchoEngine:
    echo = EchoEngine()
    await echo.start()
    return echo


def meter_for(engine: EchoEngine) -> VllmMetrics:
    return VllmMetrics(CollectorRegistry(), "echo", engine.info.context_length, engine.snapshot)


def successes(meter: VllmMetrics) -> dict[str, float]:
    return {reason: child.value for reason, child in meter.success.items() if child.value}


def engine_request(engine: EchoEngine, text: str, max_tokens: int = 100) -> EngineRequest:
    ids = engine.info.tokenizer.encode(text)
    return EngineRequest("r", ids, stop=StopConditions(max_tokens=max_tokens))


async def test_a_stop_string_is_a_stop_and_the_tokens_before_it_count(engine: EchoEngine) -> None:
    meter = meter_for(engine)
    request = engine_request(engine, "one two three four five")
    steps = text_steps(engine, request, engine.info.tokenizer, StopMatcher([" three"]), meter=meter)
    async with aclosing(steps):
        finishes = [step.finish async for step in steps]
    assert finishes[-1] is not None and finishes[-1].value == "stop"
    assert successes(meter) == {"stop": 1}
    assert meter.generation_tokens.value == 3  # "one", " two", " three"
    assert meter.prompt_tokens.value == 5
    assert meter.e2e.cells[-1] > 0 and sum(meter.e2e.cells[:-1]) == 1
    assert meter.in_flight == 0


async def test_an_engine_that_raises_ends_the_record_without_a_success(engine: EchoEngine) -> None:
    meter = meter_for(engine)
    engine.fail_after_tokens = 2
    steps = text_steps(
        engine,
        engine_request(engine, "one two three four"),
        engine.info.tokenizer,
        StopMatcher([]),
        meter=meter,
    )
    with pytest.raises(EngineError):
        async with aclosing(steps):
            async for _ in steps:
                pass
    assert successes(meter) == {}
    assert meter.generation_tokens.value == 2
    assert sum(meter.e2e.cells[:-1]) == 0
    assert meter.in_flight == 0


async def test_a_consumer_that_stops_reading_ends_the_record(engine: EchoEngine) -> None:
    meter = meter_for(engine)
    steps = text_steps(
        engine,
        engine_request(engine, "one two three four"),
        engine.info.tokenizer,
        StopMatcher([]),
        meter=meter,
    )
    async with aclosing(steps):
        await steps.__anext__()
        assert meter.in_flight == 1
        assert engine.snapshot().running == 1
    assert meter.in_flight == 0
    assert engine.snapshot().running == 0
    assert successes(meter) == {}
    assert meter.generation_tokens.value == 1


async def test_both_pipelines_record_their_engine_requests(engine: EchoEngine) -> None:
    meter = meter_for(engine)
    chat = ChatPipeline(engine, meter=meter)
    body = {"model": "echo", "messages": [{"role": "user", "content": "hi there"}]}
    await ChatRun.prepare(chat, parse_chat_request(body), stream=False).complete()
    completions = CompletionPipeline(chat)
    prompts = {"model": "echo", "prompt": ["one two", "three"], "max_tokens": 1}
    await CompletionRun.prepare(
        completions, parse_completion_request(prompts), stream=False
    ).complete()
    # The chat answer ends on the echo's last token; each prompt is cut at one token.
    assert successes(meter) == {"stop": 1, "length": 2}
    assert meter.in_flight == 0


async def test_the_completions_pipeline_yields_typed_events_per_choice(engine: EchoEngine) -> None:
    """No wire shapes leave the pipeline: each choice's echo, steps and finish, tagged
    with its index (the chat dialect's `CompletionRun` makes the chunks)."""
    completions = CompletionPipeline(ChatPipeline(engine))
    body = {"model": "echo", "prompt": ["one two", "three"], "max_tokens": 2, "echo": True}
    generation = CompletionRun.prepare(completions, parse_completion_request(body)).prepared
    seen: dict[int, list[Any]] = {0: [], 1: []}
    async with aclosing(completions.events(generation)) as events:
        async for event in events:
            seen[event.index].append(event)
    for index, prompt in enumerate(["one two", "three"]):
        kinds = [type(e) for e in seen[index]]
        assert kinds[0] is ChoiceEcho and seen[index][0].text == prompt
        assert kinds[-1] is ChoiceFinish and all(k is ChoiceStep for k in kinds[1:-1])
        steps = [e.step for e in seen[index][1:-1]]
        assert sum(len(s.token_ids) for s in steps) >= 1
