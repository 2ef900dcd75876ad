"""The warm-up tasks' bookkeeping (supersede, bounds, session end, shutdown, failures)
on an echo engine that holds background requests until told to go: fast, no torch."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncGenerator
from typing import Any

import pytest

from realtime.dialects.chat.request import parse_chat_request
from realtime.dialects.chat.run import ChatRun
from realtime.engine.base import BACKGROUND_PRIORITY, EngineOutput, EngineRequest
from realtime.engine.echo import EchoEngine
from realtime.engine.errors import EngineUnavailable
from realtime.model.info import ModelInfo
from realtime.model.template import ChatTemplate
from realtime.pipeline import ChatPipeline
from realtime.testing.tiny_model import CHATML_TEMPLATE

pytestmark = pytest.mark.anyio


class HeldEcho(EchoEngine):
    """Echo with a ChatML template that defers (here: holds) background requests."""

    schedules_background = True

    def __init__(self) -> None:
        super().__init__()
        self._info = dataclasses.replace(self._info, chat_template=ChatTemplate(CHATML_TEMPLATE))
        self.release = asyncio.Event()
        self.background: list[EngineRequest] = []
        self.closed_background = 0
        self.fail: bool = False
        self.sessions_ended: list[str] = []

    @property
    def info(self) -> ModelInfo:
        return self._info

    def end_session(self, session_id: str) -> None:
        self.sessions_ended.append(session_id)

    async def generate(self, request: EngineRequest) -> AsyncGenerator[EngineOutput, None]:
        if request.priority != BACKGROUND_PRIORITY:
            async for out in super().generate(request):
                yield out
            return
        self.background.append(request)
        try:
            await self.release.wait()
            if self.fail:
                raise EngineUnavailable("engine unavailable: gone")
            async for out in super().generate(request):
                yield out
        finally:
            self.closed_background += 1


async def started(**options: Any) -> tuple[HeldEcho, ChatPipeline]:
    engine = HeldEcho()
    await engine.start()
    return engine, ChatPipeline(engine, **options)


async def answer(pipeline: ChatPipeline, text: str, session: str | None, warm: bool = True) -> Any:
    request = parse_chat_request(
        {
            "model": "echo",
            "messages": [{"role": "user", "content": text}],
            "nvext": {"agent_hints": {"speculative_prefill": warm}},
        }
    )
    prepared = ChatRun.prepare(pipeline, request, session_id=session)
    return await prepared.complete()


async def settle() -> None:
    for _ in range(10):
        await asyncio.sleep(0)


def outcomes(pipeline: ChatPipeline) -> list[str]:
    return [record.outcome for record in pipeline.speculative.stats.recent]


async def test_the_warm_up_is_a_one_token_background_request_of_the_same_session() -> None:
    engine, pipeline = await started()
    await answer(pipeline, "hello there", "s1")
    await settle()
    (request,) = engine.background
    assert request.priority == BACKGROUND_PRIORITY and request.session_id == "s1"
    assert request.stop.max_tokens == 1 and request.sampling.temperature == 0.0
    text = engine.info.tokenizer.decode(request.prompt_token_ids)
    assert text.startswith("<|im_start|>user\nhello there<|im_end|>\n<|im_start|>assistant\n")
    assert text.endswith("<|im_end|>\n<|im_start|>user\n")
    engine.release.set()
    await pipeline.speculative.idle()
    assert outcomes(pipeline) == ["completed"]
    await pipeline.aclose()


async def test_a_newer_answer_in_the_session_supersedes_the_pending_warm_up() -> None:
    engine, pipeline = await started()
    await answer(pipeline, "first", "s1")
    await answer(pipeline, "other session", "s2")
    await settle()
    await answer(pipeline, "second", "s1")
    await settle()
    engine.release.set()
    await pipeline.speculative.idle()
    stats = pipeline.speculative.stats
    assert (stats.scheduled, stats.cancelled, stats.completed) == (3, 1, 2)
    assert engine.closed_background == 3  # the cancelled one's generator was closed
    await pipeline.aclose()


async def test_at_most_max_pending_warm_ups_the_oldest_goes() -> None:
    engine, pipeline = await started(max_speculative=2)
    for text in ("a", "b", "c"):
        await answer(pipeline, text, None)  # no session: nothing supersedes
        await settle()
    assert pipeline.speculative.pending == 2
    engine.release.set()
    await pipeline.speculative.idle()
    assert outcomes(pipeline) == ["cancelled", "completed", "completed"]
    await pipeline.aclose()


async def test_end_session_cancels_its_warm_up_and_tells_the_engine() -> None:
    engine, pipeline = await started()
    await answer(pipeline, "hi", "s1")
    await answer(pipeline, "hi", "s2")
    await settle()
    pipeline.end_session("s1")
    await settle()
    assert engine.sessions_ended == ["s1"] and pipeline.speculative.pending == 1
    engine.release.set()
    await pipeline.speculative.idle()
    assert sorted(outcomes(pipeline)) == ["cancelled", "completed"]
    await pipeline.aclose()


async def test_aclose_cancels_even_warm_ups_that_never_started() -> None:
    engine, pipeline = await started()
    await answer(pipeline, "hi", "s1")  # scheduled, not yet run
    await pipeline.aclose()
    assert engine.background == [] and outcomes(pipeline) == ["cancelled"]
    await answer(pipeline, "again", "s1")
    assert pipeline.speculative.stats.scheduled == 1  # closed: nothing new


async def test_timeouts_and_engine_failures_are_counted_not_raised() -> None:
    engine, pipeline = await started(speculative_timeout=0.05)
    await answer(pipeline, "slow", "s1")
    await pipeline.speculative.idle()  # the engine holds it past the deadline
    engine.fail = True
    engine.release.set()
    await answer(pipeline, "broken", "s1")
    await pipeline.speculative.idle()
    stats = pipeline.speculative.stats
    assert outcomes(pipeline) == ["timed_out", "failed"]
    assert (stats.timed_out, stats.failed, stats.started) == (1, 1, 2)
    await pipeline.aclose()


async def test_no_hint_no_task_and_plain_engines_get_none() -> None:
    engine, pipeline = await started()
    await answer(pipeline, "hi", "s1", warm=False)
    await settle()
    assert pipeline.speculative.stats.scheduled == 0 and engine.background == []
    plain = EchoEngine()
    await plain.start()
    echo_pipeline = ChatPipeline(plain)
    assert not echo_pipeline.speculative.enabled  # echo does not defer background work
    await answer(echo_pipeline, "hi", "s1")
    assert echo_pipeline.speculative.stats.scheduled == 0
    off = ChatPipeline(engine, speculative_timeout=0)
    assert not off.speculative.enabled


def test_bad_options_are_refused() -> None:
    engine = HeldEcho()
    with pytest.raises(ValueError, match="timeout"):
        ChatPipeline(engine, speculative_timeout=-1)
    with pytest.raises(ValueError, match="max_pending"):
        ChatPipeline(engine, max_speculative=0)
