"""Sessions on the socket: a server-made session id on every request, `end_session` when
the socket ends, and the optional `session.setup` frame. Real server, real `websockets`
client; what reached the engine is read from the engine, never inferred from timing."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import re
from collections.abc import AsyncGenerator, Callable, Iterator
from contextlib import aclosing
from pathlib import Path
from typing import Any

import httpx
import pytest
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed

from realtime.config import ServerConfig
from realtime.engine.base import BACKGROUND_PRIORITY, EngineOutput, EngineRequest
from realtime.engine.echo import EchoEngine
from realtime.model.template import ChatTemplate
from realtime.pipeline import ChatPipeline
from tests.conftest import RunningServer, scrape_metrics, start_server, wait_until
from tests.served_engines import CPU_MODES, cpu_engine
from tests.ws.wsclient import chat, collect_until_terminal, recv_frame, text_of

SESSION_ID = re.compile(r"^sess_[0-9a-f]{32}$")
USER = [{"role": "user", "content": "one two three four five"}]


class RecordingEcho(EchoEngine):
    """The echo engine, noting each request's session id and each `end_session` call."""

    def __init__(self, **kwargs: Any):
        super().__init__(**kwargs)
        self.requests: list[EngineRequest] = []
        #: (session id, engine requests still running when the session was ended)
        self.ended: list[tuple[str, int]] = []

    async def generate(self, request: EngineRequest) -> AsyncGenerator[EngineOutput, None]:
        self.requests.append(request)
        async with aclosing(super().generate(request)) as outputs:
            async for out in outputs:
                yield out

    def end_session(self, session_id: str) -> None:
        self.ended.append((session_id, self.stats.active))


class WarmingEcho(RecordingEcho):
    """Takes speculative warm-ups (a template that renders a next-turn prefix) and
    keeps each one pending until it is cancelled, so a test can watch who cancels it."""

    schedules_background = True

    def __init__(self, **kwargs: Any):
        super().__init__(**kwargs)
        template = ChatTemplate(
            "{% for m in messages %}{{ m.role }}: {{ m.content }}\n{% endfor %}"
            "{% if add_generation_prompt %}assistant: {% endif %}"
        )
        self._info = dataclasses.replace(self._info, chat_template=template)

    async def generate(self, request: EngineRequest) -> AsyncGenerator[EngineOutput, None]:
        if request.priority == BACKGROUND_PRIORITY:
            self.requests.append(request)
            await asyncio.Event().wait()  # pending until cancelled
        async with aclosing(super().generate(request)) as outputs:
            async for out in outputs:
                yield out


@pytest.fixture
def recording(server_factory: Callable[..., RunningServer]) -> RunningServer:
    return server_factory(ServerConfig(log_level="warning"), RecordingEcho())


def engine_of(server: RunningServer) -> RecordingEcho:
    engine = server.engine
    assert isinstance(engine, RecordingEcho)
    return engine


async def send(ws: ClientConnection, frame: dict[str, Any]) -> None:
    await ws.send(json.dumps(frame))


async def setup(ws: ClientConnection, **frame: Any) -> dict[str, Any]:
    await send(ws, {"type": "session.setup", **frame})
    return await recv_frame(ws)


# --- session identity ---


@pytest.mark.anyio
async def test_every_socket_gets_its_own_unguessable_session_id(recording: RunningServer) -> None:
    async with connect(recording.ws_url) as a, connect(recording.ws_url) as b:
        await a.send(chat("hi"))
        await b.send(chat("hi"))
        await collect_until_terminal(a)
        await collect_until_terminal(b)
        ids = {s.session_id for s in recording.sessions()}
    assert len(ids) == 2 and all(SESSION_ID.match(i) for i in ids)
    assert {r.session_id for r in engine_of(recording).requests} == ids


@pytest.mark.anyio
async def test_every_request_on_a_socket_carries_its_session_id_and_http_none(
    recording: RunningServer,
) -> None:
    async with connect(recording.ws_url) as ws:
        ready = await setup(ws, model="echo")
        for rid in ("a", "b"):
            await ws.send(chat("hi", rid))
        await collect_until_terminal(ws)
        await collect_until_terminal(ws)
    body = {"model": "echo", "messages": USER}
    async with httpx.AsyncClient(base_url=recording.http_url, timeout=10) as client:
        await client.post("/v1/chat/completions", json=body)
    sessions = [r.session_id for r in engine_of(recording).requests]
    assert sessions == [ready["session_id"], ready["session_id"], None]


