"""The Responses API's WebSocket mode at /v1/responses: a real server, the unmodified openai
SDK (`responses.connect()`, `AsyncResponsesWebSocketSession` lanes) and the real
`websockets` client for what the SDK never sends."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import openai
import pytest
from openai.lib.responses_websocket import (
    AsyncResponsesWebSocketSession,
    ResponsesWebSocketError,
    ResponsesWebSocketLimits,
)
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed, InvalidStatus

from realtime.config import ServerConfig
from realtime.engine.echo import EchoTokenizer
from tests.conftest import RunningServer, wait_until
from tests.dialects.responses.sdk_types import check_socket_event

TOKENIZER = EchoTokenizer()
TERMINAL = {"response.completed", "response.incomplete", "response.failed"}
LIMITS = ResponsesWebSocketLimits(
    max_lanes=8, max_events_per_lane=4096, max_events=8192, max_bytes_per_lane=1 << 24,
    max_bytes=1 << 25,
)  # fmt: skip


def sdk(server: RunningServer, key: str = "x") -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=server.http_url + "/v1", api_key=key, max_retries=0)


def ws_url(server: RunningServer) -> str:
    return f"ws://127.0.0.1:{server.port}/v1/responses"


@pytest.fixture
def echo(server_factory: Any) -> RunningServer:
    return server_factory(ServerConfig(log_level="warning", echo_delay=0.002))  # type: ignore[no-any-return]


async def until_terminal(connection: Any) -> list[Any]:
    events = []
    async for event in connection:
        events.append(event)
        if event.type in TERMINAL or event.type == "error":
            return events
    raise AssertionError("the socket closed before a terminal event")


async def raw_until_terminal(ws: Any) -> list[dict[str, Any]]:
    frames = []
    while True:
        frame = json.loads(await ws.recv())
        check_socket_event(frame)  # every frame is one the SDK knows
        frames.append(frame)
        if frame["type"] in TERMINAL or frame["type"] == "error":
            return frames


# --- the SDK's responses.connect() ---


def test_a_response_streams_over_the_sdks_connection(echo: RunningServer) -> None:
    text = "Streaming over one socket, Ünïcödé 日本語"

    async def go() -> list[Any]:
        async with sdk(echo) as client, client.responses.connect() as connection:
            await connection.send({"type": "response.create", "model": "echo", "input": text})
            return await until_terminal(connection)

    events = asyncio.run(go())
    final = events[-1]
    assert final.type == "response.completed"
    deltas = [e.delta for e in events if e.type == "response.output_text.delta"]
    assert "".join(deltas) == final.response.output_text == text
    assert len(deltas) == len(TOKENIZER.encode(text))
    assert [e.sequence_number for e in events] == list(range(len(events)))
    assert events[0].type == "response.created" and final.response.id.startswith("resp_")
    assert all(getattr(e, "stream_id", None) is None for e in events)  # the default lane


def test_store_false_continues_on_its_socket_and_nowhere_else(echo: RunningServer) -> None:
    async def go() -> tuple[Any, Any, Any]:
        async with sdk(echo) as client:
            async with client.responses.connect() as mine:
                await mine.send(
                    {"type": "response.create", "model": "echo", "input": "private", "store": False}
                )
                first = (await until_terminal(mine))[-1].response
                await mine.send(
                    {
                        "type": "response.create",
                        "model": "echo",
                        "input": "and more",
                        "store": False,
                        "previous_response_id": first.id,
                    }
                )
                second = (await until_terminal(mine))[-1]
            async with client.responses.connect() as other:
                await other.send(
                    {
                        "type": "response.create",
                        "model": "echo",
                        "input": "steal",
                        "previous_response_id": first.id,
                    }
                )
                refused = await until_terminal(other)
        return first, second, refused

    first, second, refused = asyncio.run(go())
    assert first.store is False and second.type == "response.completed"
    assert second.response.previous_response_id == first.id
    [error] = refused
    assert error.type == "error" and error.status == 400
    assert error.error.code == "previous_response_not_found" and first.id in error.error.message
    assert len(echo.app.state.responses.store) == 0  # never in the server's store


def test_a_socket_continues_what_http_stored_and_the_reverse(echo: RunningServer) -> None:
    async def go() -> tuple[Any, Any]:
        async with sdk(echo) as client:
            over_http = await client.responses.create(model="echo", input="from http")
            async with client.responses.connect() as connection:
                await connection.send(
                    {
                        "type": "response.create",
                        "model": "echo",
                        "input": "on the socket",
                        "previous_response_id": over_http.id,
                    }
                )
                on_socket = (await until_terminal(connection))[-1].response
            fetched = await client.responses.retrieve(on_socket.id)
        return on_socket, fetched

    on_socket, fetched = asyncio.run(go())
    assert on_socket.output_text == "on the socket"
    assert fetched.id == on_socket.id and fetched.output_text == "on the socket"


def test_a_bad_request_is_an_error_event_and_the_socket_carries_on(echo: RunningServer) -> None:
    async def go() -> tuple[list[Any], list[Any]]:
        async with sdk(echo) as client, client.responses.connect() as connection:
            await connection.send(
                {"type": "response.create", "model": "echo", "input": "x", "temperature": 9}
            )
            bad = await until_terminal(connection)
            await connection.send({"type": "response.create", "model": "echo", "input": "fine"})
            good = await until_terminal(connection)
        return bad, good

    bad, good = asyncio.run(go())
    assert [e.type for e in bad] == ["error"]
    assert bad[0].error.param == "temperature" and bad[0].status == 400
    assert good[-1].type == "response.completed" and good[-1].response.output_text == "fine"


def test_two_lanes_interleave_on_one_socket(server_factory: Any) -> None:
    server = server_factory(ServerConfig(log_level="warning", echo_delay=0.01))
    texts = {
        "lane-a": " ".join(f"alpha{i}" for i in range(12)),
        "lane-b": " ".join(f"bravo{i}" for i in range(12)),
    }
    order: list[str] = []

    async def consume(lane: Any, name: str) -> Any:
        while True:
            event = await lane.recv()
            if event.type == "response.output_text.delta":
                order.append(name)
            assert event.stream_id == name
            if event.type in TERMINAL:
                return event.response

    async def go() -> list[Any]:
        async with sdk(server) as client:
            async with (
                client.responses.connect(websocket_connection_options={"max_size": None}) as conn,
                AsyncResponsesWebSocketSession(conn, limits=LIMITS) as session,
            ):
                lanes = {name: session.lane(name) for name in texts}
                for name, lane in lanes.items():
                    await lane.send(
                        {"type": "response.create", "model": "echo", "input": texts[name]}
                    )
                return list(
                    await asyncio.gather(*(consume(lane, name) for name, lane in lanes.items()))
                )

    responses = asyncio.run(go())
    assert [r.output_text for r in responses] == list(texts.values())
    # both ran at once: their deltas alternate on the wire, neither waited for the other
    first_b, last_a = order.index("lane-b"), len(order) - 1 - order[::-1].index("lane-a")
    assert first_b < last_a, order


def test_a_lane_runs_its_responses_one_at_a_time(server_factory: Any) -> None:
    """Two creates on one lane sent back to back: the second starts after the first's
    terminal event (the SDK waits for it anyway; a raw client may not)."""
    server = server_factory(ServerConfig(log_level="warning", echo_delay=0.005))

    async def go() -> list[dict[str, Any]]:
        async with connect(ws_url(server)) as ws:
            for text in ("one two three four", "five six seven eight"):
                create = {"type": "response.create", "model": "echo", "input": text}
                await ws.send(json.dumps({**create, "stream_id": "solo"}))
            return await raw_until_terminal(ws) + await raw_until_terminal(ws)

    frames = asyncio.run(go())
    kinds = [f["type"] for f in frames]
    first_end = kinds.index("response.completed")
    assert kinds.index("response.created", 1) > first_end  # the second began after
    assert all(f["stream_id"] == "solo" for f in frames)


def test_every_client_event_is_served_or_refused_by_name(echo: RunningServer) -> None:
    """The SDK defines `response.create` and `response.steer`; a steer of a response that
    has ended fails (`response.steer.failed`) on the lane of the response it names.
    Anything else, not JSON, or binary: an error event. The socket carries on after each."""

    async def go() -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        async with connect(ws_url(echo)) as ws:
            create = {"type": "response.create", "model": "echo", "input": "steer me"}
            await ws.send(json.dumps({**create, "stream_id": "s"}))
            made = await raw_until_terminal(ws)
            steer = {
                "type": "response.steer",
                "previous_response_id": made[-1]["response"]["id"],
                "input": "faster",
            }
            errors = []
            for frame in (
                json.dumps(steer),
                json.dumps({"type": "response.cancel"}),
                "{not json",
                b"\x00\x01",
                json.dumps({**create, "stream_id": "has space"}),
            ):
                await ws.send(frame)
                errors.append(json.loads(await ws.recv()))
            await ws.send(json.dumps(create))
            return errors, await raw_until_terminal(ws)

    errors, after = asyncio.run(go())
    codes = [e["error"]["code"] for e in errors]
    assert codes == [
        "response_already_completed",
        "invalid_event",
        "invalid_json",
        "binary_frame",
        "invalid_stream_id",
    ]
    steer_failed = errors[0]
    check_socket_event(steer_failed)
    assert steer_failed["type"] == "response.steer.failed" and steer_failed["stream_id"] == "s"
    assert steer_failed["steer"]["input"] == "faster" and "id" not in steer_failed["steer"]
    for error in errors[1:]:
        check_socket_event(error)
        assert error["type"] == "error" and error["status"] == 400
    assert after[-1]["type"] == "response.completed"


def test_lane_errors_carry_their_stream_id_and_the_sdk_raises_them(echo: RunningServer) -> None:
    async def go() -> BaseException:
        async with (
            sdk(echo) as client,
            client.responses.connect() as conn,
            AsyncResponsesWebSocketSession(conn, limits=LIMITS) as session,
        ):
            lane = session.lane("mine")
            await lane.send(
                {
                    "type": "response.create",
                    "model": "echo",
                    "input": "x",
                    "previous_response_id": "resp_unknown",
                }
            )
            with pytest.raises(ResponsesWebSocketError) as info:
                await lane.get_final_response()
            await lane.send({"type": "response.create", "model": "echo", "input": "still here"})
            assert (await lane.get_final_response()).output_text == "still here"
            return info.value

    error = asyncio.run(go())
    event: Any = error.event  # type: ignore[attr-defined]
    assert event.stream_id == "mine" and event.error.code == "previous_response_not_found"


def test_a_client_that_hangs_up_mid_response_stops_the_engine(server_factory: Any) -> None:
    server = server_factory(ServerConfig(log_level="warning", echo_delay=0.05))
    text = " ".join(f"word{i}" for i in range(200))

    async def go() -> None:
        async with connect(ws_url(server)) as ws:
            await ws.send(json.dumps({"type": "response.create", "model": "echo", "input": text}))
            deltas = 0
            while deltas < 2:
                if json.loads(await ws.recv())["type"] == "response.output_text.delta":
                    deltas += 1

    asyncio.run(go())
    stats = server.engine.stats
    wait_until(lambda: stats.requests_cancelled == 1)
    generated = stats.tokens_generated
    assert 2 <= generated < len(TOKENIZER.encode(text)) // 4, generated
    time.sleep(0.3)
    assert stats.tokens_generated == generated  # stopped, not just unheard
    assert len(server.app.state.responses.store) == 0


# --- the handshake and the socket's limits ---


def test_the_handshake_checks_keys_and_origin_as_for_realtime(server_factory: Any) -> None:
    server = server_factory(ServerConfig(log_level="warning", api_keys=("key-a", "key-b")))

    async def status(headers: dict[str, str]) -> int:
        try:
            async with connect(ws_url(server), additional_headers=headers):
                return 101
        except InvalidStatus as exc:
            return exc.response.status_code

    assert asyncio.run(status({})) == 401
    assert asyncio.run(status({"Authorization": "Bearer nope"})) == 401
    assert asyncio.run(status({"Authorization": "Bearer key-a"})) == 101
    evil = {"Authorization": "Bearer key-a", "Origin": "https://evil.example"}
    assert asyncio.run(status(evil)) == 403


def test_a_key_continues_only_its_own_responses(server_factory: Any) -> None:
    server = server_factory(ServerConfig(log_level="warning", api_keys=("key-a", "key-b")))

    async def go() -> tuple[str, list[Any], list[Any]]:
        async with sdk(server, "key-a") as alice, sdk(server, "key-b") as bob:
            mine = await alice.responses.create(model="echo", input="alice's")
            create = {
                "type": "response.create",
                "model": "echo",
                "input": "more",
                "previous_response_id": mine.id,
            }
            async with bob.responses.connect() as connection:
                await connection.send(create)
                bobs = await until_terminal(connection)
            async with alice.responses.connect() as connection:
                await connection.send(create)
                alices = await until_terminal(connection)
        return mine.id, bobs, alices

    mine, bobs, alices = asyncio.run(go())
    assert bobs[-1].type == "error" and bobs[-1].error.code == "previous_response_not_found"
    assert alices[-1].type == "response.completed"
    assert alices[-1].response.previous_response_id == mine


def test_an_old_connection_takes_no_new_responses(server_factory: Any) -> None:
    server = server_factory(ServerConfig(log_level="warning", responses_ws_max_age_seconds=0.3))

    async def go() -> tuple[list[dict[str, Any]], dict[str, Any]]:
        async with connect(ws_url(server)) as ws:
            create = {"type": "response.create", "model": "echo", "input": "early"}
            await ws.send(json.dumps(create))
            early = await raw_until_terminal(ws)
            await asyncio.sleep(0.4)
            await ws.send(json.dumps({**create, "stream_id": "late"}))
            return early, json.loads(await ws.recv())

    early, late = asyncio.run(go())
    assert early[-1]["type"] == "response.completed"
    assert late["type"] == "error" and late["stream_id"] == "late"
    assert late["error"]["code"] == "websocket_connection_limit_reached"


def test_named_lanes_are_limited_per_socket(server_factory: Any) -> None:
    server = server_factory(ServerConfig(log_level="warning", responses_ws_max_streams=2))

    async def go() -> list[dict[str, Any]]:
        async with connect(ws_url(server)) as ws:
            last = []
            for lane in ("a", "b", "a", "c"):
                create = {"type": "response.create", "model": "echo", "input": "hi"}
                await ws.send(json.dumps({**create, "stream_id": lane}))
                last = await raw_until_terminal(ws)
            return last

    [error] = asyncio.run(go())
    assert error["error"]["code"] == "websocket_stream_limit_reached"
    assert error["stream_id"] == "c"


def test_a_sockets_store_false_memory_is_bounded(server_factory: Any) -> None:
    """`--responses-ws-memory-bytes`: past it the socket's oldest `store: false` response
    goes, and continuing it is `previous_response_not_found`; the newest still continues."""
    server = server_factory(ServerConfig(log_level="warning", responses_ws_memory_bytes=3000))

    async def go() -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        async with connect(ws_url(server)) as ws:
            ids = []
            for n in range(3):
                create = {"type": "response.create", "model": "echo", "store": False,
                          "input": f"turn {n} " + "words " * 60}  # fmt: skip
                await ws.send(json.dumps(create))
                ids.append((await raw_until_terminal(ws))[-1]["response"]["id"])
            more = {"type": "response.create", "model": "echo", "input": "more"}
            await ws.send(json.dumps({**more, "previous_response_id": ids[0]}))
            oldest = await raw_until_terminal(ws)
            await ws.send(json.dumps({**more, "previous_response_id": ids[-1]}))
            return oldest, await raw_until_terminal(ws)

    oldest, newest = asyncio.run(go())
    assert oldest[-1]["error"]["code"] == "previous_response_not_found"
    assert newest[-1]["type"] == "response.completed"


def test_shutdown_ends_running_responses_failed_and_closes_1001(server_factory: Any) -> None:
    """The shutdown grace runs out while a response streams: it ends `response.failed`
    (`response_cancelled`), the engine stops, the socket closes 1001."""
    server = server_factory(
        ServerConfig(echo_delay=0.05, shutdown_grace_seconds=0.3, log_level="warning")
    )
    text = " ".join(f"word{i}" for i in range(200))

    async def go() -> tuple[list[dict[str, Any]], int | None]:
        frames: list[dict[str, Any]] = []
        async with connect(ws_url(server)) as ws:
            create = {"type": "response.create", "model": "echo", "input": text}
            await ws.send(json.dumps({**create, "stream_id": "long"}))
            frames.append(json.loads(await ws.recv()))
            stopper = asyncio.get_running_loop().run_in_executor(None, server.stop)
            try:
                while True:
                    frames.append(json.loads(await ws.recv()))
            except ConnectionClosed as closed:
                code = closed.rcvd.code if closed.rcvd is not None else None
            await stopper
        return frames, code

    frames, code = asyncio.run(go())
    assert code == 1001
    terminal = [f for f in frames if f["type"] in TERMINAL]
    assert [f["type"] for f in terminal] == ["response.failed"]
    assert terminal[0]["response"]["error"]["code"] == "response_cancelled"
    assert terminal[0]["stream_id"] == "long"
    assert server.engine.stats.active == 0
