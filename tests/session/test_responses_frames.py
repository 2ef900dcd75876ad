"""WebSocket mode's dialect driven through the session core: no sockets, no event loop.

The service is real (pipeline, echo engine, memory store); the glue's part (prepare
and stream the chat request) is done here by hand with the pipeline, so every frame
asserted is one a client would get.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from realtime.dialects.chat.run import ChatRun
from realtime.engine.echo import EchoEngine
from realtime.pipeline import ChatPipeline
from realtime.protocol.errors import EngineError
from realtime.responses import MemoryResponseStore, ResponsesService
from realtime.session.actions import Action, RequestEnded, Send, StartRequest
from realtime.session.core import CoreLimits, SessionCore
from realtime.session.responses_frames import DEFAULT_LANE, ResponsesDialect
from tests.responses.sdk_types import check_socket_event


class Clock:
    now = 0.0

    def __call__(self) -> float:
        return self.now


def make(**options: Any) -> tuple[SessionCore, ResponsesDialect, ResponsesService]:
    engine = EchoEngine()
    asyncio.run(engine.start())
    pipeline = ChatPipeline(engine, tool_parser="none", reasoning_parser="none")
    service = ResponsesService(pipeline, MemoryResponseStore())
    dialect = ResponsesDialect(service, owner=None, model_name="echo", **options)
    return SessionCore(dialect, CoreLimits()), dialect, service


def create(core: SessionCore, **fields: Any) -> list[Action]:
    text = json.dumps({"type": "response.create", "model": "echo", **fields})
    return core.command(core.dialect.parse(text, core), now=0.0, received_at=0.0)


def sent(actions: list[Action]) -> list[dict[str, Any]]:
    frames = [f for a in actions if isinstance(a, Send) for f in a.frames]
    for frame in frames:
        check_socket_event(frame)
    return frames


def run(core: SessionCore, service: ResponsesService, request_id: str) -> list[dict[str, Any]]:
    """What the glue does for a started request: prepare, stream, report, hand over."""
    record = core.records[request_id]
    pipeline = service.pipeline

    async def stream() -> list[dict[str, Any]]:
        record.prepared = ChatRun.prepare(pipeline, record.request, stream=True, session_id="s")
        return [f async for c in record.prepared.stream() for f in
                core.dialect.render_chunk(record, c)]  # fmt: skip

    frames = asyncio.run(stream())
    return frames + sent(core.request_completed(request_id) + core.terminal_sent(request_id))


def test_a_response_is_created_streamed_stored_and_ended_once() -> None:
    core, _, service = make()
    actions = create(core, input="hello there", stream_id="a")
    [start] = [a for a in actions if isinstance(a, StartRequest)]
    assert start.request.lane == "a"
    head = sent(actions)
    assert [f["type"] for f in head] == ["response.created", "response.in_progress"]
    rest = run(core, service, start.request.id)
    assert rest[-1]["type"] == "response.completed" and all(f["stream_id"] == "a" for f in rest)
    response = rest[-1]["response"]
    assert service.store.get_now(response["id"], None) is not None  # type: ignore[attr-defined]
    assert core.records == {}


def test_creates_without_a_lane_share_the_default_one() -> None:
    core, _, _ = make()
    first = create(core, input="one")
    second = create(core, input="two")
    assert [a.request.lane for a in first if isinstance(a, StartRequest)] == [DEFAULT_LANE]
    assert not [a for a in second if isinstance(a, StartRequest)]  # waits for the first


def test_a_create_that_cannot_start_is_answered_in_its_lanes_turn() -> None:
    core, _, service = make()
    running = [a for a in create(core, input="first", stream_id="a") if isinstance(a, StartRequest)]
    assert sent(create(core, input="x", previous_response_id="resp_nope", stream_id="a")) == []
    frames = run(core, service, running[0].request.id)
    # the first response's terminal event, then the refusal, in the lane's order
    kinds = [f["type"] for f in frames]
    assert kinds[-2:] == ["response.completed", "error"]
    assert frames[-1]["error"]["code"] == "previous_response_not_found"
    assert frames[-1]["stream_id"] == "a"


def test_a_failure_after_the_start_fails_the_response_and_stores_it() -> None:
    core, _, service = make()
    [start] = [
        a for a in create(core, input="doomed", stream_id="f") if isinstance(a, StartRequest)
    ]
    actions = core.request_failed(start.request.id, EngineError("the engine broke"))
    frames = sent(actions)
    assert [f["type"] for f in frames] == ["response.failed"]
    response = frames[0]["response"]
    assert response["error"]["code"] == "engine_error" and frames[0]["stream_id"] == "f"
    assert service.store.get_now(response["id"], None) is not None  # type: ignore[attr-defined]
    assert [a.status for a in actions if isinstance(a, RequestEnded)] == ["error"]


def test_a_cancelled_response_ends_failed_and_is_not_stored() -> None:
    """Shutdown: the grace ran out while the response ran."""
    core, _, service = make()
    [start] = [a for a in create(core, input="slow", stream_id="c") if isinstance(a, StartRequest)]
    core.shutdown_started()
    core.shutdown_grace_over()
    frames = sent(core.request_cancelled(start.request.id))
    assert [f["type"] for f in frames] == ["response.failed"]
    assert frames[0]["response"]["error"]["code"] == "response_cancelled"
    assert len(service.store) == 0  # type: ignore[arg-type]


def test_the_connection_age_is_checked_when_a_create_arrives() -> None:
    clock = Clock()
    core, _, _ = make(max_age_seconds=10.0, clock=clock)
    assert [a for a in create(core, input="young") if isinstance(a, StartRequest)]
    clock.now = 10.0
    [refused] = sent(create(core, input="old", stream_id="z"))
    assert refused["error"]["code"] == "websocket_connection_limit_reached"
    assert refused["stream_id"] == "z"


def test_store_false_responses_die_with_the_socket() -> None:
    core, dialect, service = make()
    [start] = [a for a in create(core, input="p", store=False) if isinstance(a, StartRequest)]
    run(core, service, start.request.id)
    assert len(dialect.local) == 1 and len(service.store) == 0  # type: ignore[arg-type]
    dialect.ended()
    assert len(dialect.local) == 0