@pytest.mark.anyio
async def test_end_session_once_the_sockets_requests_have_ended(
    server_factory: Callable[..., RunningServer],
) -> None:
    # The delay is the engine's own: a passed-in engine ignores `echo_delay`.
    server = server_factory(ServerConfig(log_level="warning"), RecordingEcho(delay=0.02))
    engine = engine_of(server)
    async with connect(server.ws_url) as ws:
        await ws.send(chat(" ".join(["w"] * 200), "long"))
        await recv_frame(ws)  # it runs
        session_id = server.sessions()[0].session_id
    # The client left mid-answer: the request is cancelled first, then the session ends.
    await asyncio.to_thread(wait_until, lambda: len(engine.ended) == 1)
    assert engine.ended == [(session_id, 0)]
    assert engine.stats.requests_cancelled == 1


@pytest.mark.anyio
async def test_end_session_after_session_close_and_at_shutdown(
    server_factory: Callable[..., RunningServer],
) -> None:
    server = server_factory(ServerConfig(log_level="warning"), RecordingEcho())
    engine = engine_of(server)
    async with connect(server.ws_url) as closing, connect(server.ws_url) as staying:
        await closing.send(chat("hi"))
        await send(closing, {"type": "session.close"})
        with pytest.raises(ConnectionClosed):
            while True:
                await recv_frame(closing)
        await asyncio.to_thread(wait_until, lambda: len(engine.ended) == 1)
        await asyncio.to_thread(server.stop)
        with pytest.raises(ConnectionClosed):
            await recv_frame(staying)
    assert len({session for session, _ in engine.ended}) == 2


@pytest.mark.anyio
async def test_closing_the_socket_cancels_its_pending_warmup(
    server_factory: Callable[..., RunningServer],
) -> None:
    server = server_factory(ServerConfig(log_level="warning"), WarmingEcho())
    engine = engine_of(server)
    pipeline: ChatPipeline = server.app.state.pipeline
    stats = pipeline.speculative.stats
    hint = {"agent_hints": {"speculative_prefill": True}}
    async with connect(server.ws_url) as ws:
        await ws.send(chat("warm me", "t1", nvext=hint))
        await collect_until_terminal(ws)
        # The warm-up reached the engine and waits there.
        await asyncio.to_thread(
            wait_until, lambda: any(r.priority == BACKGROUND_PRIORITY for r in engine.requests)
        )
        assert pipeline.speculative.pending == 1
        session_id = server.sessions()[0].session_id
    await asyncio.to_thread(wait_until, lambda: stats.cancelled == 1)
    assert pipeline.speculative.pending == 0
    assert stats.recent[-1].session_id == session_id
    assert stats.recent[-1].outcome == "cancelled"
    assert engine.ended == [(session_id, 0)]


# --- session.setup ---


@pytest.mark.anyio
async def test_setup_sets_the_model_and_defaults_and_requests_override_them(
    recording: RunningServer,
) -> None:
    defaults = {
        "max_tokens": 3,
        "stream_options": {"include_usage": True},
        "nvext": {"extra_fields": ["completion_token_ids"], "cache_salt": "tenant-a"},
    }
    async with connect(recording.ws_url) as ws:
        ready = await setup(ws, model="echo", defaults=defaults)
        session_id = recording.sessions()[0].session_id
        assert ready == {
            "type": "session.ready",
            "request_id": None,
            "session_id": session_id,
            "model": "echo",
            "defaults": defaults,
        }
        await send(ws, {"messages": USER})  # no model: the session's
        inherited = await collect_until_terminal(ws)
        await send(ws, {"messages": USER, "max_tokens": 5, "nvext": {"cache_salt": "tenant-b"}})
        overridden = await collect_until_terminal(ws)
        await send(ws, {"messages": USER, "model": "gpt-4o"})
        other_model = await collect_until_terminal(ws)
    assert text_of(inherited) == "one two three"
    assert inherited[-1]["finish_reason"] == "length"
    assert inherited[-2]["usage"]["completion_tokens"] == 3  # the include_usage chunk
    assert text_of(overridden) == "one two three four five"
    # nvext merged one level deep: the default extra_fields stayed, the salt changed.
    finish = next(f for f in overridden if f.get("choices") and f["choices"][0]["finish_reason"])
    assert finish["nvext"]["completion_token_ids"]
    salts = [r.cache_salt for r in engine_of(recording).requests]
    assert salts == ["tenant-a", "tenant-b"]
    assert other_model[-1]["error"]["code"] == "model_not_found"


@pytest.mark.anyio
async def test_defaults_may_turn_streaming_off(recording: RunningServer) -> None:
    async with connect(recording.ws_url) as ws:
        await setup(ws, model="echo", defaults={"stream": False})
        await send(ws, {"messages": USER})
        frames = await collect_until_terminal(ws)
    assert [f.get("object") or f["type"] for f in frames] == ["chat.completion", "response.done"]


