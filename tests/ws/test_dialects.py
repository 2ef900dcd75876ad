"""A second dialect on the session core, through a real server: what the next dialects rely on.

`EventsDialect` is a small made-up protocol that uses every hook a dialect has: a
greeting at open, a reply that starts no request, requests in one lane with
server-chosen ids, its own event shapes, errors that keep the socket open. It is
mounted, with the real endpoint, on a route of the real app, and chosen at the
handshake by its subprotocol; without it the same route speaks chat frames.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Sequence
from typing import Any

import pytest
from starlette.routing import WebSocketRoute
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed, InvalidStatus

from realtime.config import ServerConfig
from realtime.dialects.chat.job import ChatJob
from realtime.dialects.chat.request import parse_chat_request
from realtime.dialects.chat.selector import chat_frames
from realtime.pipeline import ChatPipeline
from realtime.protocol.errors import InvalidRequestError, RealtimeError
from realtime.session.commands import Cancel, Command, Frame, Reply, Submit
from realtime.session.dialect import DialectChoice, DialectContext, DoneStatus, SessionView
from realtime.session.record import RequestRecord
from realtime.ws.endpoint import session_endpoint
from tests.conftest import async_wait_until
from tests.ws.wsclient import chat, collect_until_terminal, recv_frame, text_of

pytestmark = pytest.mark.anyio

SUBPROTOCOL = "test-events"
PATH = "/v1/test-dialects"
ONLY_EVENTS_PATH = "/v1/test-events-only"


class EventsDialect:
    """`{"type": "ask", "text"}` -> `delta`... then `finished`; `ping` -> `pong`."""

    def __init__(self, context: DialectContext, *, pipeline: ChatPipeline):
        self.pipeline = pipeline
        self.session_id = context.session_id
        self.model = context.model_name
        self.asked = 0

    def opened(self) -> Sequence[Frame]:
        return ({"type": "hello", "session": self.session_id},)

    def parse(self, text: str, view: SessionView) -> Command:
        try:
            data = json.loads(text)
        except ValueError:
            return Reply(({"type": "oops", "why": "not JSON"},), "error", label="malformed")
        kind = data.get("type") if isinstance(data, dict) else None
        if kind == "ping":
            return Reply(({"type": "pong", "busy": view.lane_busy("one")},), "pong", label="ping")
        if kind == "stop":
            return Cancel(str(data.get("id")))
        if kind == "crash":
            raise RuntimeError("a bug in the dialect")
        if kind == "ask":
            self.asked += 1
            body = {"model": self.model, "messages": [{"role": "user", "content": data["text"]}]}
            try:
                request = parse_chat_request({**body, "stream": True})
            except RealtimeError as exc:
                return Submit(None, None, rejection=exc, lane="one")
            return Submit(None, request, lane="one", context={"asked": self.asked})
        error = InvalidRequestError("unknown event", param="type")
        return Reply(self.render_error(None, error, None), "error", label="rejected")

    def parse_binary(self, data: bytes) -> Command:
        return Reply(({"type": "oops", "why": "binary"},), "error", label="binary")

    def render_started(self, request: RequestRecord) -> Sequence[Frame]:
        return ({"type": "started", "id": request.id, "asked": request.context["asked"]},)

    def job(self, request: RequestRecord) -> ChatJob:
        return ChatJob(self.pipeline, request.request, session_id=self.session_id, size=0)

    def render_output(self, request: RequestRecord, event: Any) -> Sequence[Frame]:
        frames = []
        for chunk in request.job.render(event):  # the chat chunks of a pipeline event
            choices = chunk.get("choices") or ()
            text = choices[0]["delta"].get("content") if choices else None
            if text:
                frames.append({"type": "delta", "id": request.id, "text": text})
        return frames

    def fold(self, held: Frame, frame: Frame) -> bool:
        return False  # every event stands alone

    def render_done(self, request: RequestRecord, status: DoneStatus) -> Sequence[Frame]:
        usage = request.job.usage() if request.job is not None else None
        return (
            {"type": "output_done", "id": request.id},
            {"type": "finished", "id": request.id, "status": status, "usage": usage},
        )

    def render_error(
        self, request_id: str | None, error: RealtimeError, request: RequestRecord | None
    ) -> Sequence[Frame]:
        return ({"type": "oops", "id": request_id, "code": error.code},)

    def render_expiring(self, close_in_seconds: float) -> Sequence[Frame]:
        return ()

    def closes_socket(self, error: RealtimeError) -> bool:
        return False

    def ended(self) -> None:
        return None


def events_by_subprotocol(pipeline: ChatPipeline) -> Any:
    def select(scope: Any) -> DialectChoice | None:
        if SUBPROTOCOL in (scope.get("subprotocols") or ()):
            return DialectChoice(functools.partial(EventsDialect, pipeline=pipeline), SUBPROTOCOL)
        return None

    return select


@pytest.fixture
def server(server_factory: Any) -> Any:
    running = server_factory(ServerConfig(echo_delay=0.005, log_level="warning"))
    routes = running.app.router.routes
    pipeline = running.app.state.pipeline
    events = events_by_subprotocol(pipeline)
    routes.append(WebSocketRoute(PATH, session_endpoint(events, chat_frames(pipeline))))
    routes.append(WebSocketRoute(ONLY_EVENTS_PATH, session_endpoint(events)))
    return running


def url(server: Any, path: str = PATH) -> str:
    return f"ws://127.0.0.1:{server.port}{path}"


async def until(ws: Any, kind: str) -> list[dict[str, Any]]:
    frames = []
    while True:
        frames.append(await recv_frame(ws))
        if frames[-1]["type"] == kind:
            return frames


async def test_the_dialect_greets_answers_and_streams_in_its_own_shapes(server: Any) -> None:
    async with connect(url(server), subprotocols=[SUBPROTOCOL]) as ws:  # type: ignore[list-item]
        assert ws.subprotocol == SUBPROTOCOL
        hello = await recv_frame(ws)
        assert hello["type"] == "hello" and hello["session"].startswith("sess_")
        await ws.send(json.dumps({"type": "ping"}))
        assert await recv_frame(ws) == {"type": "pong", "busy": False}
        await ws.send(json.dumps({"type": "ask", "text": "one two three"}))
        frames = await until(ws, "finished")
    assert frames[0] == {"type": "started", "id": "req_1", "asked": 1}
    assert "".join(f["text"] for f in frames if f["type"] == "delta") == "one two three"
    assert [f["type"] for f in frames[-2:]] == ["output_done", "finished"]
    assert frames[-1]["status"] == "completed" and frames[-1]["usage"]["completion_tokens"] == 3


async def test_one_lane_runs_one_request_at_a_time_and_errors_keep_the_socket(
    server: Any,
) -> None:
    long = " ".join(f"w{i}" for i in range(40))
    async with connect(url(server), subprotocols=[SUBPROTOCOL]) as ws:  # type: ignore[list-item]
        await recv_frame(ws)  # hello
        await ws.send(json.dumps({"type": "ask", "text": long}))
        await ws.send(json.dumps({"type": "ask", "text": "second"}))
        await ws.send("not json")
        await ws.send(json.dumps({"type": "nonsense"}))
        await ws.send(json.dumps({"type": "stop", "id": "req_1"}))
        frames = await until(ws, "finished")
        frames += await until(ws, "finished")
    oops = [f for f in frames if f["type"] == "oops"]
    assert oops == [
        {"type": "oops", "why": "not JSON"},
        {"type": "oops", "id": None, "code": None},
    ]
    finished = [(f["id"], f["status"]) for f in frames if f["type"] == "finished"]
    assert finished == [("req_1", "cancelled"), ("req_2", "completed")]
    # req_2 started only after req_1's terminal frames: one request at a time in the lane.
    order = [(f["type"], f.get("id")) for f in frames if f["type"] in ("started", "finished")]
    assert order == [
        ("started", "req_1"),
        ("finished", "req_1"),
        ("started", "req_2"),
        ("finished", "req_2"),
    ]
    await async_wait_until(lambda: not server.sessions())
    assert server.engine.stats.active == 0


async def test_without_the_subprotocol_the_same_route_speaks_chat_frames(server: Any) -> None:
    async with connect(url(server)) as ws:
        await ws.send(chat("plain chat", request_id="c"))
        frames = await collect_until_terminal(ws)
    assert text_of(frames) == "plain chat" and frames[-1]["type"] == "response.done"


async def test_a_handshake_no_selector_claims_is_refused_before_the_upgrade(server: Any) -> None:
    with pytest.raises(InvalidStatus) as refused:
        async with connect(url(server, ONLY_EVENTS_PATH)):
            pass
    response = refused.value.response
    assert response.status_code == 400
    assert json.loads(response.body)["error"]["code"] == "invalid_handshake"


async def test_a_dialect_that_raises_closes_its_socket_1011_and_logs_once(
    server: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """A dialect's bug (`parse` raised) ends that socket with 1011 and one logged
    traceback; before, the read loop died silently and the socket hung, answering
    nothing. Other sockets carry on."""
    async with connect(url(server), subprotocols=[SUBPROTOCOL]) as ws:
        assert (await recv_frame(ws))["type"] == "hello"
        await ws.send(json.dumps({"type": "crash"}))
        with pytest.raises(ConnectionClosed) as closed:
            await recv_frame(ws)
        assert closed.value.rcvd is not None and closed.value.rcvd.code == 1011
    failures = [r for r in caplog.records if r.getMessage() == "the socket's read loop failed"]
    assert len(failures) == 1 and failures[0].exc_info is not None
    async with connect(url(server), subprotocols=[SUBPROTOCOL]) as ws:
        assert (await recv_frame(ws))["type"] == "hello"
        await ws.send(json.dumps({"type": "ping"}))
        assert (await recv_frame(ws))["type"] == "pong"
