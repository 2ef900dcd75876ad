"""`ready.start`: an awaitable run until it first suspends, then resumed or cancelled."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator
from typing import Any

import pytest

from realtime.http.ready import Suspended, start

pytestmark = pytest.mark.anyio


async def test_an_awaitable_that_does_not_suspend_is_finished_at_once():
    async def nothing() -> None:
        pass

    async def ready() -> str:
        await nothing()  # awaits, but nothing suspends
        return "value"

    assert start(ready()) == "value"


async def test_what_it_raises_before_suspending_is_raised_by_start():
    async def broken() -> None:
        raise ValueError("before any await")

    with pytest.raises(ValueError, match="before any await"):
        start(broken())


async def test_a_suspended_awaitable_resumes_with_what_it_waited_for():
    future: asyncio.Future[int] = asyncio.get_running_loop().create_future()
    seen: list[str] = []

    async def waits() -> int:
        seen.append("started")
        got = await future
        await asyncio.sleep(0)  # and suspends again, on a bare yield
        return got + 1

    pending = start(waits())
    assert isinstance(pending, Suspended)
    assert seen == ["started"]  # it ran up to its first await, once
    asyncio.get_running_loop().call_soon(future.set_result, 41)
    assert await pending == 42


async def test_cancelling_the_task_that_awaits_it_cancels_what_it_waits_on():
    future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    ended: list[str] = []

    async def waits() -> None:
        try:
            await future
        except asyncio.CancelledError:
            ended.append("cancelled")
            raise

    async def resume(pending: Suspended[None]) -> None:
        await pending

    pending = start(waits())
    assert isinstance(pending, Suspended)
    task = asyncio.create_task(resume(pending))
    await asyncio.sleep(0)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert future.cancelled() and ended == ["cancelled"]


async def test_cancel_unwinds_it_including_cleanup_that_awaits():
    future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    ended: list[str] = []

    async def waits() -> None:
        try:
            await future
        finally:
            await asyncio.sleep(0.001)  # cleanup that suspends
            ended.append("cleaned up")

    pending = start(waits())
    assert isinstance(pending, Suspended)
    await pending.cancel()
    assert future.cancelled() and ended == ["cleaned up"]


async def test_a_cancelled_pull_leaves_its_async_generator_closable():
    # The SSE writer's case: a pull (`__anext__`) started, given up while suspended.
    gate = asyncio.Event()
    ended: list[str] = []

    async def chunks() -> AsyncGenerator[int, None]:
        try:
            yield 1
            await gate.wait()
            yield 2
        except asyncio.CancelledError:
            ended.append("cancelled")
            raise

    generator = chunks()
    assert start(generator.__anext__()) == 1
    pending = start(generator.__anext__())
    assert isinstance(pending, Suspended)
    await pending.cancel()
    await generator.aclose()  # no "already running": the pull is over
    assert ended == ["cancelled"]


async def test_a_value_sent_by_the_task_reaches_the_awaitable():
    class Echo:
        """An awaitable that yields once and returns what the task sent back in."""

        def __await__(self) -> Any:
            sent = yield None
            return sent

    pending = start(Echo())
    assert isinstance(pending, Suspended)
    assert await pending is None  # a task sends None after a bare yield
