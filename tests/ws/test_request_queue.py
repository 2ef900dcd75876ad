"""RequestQueue without sockets: the read-ahead bound, waiting for room, taking a request out."""

from __future__ import annotations

import asyncio

import pytest

from realtime.ws.request_queue import RequestQueue

pytestmark = pytest.mark.anyio


async def test_full_only_when_queue_and_read_ahead_are_both_full():
    queue: RequestQueue[int] = RequestQueue(capacity=2, read_ahead=1)
    for n in range(2):
        queue.put(n)
        assert not queue.full
    queue.put(2)  # the read-ahead
    assert queue.full and len(queue) == 3


async def test_room_comes_back_when_the_dispatcher_takes_one():
    queue: RequestQueue[int] = RequestQueue(capacity=1, read_ahead=0)
    queue.put(1)
    waiter = asyncio.create_task(queue.wait_for_room())
    await asyncio.sleep(0)
    assert not waiter.done()
    assert await queue.get() == 1
    await asyncio.wait_for(waiter, 1)


async def test_taking_a_waiting_request_out_makes_room():
    queue: RequestQueue[str] = RequestQueue(capacity=1, read_ahead=1)
    queue.put("a")
    queue.put("b")
    waiter = asyncio.create_task(queue.wait_for_room())
    await asyncio.sleep(0)
    assert not waiter.done()
    assert queue.take(lambda item: item == "b") == "b"
    await asyncio.wait_for(waiter, 1)
    assert queue.take(lambda item: item == "zzz") is None
    assert await queue.get() == "a"


async def test_get_waits_for_a_request_and_keeps_the_order():
    queue: RequestQueue[int] = RequestQueue(capacity=4, read_ahead=0)
    getter = asyncio.create_task(queue.get())
    await asyncio.sleep(0)
    assert not getter.done()
    queue.put(7)
    queue.put(8)
    assert await asyncio.wait_for(getter, 1) == 7
    assert await queue.get() == 8


async def test_take_all_empties_it_oldest_first():
    queue: RequestQueue[int] = RequestQueue(capacity=2, read_ahead=2)
    for n in range(4):
        queue.put(n)
    assert queue.take_all() == [0, 1, 2, 3]
    assert len(queue) == 0 and not queue.full


async def test_take_removes_only_the_first_match_even_among_equal_items():
    queue: RequestQueue[tuple[int]] = RequestQueue(capacity=3, read_ahead=0)
    first, second = (1,), (1,)
    queue.put(first)
    queue.put(second)
    assert queue.take(lambda item: item is second) is second
    assert await queue.get() is first
