"""EventStreamResponse against a scripted ASGI client: framing, keep-alive, errors, shutdown.

The server-level tests (test_chat_completions.py) show the behaviour over real
TCP; these drive the orderings that a real socket makes hard to hit on purpose:
a keep-alive while a chunk is waiting to be sent, a `send` stuck on a client that
does not read, the grace ending while the last event is being sent.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncGenerator, Callable
from typing import Any

import pytest

from realtime.http.sse import (
    BATCH_EVENTS,
    DONE_EVENT,
    KEEPALIVE_COMMENT,
    EventStreamResponse,
    encode_event,
)
from realtime.protocol.errors import EngineError

pytestmark = pytest.mark.anyio

CHUNKS = [{"n": 1, "text": "a"}, {"n": 2, "text": "é 日本"}]


class Client:
    """An ASGI peer: records what was sent, can hold a send (backpressure) and hang up."""

    def __init__(self, hold: Callable[[dict[str, Any]], bool] = lambda _: False):
        self.messages: list[dict[str, Any]] = []
        self.hold = hold
        self.held = asyncio.Event()  # a held send is waiting
        self.release = asyncio.Event()
        self.hangup = asyncio.Event()
        self.fail: BaseException | None = None
        self.in_send = 0
        self.most_in_send = 0

    async def receive(self) -> dict[str, Any]:
        await self.hangup.wait()
        return {"type": "http.disconnect"}

    async def send(self, message: dict[str, Any]) -> None:
        self.in_send += 1
        self.most_in_send = max(self.most_in_send, self.in_send)
        try:
            if self.hold(message):
                self.held.set()
                await self.release.wait()
            if self.fail is not None and message["type"] == "http.response.body":
                raise self.fail
            self.messages.append(message)
        finally:
            self.in_send -= 1

    @property
    def bodies(self) -> list[bytes]:
        return [m["body"] for m in self.messages if m["type"] == "http.response.body"]

    @property
    def wire(self) -> bytes:
        return b"".join(self.bodies)


class Chunks:
    """An async generator of chunks that can be held between chunks; records how it ended."""

    def __init__(self, chunks: list[dict[str, Any]], *, gate_after: int | None = None):
        self.chunks = chunks
        self.gate_after = gate_after
        self.gate = asyncio.Event()
        self.waiting = asyncio.Event()  # waiting at the gate
        self.ended: str | None = None

    async def generate(self) -> AsyncGenerator[dict[str, Any], None]:
        try:
            for i, chunk in enumerate(self.chunks):
                if i == self.gate_after:
                    self.waiting.set()
                    await self.gate.wait()
                yield chunk
            if self.gate_after == len(self.chunks):
                self.waiting.set()
                await self.gate.wait()
            self.ended = "done"
        except asyncio.CancelledError:
            self.ended = "cancelled"
            raise
        except GeneratorExit:
            self.ended = "closed"
            raise


async def eventually(predicate: Callable[[], bool], timeout: float = 10.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not predicate():
        assert asyncio.get_running_loop().time() < deadline, "condition never became true"
        await asyncio.sleep(0.005)


def response(
    chunks: AsyncGenerator[dict[str, Any], None],
    keepalive: float = 60.0,
    stop: asyncio.Event | None = None,
) -> EventStreamResponse:
    return EventStreamResponse(chunks, keepalive_seconds=keepalive, stop=stop)


def serve(resp: EventStreamResponse, client: Client) -> asyncio.Task[None]:
    scope = {"type": "http", "method": "POST", "path": "/v1/chat/completions"}
    return asyncio.create_task(resp(scope, client.receive, client.send))  # type: ignore[arg-type]


def events(wire: bytes) -> list[bytes]:
    """The events on the wire, each with its blank line."""
    return [event + b"\n\n" for event in wire.split(b"\n\n")[:-1]]


async def test_each_chunk_is_one_data_event_and_done_ends_the_body():
    source, client = Chunks(CHUNKS), Client()
    await serve(response(source.generate()), client)
    start, *body = client.messages
    assert start["type"] == "http.response.start" and start["status"] == 200
    headers = dict(start["headers"])
    assert headers[b"content-type"] == b"text/event-stream; charset=utf-8"
    assert headers[b"cache-control"] == b"no-cache"
    assert headers[b"x-accel-buffering"] == b"no"
    assert events(client.wire) == [
        b'data: {"n":1,"text":"a"}\n\n',
        b'data: {"n":2,"text":"\xc3\xa9 \xe6\x97\xa5\xe6\x9c\xac"}\n\n',
        b"data: [DONE]\n\n",
    ]
    # Chunks that are ready together go out in one write; [DONE] completes the
    # response in the last one, and nothing is sent after it.
    assert len(body) == 1 and body[0]["more_body"] is False
    assert source.ended == "done"


async def test_a_chunk_is_written_before_a_pull_that_waits():
    # The next chunk is not ready: the one in hand goes out at once, not held for it.
    source, client = Chunks(CHUNKS, gate_after=1), Client()
    served = serve(response(source.generate()), client)
    await asyncio.wait_for(source.waiting.wait(), 10)
    await eventually(lambda: client.bodies == [encode_event(CHUNKS[0])])
    source.gate.set()
    await served
    assert client.bodies == [encode_event(CHUNKS[0]), encode_event(CHUNKS[1]) + DONE_EVENT]
    assert source.ended == "done"


async def test_one_write_gathers_at_most_batch_events_chunks():
    chunks = [{"n": i} for i in range(2 * BATCH_EVENTS + 3)]
    source, client = Chunks(chunks), Client()
    await serve(response(source.generate()), client)
    assert [len(events(body)) for body in client.bodies] == [BATCH_EVENTS, BATCH_EVENTS, 4]
    assert events(client.wire) == [*map(encode_event, chunks), DONE_EVENT]


async def test_keepalive_comments_while_the_chunks_are_slow_to_come():
    source, client = Chunks(CHUNKS, gate_after=1), Client()
    served = serve(response(source.generate(), keepalive=0.01), client)
    await eventually(lambda: client.bodies.count(KEEPALIVE_COMMENT) >= 2)
    source.gate.set()
    await served
    bodies = client.bodies
    assert bodies[0] == encode_event(CHUNKS[0])
    assert bodies[-1] == encode_event(CHUNKS[1]) + DONE_EVENT
    assert set(bodies[1:-1]) == {KEEPALIVE_COMMENT}
    assert client.most_in_send == 1


async def test_a_chunk_waits_for_a_keepalive_being_sent():
    # The client is not reading while the keep-alive goes out; the next chunk
    # arrives meanwhile and must not be sent on top of it.
    source = Chunks(CHUNKS, gate_after=1)
    client = Client(hold=lambda m: m.get("body") == KEEPALIVE_COMMENT)
    served = serve(response(source.generate(), keepalive=0.01), client)
    await asyncio.wait_for(client.held.wait(), 10)
    source.gate.set()
    await asyncio.sleep(0.05)  # the pump has the chunk by now, and is waiting
    assert client.bodies == [encode_event(CHUNKS[0])]
    client.release.set()
    await served
    assert client.most_in_send == 1
    assert client.bodies[:2] == [encode_event(CHUNKS[0]), KEEPALIVE_COMMENT]
    assert client.bodies[-1] == encode_event(CHUNKS[1]) + DONE_EVENT


async def test_no_keepalive_while_a_chunk_is_stuck_in_send():
    source = Chunks(CHUNKS, gate_after=1)
    client = Client(hold=lambda m: m.get("body") == encode_event(CHUNKS[0]))
    served = serve(response(source.generate(), keepalive=0.01), client)
    await asyncio.wait_for(client.held.wait(), 10)
    source.gate.set()
    await asyncio.sleep(0.05)  # several keep-alive periods
    client.release.set()
    await served
    assert client.most_in_send == 1
    assert client.bodies == [encode_event(CHUNKS[0]), encode_event(CHUNKS[1]) + DONE_EVENT]


@pytest.mark.parametrize(
    ("failure", "code"),
    [
        (EngineError("the engine fell over"), "engine_error"),
        (RuntimeError("secret"), "internal_error"),
    ],
)
async def test_a_failure_after_the_start_is_an_error_event_then_done(failure, code, caplog):
    async def failing() -> AsyncGenerator[dict[str, Any], None]:
        yield CHUNKS[0]
        raise failure

    client = Client()
    with caplog.at_level(logging.ERROR, logger="realtime.http"):
        await serve(response(failing()), client)
    first, error, done = events(client.wire)
    assert first == encode_event(CHUNKS[0]) and done == DONE_EVENT
    assert error.startswith(b"data: ")
    body = json.loads(error[len(b"data: ") :])
    assert set(body) == {"error"} and body["error"]["code"] == code
    assert b"secret" not in client.wire and b"Traceback" not in client.wire
    # Only a failure that is not client-facing is logged, with its traceback.
    logged = [r for r in caplog.records if r.getMessage() == "stream failed"]
    assert len(logged) == (code == "internal_error")


async def test_the_end_of_the_grace_ends_the_stream_with_shutting_down_then_done():
    source, client, stop = Chunks(CHUNKS, gate_after=1), Client(), asyncio.Event()
    served = serve(response(source.generate(), stop=stop), client)
    await asyncio.wait_for(source.waiting.wait(), 10)
    stop.set()
    await served
    first, error, done = client.bodies
    assert first == encode_event(CHUNKS[0]) and done == DONE_EVENT
    assert json.loads(error[len(b"data: ") :])["error"]["code"] == "shutting_down"
    assert client.messages[-1]["more_body"] is False
    assert source.ended == "cancelled"  # the chunks (and the engine behind them) were stopped


async def test_a_stream_started_after_the_grace_ended_is_cancelled_at_once():
    source, client, stop = Chunks(CHUNKS, gate_after=1), Client(), asyncio.Event()
    stop.set()
    await serve(response(source.generate(), stop=stop), client)
    error, done = client.bodies[-2:]
    assert json.loads(error[len(b"data: ") :])["error"]["code"] == "shutting_down"
    assert done == DONE_EVENT
    assert source.ended in ("cancelled", "closed")


async def test_the_grace_ending_while_done_is_sent_does_not_add_an_error():
    source, stop = Chunks(CHUNKS), asyncio.Event()
    client = Client(hold=lambda m: m.get("body", b"").endswith(DONE_EVENT))
    served = serve(response(source.generate(), stop=stop), client)
    await asyncio.wait_for(client.held.wait(), 10)
    stop.set()
    await asyncio.sleep(0.02)
    client.release.set()
    await served
    assert events(client.wire) == [*map(encode_event, CHUNKS), DONE_EVENT]
    assert source.ended == "done"


async def test_a_client_that_hangs_up_closes_the_chunks_and_gets_nothing_more():
    source, client = Chunks(CHUNKS, gate_after=1), Client()
    served = serve(response(source.generate()), client)
    await asyncio.wait_for(source.waiting.wait(), 10)
    client.hangup.set()
    await asyncio.wait_for(served, 10)
    assert source.ended == "cancelled"
    assert client.bodies == [encode_event(CHUNKS[0])]


async def test_a_client_that_hangs_up_while_a_full_batch_is_stuck_closes_the_chunks():
    chunks = [{"n": i} for i in range(BATCH_EVENTS + 1)]
    source = Chunks(chunks)
    client = Client(hold=lambda m: m.get("body", b"").startswith(encode_event(chunks[0])))
    served = serve(response(source.generate()), client)
    await asyncio.wait_for(client.held.wait(), 10)
    client.hangup.set()
    await asyncio.wait_for(served, 10)
    assert source.ended == "closed"  # at its `yield`: the batch was pulled, not yet sent
    assert client.bodies == []


async def test_a_client_that_hangs_up_while_a_send_is_stuck_cancels_the_waiting_pull():
    # The chunk is being written while the next pull waits (on the engine): the
    # hang-up cancels that pull, so the chunks and the engine below them stop.
    source = Chunks(CHUNKS, gate_after=1)
    client = Client(hold=lambda m: m.get("body") == encode_event(CHUNKS[0]))
    served = serve(response(source.generate()), client)
    await asyncio.wait_for(client.held.wait(), 10)
    assert source.waiting.is_set()
    client.hangup.set()
    await asyncio.wait_for(served, 10)
    assert source.ended == "cancelled"
    assert client.bodies == []


async def test_a_failing_send_closes_the_chunks_and_propagates():
    source, client = Chunks(CHUNKS * BATCH_EVENTS), Client()
    client.fail = RuntimeError("transport broke")
    with pytest.raises(RuntimeError, match="transport broke"):
        await serve(response(source.generate()), client)
    assert source.ended == "closed"


async def test_a_failing_send_while_the_next_pull_waits_cancels_it_and_propagates():
    source, client = Chunks(CHUNKS, gate_after=1), Client()
    client.fail = RuntimeError("transport broke")
    with pytest.raises(RuntimeError, match="transport broke"):
        await serve(response(source.generate()), client)
    assert source.ended == "cancelled"


@pytest.mark.parametrize("gate_after", [None, 1])
async def test_a_send_failing_with_oserror_is_a_client_gone(gate_after):
    # ASGI spec 2.4 servers report a disconnected client as OSError from `send`.
    source, client = Chunks(CHUNKS * BATCH_EVENTS, gate_after=gate_after), Client()
    client.fail = ConnectionResetError()
    await serve(response(source.generate()), client)
    assert source.ended == ("closed" if gate_after is None else "cancelled")


async def test_cancelling_the_response_closes_the_chunks():
    source, client = Chunks(CHUNKS, gate_after=1), Client()
    served = serve(response(source.generate()), client)
    await asyncio.wait_for(source.waiting.wait(), 10)
    served.cancel()
    with pytest.raises(asyncio.CancelledError):
        await served
    assert source.ended == "cancelled"
