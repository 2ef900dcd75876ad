"""One WebSocket-mode response without a socket: the real service, pipeline and echo engine.

Every frame is validated against the SDK's own server-event union, which is how the
SDK's `responses.connect()` parses them."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from realtime.engine.echo import EchoEngine
from realtime.pipeline import ChatPipeline
from realtime.responses import MemoryResponseStore, ResponsesService
from realtime.responses.socket_codec import Create, ResponsesSocketCodec
from realtime.responses.socket_run import SocketResponses
from tests.responses.sdk_types import check_socket_event


def service() -> ResponsesService:
    engine = EchoEngine()
    asyncio.run(engine.start())
    pipeline = ChatPipeline(engine, tool_parser="none", reasoning_parser="none")
    return ResponsesService(pipeline, MemoryResponseStore())


def socket(shared: ResponsesService, session: str = "s1") -> SocketResponses:
    return SocketResponses(
        shared, ResponsesSocketCodec(), MemoryResponseStore(), owner=None, session_id=session
    )


def send(state: SocketResponses, **fields: Any) -> list[dict[str, Any]]:
    command = state.codec.parse(json.dumps({"type": "response.create", "model": "echo", **fields}))
    assert isinstance(command, Create), command

    async def go() -> list[dict[str, Any]]:
        return [frame async for frame in state.frames(command)]

    frames = asyncio.run(go())
    for frame in frames:
        parsed = check_socket_event(frame)
        assert parsed.type == frame["type"]
    return frames


def test_every_event_of_a_lane_carries_its_stream_id() -> None:
    frames = send(socket(service()), input="hello socket", stream_id="lane-a")
    assert all(frame["stream_id"] == "lane-a" for frame in frames)
    assert frames[0]["type"] == "response.created"
    assert frames[-1]["type"] == "response.completed"
    text = "".join(f["delta"] for f in frames if f["type"] == "response.output_text.delta")
    assert text == "hello socket"
    default = send(socket(service()), input="default lane")
    assert not any("stream_id" in frame for frame in default)


def test_store_false_continues_on_its_socket_only() -> None:
    shared = service()
    mine, other = socket(shared, "s1"), socket(shared, "s2")
    first = send(mine, input="private turn", store=False, stream_id="a")[-1]["response"]
    assert first["store"] is False and len(mine.local) == 1
    assert isinstance(shared.store, MemoryResponseStore) and len(shared.store) == 0
    again = send(mine, input="next", previous_response_id=first["id"], stream_id="a")
    assert again[-1]["type"] == "response.completed"
    assert again[-1]["response"]["previous_response_id"] == first["id"]
    refused = send(other, input="next", previous_response_id=first["id"], stream_id="b")
    assert [frame["type"] for frame in refused] == ["error"]
    error = refused[0]
    assert error["stream_id"] == "b" and error["status"] == 400
    assert error["error"]["code"] == "previous_response_not_found"
    assert first["id"] in error["error"]["message"]


def test_a_request_that_cannot_start_is_one_error_event_on_its_lane() -> None:
    frames = send(socket(service()), input="x", model="no-such-model", stream_id="z")
    assert len(frames) == 1 and frames[0]["type"] == "error"
    assert frames[0]["stream_id"] == "z" and frames[0]["error"]["param"] == "model"


def test_a_socket_forgets_its_responses_when_it_closes() -> None:
    state = socket(service())
    send(state, input="gone soon", store=False)
    assert len(state.local) == 1
    asyncio.run(state.aclose())
    assert len(state.local) == 0
