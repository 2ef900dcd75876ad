"""The client library (`realtime.client`) against real servers.

Every claim of the library's docstrings is checked on the wire or in the engine:
a cancel is proven by the echo engine's counters, "one socket" by the server's
session count, "never resent" by the request counter of the restarted server.
"""

from __future__ import annotations

import asyncio
import json
import socket
import time

import pytest

from realtime.client import (
    APIError,
    AuthenticationError,
    ChatCompletionChunk,
    ClientEvent,
    ConnectError,
    ConnectionClosedError,
    EngineError,
    InvalidRequestError,
    RealtimeClient,
    RealtimeClientSync,
    ReconnectPolicy,
    RequestInterruptedError,
    ServiceUnavailableError,
)
from realtime.client.client import http_base, models_url
from realtime.client.errors import describe_close_code
from realtime.config import ServerConfig
from realtime.engine.echo import EchoTokenizer
from tests.client.servers import ScriptedServer, serve_realtime, server_has_api_keys
from tests.conftest import async_wait_until, wait_until

pytestmark = pytest.mark.anyio

LONG = " ".join(f"w{i}" for i in range(200))
FAST_RETRY = ReconnectPolicy(initial_delay=0.05, max_delay=0.2, max_attempts=60)


def user(text: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": text}]


def delta_text(chunk: ChatCompletionChunk) -> str:
    return "".join(choice.delta.content or "" for choice in chunk.choices)


async def test_chat_streams_typed_chunks_and_ends_with_the_done_frame(server_factory):
    server = server_factory(ServerConfig(echo_delay=0.01, log_level="warning"))
    async with RealtimeClient(server.ws_url) as client:
        stream = client.chat(user("Hello there, world"), temperature=0.2, max_tokens=50)
        chunks = [chunk async for chunk in stream]
    assert all(isinstance(chunk, ChatCompletionChunk) for chunk in chunks)
    assert "".join(delta_text(c) for c in chunks) == "Hello there, world"
    assert chunks[0].choices[0].delta.role == "assistant"
    assert chunks[-1].choices[0].finish_reason == "stop"
    assert stream.done is not None
    assert (stream.done.status, stream.done.finish_reason) == ("completed", "stop")
    assert stream.done.usage is not None and stream.done.usage.completion_tokens == len(chunks) - 1
    assert stream.done.id == chunks[0].id and stream.done.request_id == stream.request_id
    assert stream.ttft is not None and stream.ttft > 0
    assert client.model == "echo"  # found through GET /v1/models


async def test_concurrent_chats_share_one_socket_and_are_demultiplexed(server_factory):
    server = server_factory(ServerConfig(echo_delay=0.02, log_level="warning"))
    arrivals: list[str] = []

    async def ask(client: RealtimeClient, text: str) -> str:
        stream = client.chat(user(text), request_id=f"id-{text.split()[0]}")
        pieces = []
        async for chunk in stream:
            arrivals.append(stream.request_id)
            pieces.append(delta_text(chunk))
        return "".join(pieces)

    async with RealtimeClient(server.ws_url, model="echo") as client:
        texts = ["alpha one two three", "beta four five six", "gamma seven eight nine"]
        answers = await asyncio.gather(*(ask(client, t) for t in texts))
        assert len(server.sessions()) == 1
    assert answers == texts
    # They ran at the same time: every request had begun before any had ended.
    ids = [f"id-{t.split()[0]}" for t in texts]
    last_start = max(arrivals.index(i) for i in ids)
    first_end = min(len(arrivals) - 1 - arrivals[::-1].index(i) for i in ids)
    assert last_start < first_end
    assert server.engine.stats.requests_started == 3


async def test_cancel_stops_the_engine_and_ends_iteration_as_cancelled(server_factory):
    server = server_factory(ServerConfig(echo_delay=0.05, log_level="warning"))
    stats = server.engine.stats
    async with RealtimeClient(server.ws_url, model="echo") as client:
        stream = client.chat(user(LONG))
        received = []
        async for chunk in stream:
            received.append(delta_text(chunk))
            if len(received) == 3:
                await stream.cancel()
        assert stream.cancelled and stream.done is not None
        assert (stream.done.status, stream.done.finish_reason) == ("cancelled", None)
        assert "".join(received).startswith("w0 w1 w2")
        wait_until(lambda: stats.requests_cancelled == 1 and stats.active == 0)
        assert 0 < stats.tokens_generated < len(EchoTokenizer().encode(LONG))
        # The socket is still usable.
        assert await client.chat(user("still here")).text() == "still here"


async def test_cancel_by_request_id_and_before_sending(server_factory):
    server = server_factory(ServerConfig(echo_delay=0.05, log_level="warning"))
    stats = server.engine.stats
    async with RealtimeClient(server.ws_url, model="echo") as client:
        never = client.chat(user("never sent"))
        await never.cancel()
        assert [c async for c in never] == [] and never.cancelled and never.done is None

        stream = client.chat(user(LONG), request_id="by-id")
        await stream.start()
        wait_until(lambda: stats.tokens_generated > 0)
        await client.cancel("by-id")
        result = await stream.collect()
    assert result.status == "cancelled" and result.usage is not None
    assert stats.requests_started == 1 and stats.requests_cancelled == 1


async def test_leaving_a_stream_block_early_cancels_it(server_factory):
    server = server_factory(ServerConfig(echo_delay=0.05, log_level="warning"))
    stats = server.engine.stats
    async with RealtimeClient(server.ws_url, model="echo") as client:
        async with client.chat(user(LONG)) as stream:
            async for _chunk in stream:
                break
        wait_until(lambda: stats.requests_cancelled == 1 and stats.active == 0)


async def test_error_frames_raise_typed_errors_with_the_openai_body(server):
    async with RealtimeClient(server.ws_url, model="echo") as client:
        with pytest.raises(InvalidRequestError) as info:
            await client.chat(user("hi"), model="gpt-4o").text()
        assert info.value.code == "model_not_found" and info.value.param == "model"
        assert info.value.body == {
            "error": {
                "message": "The model `gpt-4o` does not exist. Available: echo",
                "type": "invalid_request_error",
                "param": "model",
                "code": "model_not_found",
            }
        }
        assert info.value.close_code is None
        with pytest.raises(InvalidRequestError) as info:
            await client.chat(user("hi"), max_token=5).text()
        assert (info.value.code, info.value.param) == ("unknown_field", "max_token")
        # Errors of one request leave the socket open.
        assert await client.chat(user("fine")).text() == "fine"
        with pytest.raises(ValueError, match="always streams"):
            client.chat(user("x"), stream=False)


async def test_an_engine_failure_mid_stream_raises_after_the_chunks(server_factory):
    server = server_factory(ServerConfig(echo_delay=0.01, log_level="warning"))
    server.engine.fail_after_tokens = 2
    async with RealtimeClient(server.ws_url, model="echo") as client:
        stream = client.chat(user("one two three four"))
        seen = []
        with pytest.raises(EngineError) as info:
            async for chunk in stream:
                seen.append(delta_text(chunk))
        assert "".join(seen) == "one two"
        assert info.value.code == "engine_error" and info.value.request_id == stream.request_id
        server.engine.fail_after_tokens = None
        assert await client.chat(user("again")).text() == "again"


async def test_an_error_that_ends_the_session_carries_the_close_code(server):
    events: list[ClientEvent] = []
    async with RealtimeClient(
        server.ws_url, model="echo", reconnect=None, on_event=events.append
    ) as client:
        assert await client.chat(user("fine")).text() == "fine"
        server.engine.unavailable = "maintenance"
        with pytest.raises(ServiceUnavailableError) as info:
            await client.chat(user("hi")).text()
        assert info.value.code == "engine_unavailable"
        assert info.value.close_code == 1011
        assert info.value.close_reason == "engine unavailable: maintenance"
        assert await client.wait_closed(5)
        assert isinstance(client.close_error, ConnectionClosedError)
        assert client.close_error.code == 1011
        with pytest.raises(ConnectionClosedError):
            await client.chat(user("after")).text()
    assert [e.kind for e in events] == ["open", "closed"]


async def test_connect_errors_are_typed():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    with pytest.raises(ConnectError, match="connection refused") as info:
        async with RealtimeClient(f"ws://127.0.0.1:{port}/v1/realtime"):
            pass
    assert info.value.status is None


async def test_http_answers_to_the_handshake_are_typed(server):
    with pytest.raises(ConnectError) as info:
        await RealtimeClient(server.http_url.replace("http", "ws") + "/nowhere").connect()
    # Starlette refuses an upgrade to an unknown path with 403: not an API key problem.
    assert info.value.status == 403 and not isinstance(info.value, AuthenticationError)


async def test_api_key_is_sent_as_a_bearer_token_and_a_refusal_is_typed():
    scripted = ScriptedServer(require_key="sk-test").start()
    try:
        with pytest.raises(AuthenticationError) as info:
            await RealtimeClient(scripted.ws_url, model="scripted").connect()
        assert info.value.status == 401 and info.value.error is not None
        assert info.value.error.code == "invalid_api_key"
        async with RealtimeClient(scripted.ws_url, api_key="sk-test") as client:
            assert await client.chat(user("hello key")).text() == "hello key"
        assert scripted.authorization == [None, "Bearer sk-test"]
        assert scripted.subprotocols == [[], []]  # subprotocols are the browser's way
    finally:
        scripted.stop()


@pytest.mark.skipif(not server_has_api_keys(), reason="this server has no API keys yet")
async def test_the_real_server_refuses_a_missing_key_and_takes_a_bearer_token(server_factory):
    config = ServerConfig(api_keys=("sk-real-2",), log_level="warning")
    server = server_factory(config)
    with pytest.raises(AuthenticationError) as info:
        await RealtimeClient(server.ws_url, api_key="wrong").connect()
    assert info.value.status == 401 and info.value.error is not None
    assert info.value.error.code == "invalid_api_key"
    async with RealtimeClient(server.ws_url, api_key="sk-real-2") as client:
        assert await client.chat(user("with the key")).text() == "with the key"


async def test_reasoning_and_tool_calls_are_typed_and_folded(scripted):
    async with RealtimeClient(scripted.ws_url) as client:
        thought = await client.chat(user("think hard")).collect()
        called = await client.chat(user("weather in Paris")).collect()
    assert thought.reasoning == "The user wants a number."
    assert thought.text == "The answer is 42."
    assert thought.chunks[0].choices[0].delta.reasoning_content == "The user wants"
    (call,) = called.tool_calls
    assert (call.id, call.name, call.arguments) == ("call_1", "get_weather", '{"city": "Paris"}')
    assert called.finish_reason == "tool_calls" and called.text == "Let me check."
    assert call.as_message_part()["function"] == {
        "name": "get_weather",
        "arguments": '{"city": "Paris"}',
    }


async def test_error_frames_that_end_no_request_become_events(server):
    events: list[ClientEvent] = []
    async with RealtimeClient(server.ws_url, model="echo", on_event=events.append) as client:
        assert client._ws is not None
        await client._ws.send(json.dumps({"type": "response.cancel"}))  # no request_id
        assert await client.chat(user("next")).text() == "next"
    (event,) = [e for e in events if e.kind == "server_error"]
    assert event.error.message == "response.cancel needs a request_id"


async def test_close_with_drain_lets_requests_in_flight_finish(server_factory):
    server = server_factory(ServerConfig(echo_delay=0.02, log_level="warning"))
    client = RealtimeClient(server.ws_url, model="echo")
    await client.connect()
    stream = client.chat(user("finish this answer please"))
    await stream.start()
    collecting = asyncio.create_task(stream.text())
    await client.close(drain=True)
    assert await collecting == "finish this answer please"
    assert isinstance(client.close_error, ConnectionClosedError)
    assert (client.close_error.code, client.close_error.reason) == (1000, "session closed")


async def test_a_protocol_fault_is_not_retried(server):
    events: list[ClientEvent] = []
    async with RealtimeClient(server.ws_url, model="echo", on_event=events.append) as client:
        assert client._ws is not None
        await client._ws.send(b"binary")  # the server closes with 1003
        assert await client.wait_closed(5)
    assert [e.kind for e in events] == ["open", "closed"]
    assert events[-1].code == 1003


async def test_reconnect_after_a_restart_never_resends_a_request_in_flight():
    # A short grace: the long answer is still running when the drain ends.
    config = ServerConfig(echo_delay=0.05, shutdown_grace_seconds=0.5, log_level="warning")
    first = serve_realtime(config=config)
    events: list[ClientEvent] = []
    loop = asyncio.get_running_loop()
    second = None
    try:
        async with RealtimeClient(
            first.ws_url, model="echo", reconnect=FAST_RETRY, on_event=events.append
        ) as client:
            stream = client.chat(user(LONG))
            seen = []
            with pytest.raises(RequestInterruptedError) as info:
                async for chunk in stream:
                    seen.append(chunk)
                    if len(seen) == 2:
                        stopping = loop.run_in_executor(None, first.stop)
                        wait_until(lambda: not first.app.state.hub.accepting)
                        # Sent while the server drains: refused unstarted, so kept for later.
                        drained = asyncio.create_task(client.chat(user("refused once")).text())
            await stopping
            # The server said why, and sent the usage so far before closing.
            assert (info.value.code, info.value.reason) == (1001, "server shutting down")
            assert info.value.done is not None and info.value.done.status == "cancelled"
            assert stream.done is info.value.done

            waiting = client.chat(user("sent once, after the restart"))
            started = asyncio.create_task(waiting.text())
            await asyncio.sleep(0.3)  # the client is retrying against a closed port
            assert client.state == "reconnecting" and not started.done() and not drained.done()
            second = await loop.run_in_executor(
                None, lambda: serve_realtime(first.port, config=config)
            )
            assert await asyncio.wait_for(started, 10) == "sent once, after the restart"
            assert await asyncio.wait_for(drained, 10) == "refused once"
            # Only those two ran on the new server; the interrupted one was never resent.
            assert second.engine.stats.requests_started == 2
            assert first.engine.stats.requests_started == 1
    finally:
        for running in (first, second):
            if running is not None and running.thread.is_alive():
                await loop.run_in_executor(None, running.stop)
    kinds = [e.kind for e in events]
    assert kinds[0] == "open" and kinds[1] == "lost" and "reconnecting" in kinds
    assert kinds[-2:] == ["open", "closed"]


async def test_a_request_waiting_for_the_reconnect_can_be_cancelled_and_is_never_sent():
    config = ServerConfig(log_level="warning")
    first = serve_realtime(config=config)
    loop = asyncio.get_running_loop()
    second = None
    try:
        async with RealtimeClient(first.ws_url, model="echo", reconnect=FAST_RETRY) as client:
            await loop.run_in_executor(None, first.stop)
            await async_wait_until(lambda: client.state == "reconnecting")
            stream = client.chat(user("never sent"))
            waiting = asyncio.create_task(stream.start())  # waits for the socket
            await asyncio.sleep(0.2)
            assert not waiting.done()
            await stream.cancel()
            assert await asyncio.wait_for(stream.text(), 5) == ""
            assert stream.cancelled and stream.finished
            second = await loop.run_in_executor(
                None, lambda: serve_realtime(first.port, config=config)
            )
            await asyncio.wait_for(waiting, 10)
            assert await asyncio.wait_for(client.chat(user("after")).text(), 10) == "after"
            assert second.engine.stats.requests_started == 1  # "after" only
    finally:
        for running in (first, second):
            if running is not None and running.thread.is_alive():
                await loop.run_in_executor(None, running.stop)


async def test_reconnect_gives_up_after_max_attempts():
    server = serve_realtime(config=ServerConfig(log_level="warning"))
    policy = ReconnectPolicy(initial_delay=0.01, max_delay=0.02, max_attempts=3)
    events: list[ClientEvent] = []
    loop = asyncio.get_running_loop()
    async with RealtimeClient(
        server.ws_url, model="echo", reconnect=policy, on_event=events.append
    ) as client:
        await loop.run_in_executor(None, server.kill)
        assert await client.wait_closed(5)
        assert "not restored after 3 attempts" in str(client.close_error)
        with pytest.raises(ConnectionClosedError):
            await client.chat(user("too late")).text()
    kinds = [e.kind for e in events]
    assert kinds == ["open", "lost", "reconnecting", "reconnecting", "reconnecting", "closed"]
    assert events[1].code == 1006  # killed: no close frame


def test_sync_client_iterates_polls_cancels_and_raises(server_factory):
    server = server_factory(ServerConfig(echo_delay=0.05, log_level="warning"))
    stats = server.engine.stats
    with RealtimeClientSync(server.ws_url) as client:
        assert "".join(delta_text(c) for c in client.chat(user("sync hello"))) == "sync hello"
        stream = client.chat(user(LONG))
        assert stream.poll(0.001) is None and not stream.finished  # nothing yet: not an end
        first = None
        while first is None:
            first = stream.poll(1)
        stream.cancel()
        while not stream.finished:
            stream.poll(1)
        assert stream.cancelled and stream.done is not None
        wait_until(lambda: stats.requests_cancelled == 1 and stats.active == 0)
        with pytest.raises(APIError) as info:
            client.chat(user("x"), model="nope").text()
        assert info.value.code == "model_not_found"
        assert [m.id for m in client.models()] == ["echo"]
        result = client.chat(user("folded")).collect()
        assert result.text == "folded" and result.status == "completed"
    assert client.state == "closed"


def test_raw_frames_include_the_terminal_frame(server):
    with RealtimeClientSync(server.ws_url, model="echo") as client:
        stream = client.chat(user("raw frames"), request_id="raw")
        frames = []
        while not stream.finished:
            frame = stream.poll_frame(1)
            if frame is not None:
                frames.append(frame)
        bad = client.chat(user("x"), model="nope")
        error = None
        while error is None:
            error = bad.poll_frame(1)
    assert all(f["request_id"] == "raw" for f in frames)
    assert frames[-1]["type"] == "response.done" and frames[0]["object"] == "chat.completion.chunk"
    assert error["type"] == "error" and error["error"]["code"] == "model_not_found"


# --- pure parts ---


def test_backoff_grows_exponentially_with_jitter_and_a_cap():
    policy = ReconnectPolicy(initial_delay=0.25, max_delay=10, multiplier=2, jitter=0.5)
    assert [policy.delay(n, rand=lambda: 0.0) for n in range(7)] == [
        0.25,
        0.5,
        1.0,
        2.0,
        4.0,
        8.0,
        10.0,
    ]
    assert policy.delay(3, rand=lambda: 1.0) == 1.0  # at most half taken off
    assert not policy.gives_up(7) and policy.gives_up(8)
    assert not ReconnectPolicy(max_attempts=None).gives_up(10**6)


def test_urls_and_close_descriptions():
    assert http_base("ws://127.0.0.1:8000/v1/realtime") == "http://127.0.0.1:8000/v1/"
    assert models_url("wss://example.test/api/v1/realtime") == "https://example.test/api/v1/models"
    assert describe_close_code(1001, "server shutting down") == "1001 server shutting down"
    assert describe_close_code(1001) == "1001 (going away)"
    assert describe_close_code(1006) == "connection lost without a close frame"


def test_request_ids_are_unique_and_checked(server):
    with RealtimeClientSync(server.ws_url, model="echo") as client:
        a, b = client.chat(user("a")), client.chat(user("b"))
        assert a.request_id != b.request_id and not a.request_id.startswith("req_")
        client.chat(user("c"), request_id="mine")
        with pytest.raises(ValueError, match="already in flight"):
            client.chat(user("d"), request_id="mine")
        with pytest.raises(ValueError, match="1 to 128"):
            client.chat(user("e"), request_id="x" * 129)


def test_sync_wrapper_keeps_reading_while_the_caller_is_busy(server_factory):
    server = server_factory(ServerConfig(echo_delay=0.01, log_level="warning"))
    with RealtimeClientSync(server.ws_url, model="echo") as client:
        stream = client.chat(user("read in the background"))
        stream.start()
        time.sleep(0.3)  # the caller does something else; frames are read meanwhile
        assert stream.stream.finished
        assert stream.text() == "read in the background"
