"""The outbox without a socket: direct sends, held frames, folding, backpressure, failure."""

from __future__ import annotations

import asyncio
from typing import Any

import orjson
import pytest

from realtime.chat.coalesce import fold_chunk
from realtime.chat.delta import DeltaGenerator
from realtime.ws.outbox import LARGE_FRAME_BYTES, Outbox
from realtime.ws.transport import UTF8_TEXT

pytestmark = pytest.mark.anyio


class FakeSocket:
    """Records sent texts; `gate` cleared makes every send wait, like a full TCP buffer."""

    def __init__(self) -> None:
        self.sent: list[dict[str, Any]] = []
        self.gate = asyncio.Event()
        self.gate.set()
        self.fail = False
        self.gone = 0
        self.kinds: list[str] = []
        #: per send: whether it came as UTF-8 bytes (`UTF8_TEXT`) rather than text
        self.as_utf8: list[bool] = []

    async def send(self, message: dict[str, Any]) -> None:
        await self.gate.wait()
        if self.fail:
            raise ConnectionResetError("peer gone")
        assert message["type"] == "websocket.send"
        utf8 = message.get(UTF8_TEXT)
        self.as_utf8.append(utf8 is not None)
        self.sent.append(orjson.loads(utf8 if utf8 is not None else message["text"]))

    def outbox(self, capacity: int = 4, *, knows_writable: bool = False) -> Outbox:
        """`knows_writable`: the outbox may ask whether a send would wait (the gate)."""

        def on_gone() -> None:
            self.gone += 1

        return Outbox(
            self.send,
            capacity=capacity,
            on_sent=self.kinds.append,
            on_gone=on_gone,
            clock=asyncio.get_running_loop().time,
            fold=fold_chunk,
            writable=self.gate.is_set if knows_writable else None,
        )


def _chunks(n: int, completion_id: str = "chatcmpl-a") -> list[dict[str, Any]]:
    gen = DeltaGenerator(model="m", prompt_tokens=1, completion_id=completion_id)
    return [c for i in range(n) if (c := gen.content_chunk(f"t{i} "))]


def _text(frames: list[dict[str, Any]], completion_id: str = "chatcmpl-a") -> str:
    return "".join(
        f["choices"][0]["delta"]["content"] for f in frames if f.get("id") == completion_id
    )


async def test_a_free_socket_gets_the_frame_before_put_returns() -> None:
    sock = FakeSocket()
    box = sock.outbox()
    for chunk in _chunks(3):
        await box.put(chunk, "chunk", "r1")
        assert sock.sent[-1] == chunk  # sent by put itself: no writer task involved
    assert box._writer is None
    assert sock.kinds == ["chunk"] * 3 and box.empty


async def test_chunks_held_behind_a_slow_send_fold_and_keep_their_text() -> None:
    sock = FakeSocket()
    box = sock.outbox(capacity=16)
    chunks = _chunks(10)
    sock.gate.clear()
    first = asyncio.create_task(box.put(chunks[0], "chunk", "r1"))
    await asyncio.sleep(0)
    assert box.send_started is not None and not box.empty
    for chunk in chunks[1:]:
        await box.put(chunk, "chunk", "r1")  # room for 16: no wait; each folds into one
    assert len(box) == 1 and box.folded == 8
    sock.gate.set()
    await first
    assert await box.flush(1.0)
    assert len(sock.sent) == 2
    assert _text(sock.sent) == "".join(f"t{i} " for i in range(10))


async def test_folded_chunks_still_count_against_the_capacity() -> None:
    sock = FakeSocket()
    box = sock.outbox(capacity=3)
    chunks = _chunks(6)
    sock.gate.clear()
    first = asyncio.create_task(box.put(chunks[0], "chunk", "r1"))
    await asyncio.sleep(0)
    await box.put(chunks[1], "chunk", "r1")
    await box.put(chunks[2], "chunk", "r1")  # folded: one frame held, standing for two
    third = asyncio.create_task(box.put(chunks[3], "chunk", "r1"))
    await asyncio.sleep(0.01)
    # Folded into the held chunk, but the producer waits: 3 chunks' worth are held.
    assert len(box) == 1 and not third.done()
    assert not box.offer(chunks[4], "chunk", "r1")
    sock.gate.set()
    await asyncio.wait_for(asyncio.gather(first, third), 1.0)
    assert await box.flush(1.0)
    assert _text(sock.sent) == "".join(f"t{i} " for i in range(4))


async def test_a_backed_up_socket_holds_and_folds_the_producers_own_chunks() -> None:
    sock = FakeSocket()
    box = sock.outbox(capacity=8, knows_writable=True)
    chunks = _chunks(6)
    sock.gate.clear()  # the server's write buffer is above its high-water mark
    for chunk in chunks[:5]:
        await box.put(chunk, "chunk", "r1")  # never blocks inside a send: held, folded
    assert sock.sent == [] and len(box) == 1 and box.folded == 4
    sock.gate.set()
    assert await box.flush(1.0)
    assert len(sock.sent) == 1 and _text(sock.sent) == "".join(f"t{i} " for i in range(5))
    # Writable again and nothing held: the next frame is sent before put returns.
    await box.put(chunks[5], "chunk", "r1")
    assert sock.sent[-1] == chunks[5]


