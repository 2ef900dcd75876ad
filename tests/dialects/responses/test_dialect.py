"""WebSocket mode's dialect driven through the session core: no sockets, no event loop.

The service is real (pipeline, echo engine, memory store); the glue's part (run
each started request's job and render its output) is done here by hand, so every
frame asserted is one a client would get.
"""

from __future__ import annotations

import asyncio
import json
from contextlib import aclosing
from typing import Any

from realtime.dialects.responses import ResponsesService
from realtime.dialects.responses.dialect import DEFAULT_LANE, ResponsesDialect
from realtime.engine.echo import EchoEngine
from realtime.pipeline import ChatPipeline
from realtime.protocol.errors import RealtimeError
from realtime.session.actions import Action, RequestEnded, Send, StartRequest
from realtime.session.core import CoreLimits, SessionCore
from realtime.store import MemoryResponseStore
from tests.dialects.responses.sdk_types import check_socket_event


class Timer:
    """A latency timer that times nothing."""

    def chunk(self, chunk: Any) -> None:
        return None

    def step(self, step: Any) -> None:
        return None


class Clock:
    now = 0.0

    def __call__(self) -> float:
        return self.now


def make(**options: Any) -> tuple[SessionCore, ResponsesDialect, ResponsesService]:
    engine = EchoEngine()
    asyncio.run(engine.start())
    pipeline = ChatPipeline(engine, tool_parser="none", reasoning_parser="none")
    service = ResponsesService(pipeline, MemoryResponseStore())
    dialect = ResponsesDialect(service, owner=None, model_name="echo", session_id="s", **options)
    return SessionCore(dialect, CoreLimits()), dialect, service


def create(core: SessionCore, **fields: Any) -> list[Action]:
    text = json.dumps({"type": "response.create", "model": "echo", **fields})
    return core.command(core.dialect.parse(text, core), now=0.0, received_at=0.0)


def sent(actions: list[Action]) -> list[dict[str, Any]]:
    frames = [f for a in actions if isinstance(a, Send) for f in a.frames]
    for frame in frames:
        check_socket_event(frame)
    return frames


def run(core: SessionCore, request_id: str) -> tuple[list[dict[str, Any]], list[Action]]:
    """What the glue does for a started request: its job's frames, then the core's answer
    (reported, handed over), then the same for each request that answer starts."""
    dialect: ResponsesDialect = core.dialect  # type: ignore[assignment]

    async def one(request_id: str) -> tuple[list[dict[str, Any]], list[Action]]:
        record = core.records[request_id]
        job = record.job = dialect.job(record)
        frames: list[dict[str, Any]] = []
        try:
            await job.prepare()
            job.observer(Timer())
            async with aclosing(job.output()) as outputs:
                async for item in outputs:
                    frames += dialect.render_output(record, item)
            actions = core.request_completed(request_id)
        except RealtimeError as exc:
            actions = core.request_failed(request_id, exc)
        actions += core.terminal_sent(request_id)
        for frame in frames:
            check_socket_event(frame)
        frames += sent(actions)
        for started in [a for a in actions if isinstance(a, StartRequest)]:
            more, actions = await one(started.request.id)
            frames += more
        return frames, actions

    return asyncio.run(one(request_id))


def stored(service: ResponsesService, response_id: str) -> bool:
    return asyncio.run(service.store.get(response_id, None)) is not None


def test_a_response_is_created_streamed_stored_and_ended_once() -> None:
    core, _, service = make()
    actions = create(core, input="hello there", stream_id="a")
    [start] = [a for a in actions if isinstance(a, StartRequest)]
    assert start.request.lane == "a"
    assert sent(actions) == []  # `response.created` is the run's first event
    frames, _ = run(core, start.request.id)
    head, rest = frames[:2], frames[2:]
    assert [f["type"] for f in head] == ["response.created", "response.in_progress"]
    assert rest[-1]["type"] == "response.completed" and all(f["stream_id"] == "a" for f in rest)
    response = rest[-1]["response"]
    assert stored(service, response["id"])
    assert core.records == {}


def test_creates_without_a_lane_share_the_default_one() -> None:
    core, _, _ = make()
    first = create(core, input="one")
    second = create(core, input="two")
    assert [a.request.lane for a in first if isinstance(a, StartRequest)] == [DEFAULT_LANE]
    assert not [a for a in second if isinstance(a, StartRequest)]  # waits for the first


def test_a_create_that_cannot_start_is_answered_in_its_lanes_turn() -> None:
    """Its `previous_response_id` is read when its turn comes, before anything is sent."""
    core, _, _ = make()
    running = [a for a in create(core, input="first", stream_id="a") if isinstance(a, StartRequest)]
    assert sent(create(core, input="x", previous_response_id="resp_nope", stream_id="a")) == []
    frames, _ = run(core, running[0].request.id)
    # the first response's terminal event, then the refusal, in the lane's order
    kinds = [f["type"] for f in frames]
    assert kinds[-2:] == ["response.completed", "error"]
    assert frames[-1]["error"]["code"] == "previous_response_not_found"
    assert frames[-1]["stream_id"] == "a"


def test_a_failure_after_the_start_fails_the_response_and_stores_it() -> None:
    core, _, service = make()
    service.pipeline.engine.fail_after_tokens = 0  # type: ignore[attr-defined]
    [start] = [
        a for a in create(core, input="doomed", stream_id="f") if isinstance(a, StartRequest)
    ]
    frames, actions = run(core, start.request.id)
    frames = frames[2:]  # after `response.created` and `response.in_progress`
    assert [f["type"] for f in frames] == ["response.failed"]
    response = frames[0]["response"]
    assert response["error"]["code"] == "engine_error" and frames[0]["stream_id"] == "f"
    assert stored(service, response["id"])
    assert [a.status for a in actions if isinstance(a, RequestEnded)] == ["error"]


def test_a_cancelled_response_ends_failed_and_is_not_stored() -> None:
    """Shutdown: the grace ran out while the response ran."""
    core, dialect, service = make()
    [start] = [a for a in create(core, input="slow", stream_id="c") if isinstance(a, StartRequest)]
    record = core.records[start.request.id]

    async def cut_short() -> None:  # the task is cancelled after the response started
        job = record.job = dialect.job(record)
        await job.prepare()
        job.observer(Timer())
        async with aclosing(job.output()) as outputs:
            async for item in outputs:
                if dialect.render_output(record, item)[0]["type"] == "response.in_progress":
                    break

    asyncio.run(cut_short())
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
    run(core, start.request.id)
    assert len(dialect.local) == 1 and len(service.store) == 0  # type: ignore[arg-type]
    dialect.ended()
    assert len(dialect.local) == 0
