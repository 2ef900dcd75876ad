"""The Responses framing of EventStreamResponse: named events, no [DONE], and a late
failure or the end of the shutdown grace as one numbered `error` event.

The ASGI peer and chunk source are test_sse.py's; the events come from a real
`ResponseEvents`, so the error event continues the stream's numbering."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncGenerator
from typing import Any

import pytest

from realtime.dialects.responses.events import ResponseEvents
from realtime.http.responses import encode_named_event
from realtime.http.sse import EventStreamResponse, SseFraming
from realtime.protocol.errors import RealtimeError
from tests.http.test_sse import Chunks, Client, serve
from tests.http.test_sse import events as split_events

pytestmark = pytest.mark.anyio


def response_events() -> tuple[ResponseEvents, list[dict[str, Any]]]:
    events = ResponseEvents({"id": "resp_1", "object": "response", "output": [], "status": "x"})
    return events, events.start()


def framed(
    chunks: AsyncGenerator[dict[str, Any], None], events: ResponseEvents, stop: Any = None
) -> EventStreamResponse:
    def error(exc: RealtimeError) -> bytes:
        return encode_named_event(events.error_event(exc))

    framing = SseFraming(encode=encode_named_event, done=None, error=error)
    return EventStreamResponse(chunks, keepalive_seconds=60, stop=stop, framing=framing)


def parse(body: bytes) -> tuple[str, dict[str, Any]]:
    name, data = body.decode().rstrip("\n").split("\n")
    return name.removeprefix("event: "), json.loads(data.removeprefix("data: "))


async def test_events_are_named_and_the_body_ends_without_done() -> None:
    events, started = response_events()
    source, client = Chunks(started), Client()
    await serve(framed(source.generate(), events), client)
    sent = split_events(client.wire)
    assert [parse(event)[0] for event in sent] == ["response.created", "response.in_progress"]
    assert [parse(event)[1]["sequence_number"] for event in sent] == [0, 1]
    assert client.messages[-1]["more_body"] is False
    assert b"[DONE]" not in client.wire


async def test_the_end_of_the_grace_is_a_numbered_error_event() -> None:
    events, started = response_events()
    source, client, stop = Chunks(started, gate_after=2), Client(), asyncio.Event()
    served = serve(framed(source.generate(), events, stop), client)
    await asyncio.wait_for(source.waiting.wait(), 10)
    stop.set()
    await served
    *_, error, end = client.bodies
    name, event = parse(error)
    assert name == "error" and event["code"] == "shutting_down"
    assert event["sequence_number"] == 2 and end == b""
    assert source.ended == "cancelled"


async def test_an_unexpected_failure_is_an_error_event_without_its_detail() -> None:
    events, started = response_events()

    async def failing() -> AsyncGenerator[dict[str, Any], None]:
        for event in started:
            yield event
        raise RuntimeError("secret detail")

    client = Client()
    await serve(framed(failing(), events), client)
    name, event = parse(split_events(client.wire)[-1])
    assert name == "error" and event["code"] == "internal_error"
    assert event["sequence_number"] == 2 and b"secret" not in client.wire
