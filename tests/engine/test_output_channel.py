"""OutputChannel by hand: the bound, pause and resume, folding, merging, waking."""

from __future__ import annotations

import asyncio

import pytest

from realtime.engine.base import EngineOutput
from realtime.engine.output_channel import OutputChannel, merge_outputs
from realtime.model.generation import FinishReason, TokenLogprob

pytestmark = pytest.mark.anyio


def token(t: int, *, finish: FinishReason | None = None) -> EngineOutput:
    return EngineOutput([t], [TokenLogprob(t, -0.5)], finish)


async def drain(channel: OutputChannel) -> tuple[list[int], list[bool]]:
    loop = asyncio.get_running_loop()
    ids: list[int] = []
    resumes: list[bool] = []
    while True:
        item, resume = channel.take(loop)
        if item is None:
            return ids, resumes
        assert isinstance(item, EngineOutput)
        ids += item.token_ids
        resumes.append(resume)


async def test_a_pausable_job_is_paused_at_the_limit_and_resumed_at_half() -> None:
    channel = OutputChannel(limit=4)
    pushed = [channel.push(token(i), can_pause=True) for i in range(4)]
    assert [p.pause for p in pushed] == [False, False, False, True]
    assert channel.paused and len(channel) == 4
    # One more output from the step that was running: kept, never dropped, no second pause.
    assert not channel.push(token(4), can_pause=True).pause
    loop = asyncio.get_running_loop()
    taken = [channel.take(loop) for _ in range(3)]
    # A resume is asked once, when the queue is down to half the limit (2).
    assert [resume for _, resume in taken] == [False, False, True]
    assert channel.resume_asked
    channel.resumed()
    assert not channel.paused and not channel.resume_asked
    ids, _ = await drain(channel)
    assert [out.token_ids[0] for out, _ in taken if isinstance(out, EngineOutput)] + ids == [
        0,
        1,
        2,
        3,
        4,
    ]
    assert channel.peak == 5


async def test_the_last_output_never_pauses_and_errors_are_never_dropped() -> None:
    channel = OutputChannel(limit=2)
    channel.push(token(1), can_pause=True)
    assert not channel.push(token(2, finish=FinishReason.LENGTH), can_pause=True).pause
    assert not channel.paused


async def test_a_job_that_cannot_pause_is_folded_into_a_bounded_queue() -> None:
    channel = OutputChannel(limit=3)
    for i in range(10):
        assert not channel.push(token(i), can_pause=False).pause
    channel.push(token(10, finish=FinishReason.LENGTH), can_pause=False)
    assert len(channel) == 3 and channel.folded == 8
    loop = asyncio.get_running_loop()
    outs = [channel.take(loop)[0] for _ in range(3)]
    assert all(isinstance(out, EngineOutput) for out in outs)
    merged = [out for out in outs if isinstance(out, EngineOutput)]
    assert [t for out in merged for t in out.token_ids] == list(range(11))
    assert [len(out.logprobs or []) for out in merged] == [len(out.token_ids) for out in merged]
    assert merged[-1].finish_reason is FinishReason.LENGTH


async def test_merge_takes_the_backlog_as_one_output_but_not_past_an_error() -> None:
    channel = OutputChannel(limit=64, merge=True)
    first = EngineOutput([1], None, cached_tokens=7)
    channel.push(first, can_pause=True)
    channel.push(EngineOutput([2]), can_pause=True)
    last = EngineOutput([3], finish_reason=FinishReason.STOP, stopped_on_token=True)
    channel.push(last, can_pause=True)
    loop = asyncio.get_running_loop()
    out, _ = channel.take(loop)
    assert isinstance(out, EngineOutput)
    assert out.token_ids == [1, 2, 3] and out.cached_tokens == 7
    assert out.finish_reason is FinishReason.STOP and out.stopped_on_token

    channel = OutputChannel(limit=64, merge=True)
    channel.push(EngineOutput([1]), can_pause=True)
    channel.push(RuntimeError("boom"), can_pause=True)
    out, _ = channel.take(loop)
    assert isinstance(out, EngineOutput) and out.token_ids == [1]
    error, _ = channel.take(loop)
    assert isinstance(error, RuntimeError)


async def test_without_merge_each_output_comes_alone() -> None:
    channel = OutputChannel(limit=64)
    for i in range(3):
        channel.push(token(i), can_pause=True)
    ids, resumes = await drain(channel)
    assert ids == [0, 1, 2] and resumes == [False, False, False]


async def test_a_waiting_consumer_is_reported_and_woken() -> None:
    channel = OutputChannel()
    loop = asyncio.get_running_loop()
    assert channel.take(loop) == (None, False)  # arms the waiter
    waiting = asyncio.ensure_future(channel.wait())
    await asyncio.sleep(0)
    assert channel.push(token(1), can_pause=True).wake
    channel.notify()
    await asyncio.wait_for(waiting, 5)
    assert channel.waiter is None
    assert not channel.push(token(2), can_pause=True).wake  # nobody waits now


def test_merging_keeps_the_first_cached_count_and_the_last_finish() -> None:
    a = EngineOutput([1, 2], None, cached_tokens=None)
    b = EngineOutput([3], None, FinishReason.EOS, cached_tokens=4, stopped_on_token=True)
    merged = merge_outputs(a, b)
    assert merged.token_ids == [1, 2, 3] and merged.logprobs is None
    assert merged.cached_tokens == 4 and merged.finish_reason is FinishReason.EOS
    assert merged.stopped_on_token


def test_a_limit_below_one_is_refused() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        OutputChannel(limit=0)