@pytest.mark.anyio
async def test_bad_setups_get_an_error_and_the_socket_keeps_working(
    recording: RunningServer,
) -> None:
    async with connect(recording.ws_url) as ws:
        unknown_model = await setup(ws, model="gpt-4o")
        unknown_field = await setup(ws, model="echo", defaults={"max_token": 3})
        invalid_value = await setup(ws, model="echo", defaults={"temperature": 9})
        no_messages = await setup(ws, model="echo", defaults={"messages": USER})
        ready = await setup(ws, model="echo", defaults={"max_tokens": 2})  # a retry succeeds
        second = await setup(ws, model="echo", defaults={"max_tokens": 4})
        await send(ws, {"messages": USER})
        answer = await collect_until_terminal(ws)
    assert unknown_model == {
        "type": "error",
        "request_id": None,
        "error": {
            "message": "The model `gpt-4o` does not exist. Available: echo",
            "type": "invalid_request_error",
            "param": "model",
            "code": "model_not_found",
        },
    }
    assert unknown_field["request_id"] is None
    assert unknown_field["error"] == {
        "message": "Unrecognized request argument supplied: max_token",
        "type": "invalid_request_error",
        "param": "defaults.max_token",
        "code": "unknown_field",
    }
    assert invalid_value["error"]["param"] == "defaults.temperature"
    assert no_messages["error"]["param"] == "defaults.messages"
    assert ready["type"] == "session.ready"
    assert second["request_id"] is None
    assert second["error"]["code"] == "session_already_set_up"
    assert text_of(answer) == "one two"  # the first setup's defaults, unchanged


@pytest.mark.anyio
async def test_setup_after_a_request_is_refused_and_changes_nothing(
    recording: RunningServer,
) -> None:
    async with connect(recording.ws_url) as ws:
        await ws.send(chat("a b c"))
        await collect_until_terminal(ws)
        late = await setup(ws, model="echo", defaults={"max_tokens": 1})
        await ws.send(chat("a b c"))
        answer = await collect_until_terminal(ws)
        await send(ws, {"messages": USER})  # still no session model
        no_model = await collect_until_terminal(ws)
    assert late["type"] == "error" and late["request_id"] is None
    assert late["error"]["code"] == "session_already_set_up"
    assert text_of(answer) == "a b c"
    assert no_model[-1]["error"]["param"] == "model"
    metrics = scrape_metrics(recording.http_url)
    assert not any(k.startswith("realtime_state_violations") and v for k, v in metrics.items())
    assert metrics['realtime_ws_frames_received_total{kind="session_setup"}'] == 1


@pytest.mark.anyio
async def test_a_client_that_never_sets_up_sees_exactly_the_plain_frames(
    recording: RunningServer,
) -> None:
    async with connect(recording.ws_url) as ws:
        await ws.send(chat("a b"))
        await send(ws, {"type": "session.close"})
        frames = []
        with pytest.raises(ConnectionClosed):
            while True:
                frames.append(await recv_frame(ws))
    kinds = [
        (f.get("type") or f["object"], f["request_id"], f.get("choices", [{}])[0].get("delta"))
        for f in frames
    ]
    assert kinds == [
        ("chat.completion.chunk", "req_1", {"role": "assistant", "content": "a"}),
        ("chat.completion.chunk", "req_1", {"content": " b"}),
        ("chat.completion.chunk", "req_1", {}),
        ("response.done", "req_1", None),
    ]
    assert ws.close_code == 1000


# --- the CPU engine's per-session prefix cache ---


@pytest.fixture(scope="module", params=CPU_MODES)
def cpu_server(request: pytest.FixtureRequest, tiny_model_dir: Path) -> Iterator[RunningServer]:
    pytest.importorskip("torch")
    engine = cpu_engine(tiny_model_dir, request.param, model_name="tiny")
    running = start_server(ServerConfig(log_level="warning"), engine)  # type: ignore[arg-type]
    yield running
    running.stop()


@pytest.mark.anyio
async def test_the_prefix_cache_is_shared_within_a_socket_not_across_sockets(
    cpu_server: RunningServer,
) -> None:
    system = {"role": "system", "content": "You are a careful ops assistant. " * 12}

    async def cached_tokens(ws: ClientConnection, question: str) -> int:
        await send(ws, {"messages": [system, {"role": "user", "content": question}]})
        done = (await collect_until_terminal(ws))[-1]
        assert done["type"] == "response.done", done
        cached: int = done["usage"]["prompt_tokens_details"]["cached_tokens"]
        return cached

    defaults = {"max_tokens": 2, "temperature": 0}
    async with connect(cpu_server.ws_url) as first, connect(cpu_server.ws_url) as second:
        await setup(first, model="tiny", defaults=defaults)
        await setup(second, model="tiny", defaults=defaults)
        assert await cached_tokens(first, "Disk usage?") == 0
        assert await cached_tokens(second, "Disk usage?") == 0  # another session
        assert await cached_tokens(first, "Memory usage?") > 20  # the system prompt