async def test_frames_of_other_requests_keep_their_order_and_fold_only_within_a_request() -> None:
    sock = FakeSocket()
    box = sock.outbox(capacity=8)
    a, b = _chunks(3, "chatcmpl-a"), _chunks(3, "chatcmpl-b")
    sock.gate.clear()
    blocked = asyncio.create_task(box.put({"type": "session.ready"}, "ready"))
    await asyncio.sleep(0)
    await box.put(a[0], "chunk", "ra")
    await box.put(b[0], "chunk", "rb")
    await box.put(a[1], "chunk", "ra")  # folds into a[0], ahead of b[0]: other request, fine
    await box.put({"type": "response.done", "request_id": "ra"}, "done", "ra")
    await box.put(a[2], "chunk", "ra")  # after ra's done frame: must not fold across it
    sock.gate.set()
    await blocked
    assert await box.flush(1.0)
    kinds = [f.get("type") or f["id"] for f in sock.sent]
    assert kinds == ["session.ready", "chatcmpl-a", "chatcmpl-b", "response.done", "chatcmpl-a"]
    assert _text(sock.sent[1:2]) == "t0 t1 "


async def test_a_full_backlog_makes_put_wait_and_offer_drop() -> None:
    sock = FakeSocket()
    box = sock.outbox(capacity=2)
    sock.gate.clear()
    sending = asyncio.create_task(box.put({"n": 0}, "done"))
    await asyncio.sleep(0)
    await box.put({"n": 1}, "done")
    await box.put({"n": 2}, "done")
    third = asyncio.create_task(box.put({"n": 3}, "done"))
    await asyncio.sleep(0.01)
    assert not third.done() and len(box) == 2  # backpressure: the backlog never exceeds 2
    assert not box.offer({"n": 4}, "done")
    sock.gate.set()
    await asyncio.wait_for(third, 1.0)
    await sending
    assert await box.flush(1.0)
    assert [f["n"] for f in sock.sent] == [0, 1, 2, 3]


async def test_a_failed_send_reports_the_peer_gone_once_and_releases_waiters() -> None:
    sock = FakeSocket()
    box = sock.outbox(capacity=1)
    sock.gate.clear()
    sock.fail = True
    sending = asyncio.create_task(box.put({"n": 0}, "done"))
    await asyncio.sleep(0)
    await box.put({"n": 1}, "done")
    waiting = asyncio.create_task(box.put({"n": 2}, "done"))
    await asyncio.sleep(0)
    assert not waiting.done()
    sock.gate.set()
    await asyncio.wait_for(asyncio.gather(sending, waiting), 1.0)
    assert sock.gone == 1 and box.gone and sock.sent == []
    await box.put({"n": 3}, "done")  # dropped without waiting
    assert not box.offer({"n": 4}, "done")
    assert not await box.flush(0.1)


async def test_frames_held_behind_a_cancelled_send_still_go_out() -> None:
    sock = FakeSocket()
    box = sock.outbox()
    sock.gate.clear()
    direct = asyncio.create_task(box.put({"n": 0}, "done"))
    await asyncio.sleep(0)
    await box.put({"n": 1}, "done")
    direct.cancel()  # e.g. the request that was sending got cancelled
    await asyncio.gather(direct, return_exceptions=True)
    sock.gate.set()
    assert await box.flush(1.0)
    assert [f["n"] for f in sock.sent] == [1]


async def test_flush_gives_up_after_its_timeout() -> None:
    sock = FakeSocket()
    box = sock.outbox()
    sock.gate.clear()
    stuck = asyncio.create_task(box.put({"n": 0}, "done"))
    await asyncio.sleep(0)
    assert not await box.flush(0.05)
    box.close()
    stuck.cancel()
    await asyncio.gather(stuck, return_exceptions=True)


async def test_a_burst_of_large_frames_lets_other_tasks_run_between_them() -> None:
    """Writing a large frame is input-sized work on the event loop: the outbox yields
    after each, so other clients are held up for one frame, never a whole burst (the
    socket stays writable all along, so nothing else would yield)."""
    sock = FakeSocket()
    box = sock.outbox(capacity=32, knows_writable=True)
    large = {"type": "conversation.item.retrieved", "text": "x" * LARGE_FRAME_BYTES}
    order: list[str] = []

    async def neighbour() -> None:
        for _ in range(5):
            order.append("neighbour")
            await asyncio.sleep(0)

    async def burst() -> None:
        for _ in range(5):
            await box.put(large, "event")
            order.append("frame")

    await asyncio.gather(burst(), neighbour())
    assert len(sock.sent) == 5 and sock.sent[0] == large
    assert sock.as_utf8 == [True] * 5  # this server's transport: no decode and encode
    # the neighbour ran between the frames, not after all of them
    assert order.index("neighbour") < order.index("frame") + 2
    assert order[: order.index("neighbour")].count("frame") <= 1
    assert "frame" in order[order.index("neighbour") + 1 :]


async def test_small_frames_are_sent_without_a_task_switch() -> None:
    sock = FakeSocket()
    box = sock.outbox()
    order: list[str] = []

    async def neighbour() -> None:
        order.append("neighbour")

    task = asyncio.create_task(neighbour())
    for chunk in _chunks(3):
        await box.put(chunk, "chunk", "r1")
    assert order == []  # the three sends ran without giving the loop away
    await task


async def test_a_large_frame_goes_as_text_to_a_server_that_is_not_this_ones() -> None:
    """`UTF8_TEXT` is this server's transport's own key: with another ASGI server (one
    that does not say whether the socket is writable), a large frame is plain text."""
    sock = FakeSocket()
    box = sock.outbox(knows_writable=False)
    large = {"type": "conversation.item.retrieved", "text": "x" * LARGE_FRAME_BYTES}
    await box.put(large, "event")
    await box.put({"type": "small"}, "event")
    assert sock.sent == [large, {"type": "small"}]
    assert sock.as_utf8 == [False, False]
