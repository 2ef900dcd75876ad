"""The Realtime event dialect on a real server, driven by the unmodified openai SDK.

`client.realtime.connect(model=...)` connects to `<base>/realtime?model=...`; the
`model` query parameter selects this dialect at the handshake, and the same
server keeps answering today's chat frames on sockets without it. Work is proven
stopped by the engine's counters, never by timing.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import openai
import pytest
from websockets.asyncio.client import connect

from realtime.config import ServerConfig
from realtime.engine.scripted import ScriptedEngine
from tests.conftest import RunningServer, wait_until
from tests.dialects.realtime_events.sdk_types import check_server_event
from tests.ws.wsclient import recv_frame

pytestmark = pytest.mark.anyio

LONG_TEXT = " ".join(f"word{i}" for i in range(400))


def sdk(server: RunningServer) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=server.http_url + "/v1", api_key="x", max_retries=0)


def user_item(text: str) -> dict[str, Any]:
    return {
        "type": "message",
        "role": "user",
        "content": [{"type": "input_text", "text": text}],
    }


async def events_until(conn: Any, last: str) -> AsyncIterator[Any]:
    """Events until (and with) the first of type `last`, each checked against the SDK
    types and our AsyncAPI models."""
    while True:
        event = await conn.recv()
        check_server_event(event.to_dict())
        yield event
        if event.type == last:
            return


async def collect(conn: Any, last: str = "response.done") -> list[Any]:
    return [event async for event in events_until(conn, last)]


def text_of(events: list[Any]) -> str:
    return "".join(e.delta for e in events if e.type == "response.output_text.delta")


async def test_session_created_first_then_a_text_response(server_factory):
    server = server_factory(ServerConfig(log_level="warning"))
    async with sdk(server) as client, client.realtime.connect(model="echo") as conn:
        created = await conn.recv()
        assert created.type == "session.created"
        assert created.session.model == "echo"
        await conn.session.update(
            session={
                "type": "realtime",
                "instructions": "Answer briefly.",
                "output_modalities": ["text"],
            }
        )
        updated = await conn.recv()
        assert updated.type == "session.updated"
        assert updated.session.instructions == "Answer briefly."
        await conn.conversation.item.create(item=user_item("hello there world"))
        added = await collect(conn, "conversation.item.done")
        assert [e.type for e in added] == ["conversation.item.added", "conversation.item.done"]
        await conn.response.create()
        events = await collect(conn)
    kinds = [e.type for e in events]
    assert kinds[:4] == [
        "response.created",
        "response.output_item.added",
        "conversation.item.added",
        "response.content_part.added",
    ]
    assert text_of(events) == "hello there world"
    done = events[-1].response
    assert done.status == "completed"
    assert done.output[0].content[0].text == "hello there world"
    assert done.usage.output_tokens > 0 and done.usage.input_tokens > 0
    assert server.engine.stats.requests_finished == 1


async def test_response_cancel_during_a_long_answer_stops_the_engine(server_factory):
    server = server_factory(ServerConfig(echo_delay=0.02, log_level="warning"))
    stats = server.engine.stats
    async with sdk(server) as client, client.realtime.connect(model="echo") as conn:
        await collect(conn, "session.created")
        await conn.conversation.item.create(item=user_item(LONG_TEXT))
        await collect(conn, "conversation.item.done")
        await conn.response.create()
        await collect(conn, "response.output_text.delta")
        await conn.response.cancel()
        events = await collect(conn)
        done = events[-1].response
        assert done.status == "cancelled"
        assert done.status_details.reason == "client_cancelled"
        assert done.output[0].status == "incomplete"
        wait_until(lambda: stats.active == 0)
        assert stats.requests_cancelled == 1
        assert stats.tokens_generated < len(LONG_TEXT.split())
        # the session carries on: the partial answer is in the conversation
        await conn.conversation.item.create(item=user_item("after the cancel"))
        await collect(conn, "conversation.item.done")
        await conn.response.create()
        assert text_of(await collect(conn)) == "after the cancel"


async def test_unknown_event_and_audio_get_error_events_and_the_session_carries_on(server):
    async with sdk(server) as client, client.realtime.connect(model="echo") as conn:
        await collect(conn, "session.created")
        await conn.send_raw(json.dumps({"type": "response.explode", "event_id": "evt_1"}))
        unknown = await conn.recv()
        await conn.input_audio_buffer.append(audio="AAAA")
        audio = await conn.recv()
        await conn.send_raw("{not json")
        not_json = await conn.recv()
        await conn.send_raw(b"\x00\x01")
        binary = await conn.recv()
        await conn.conversation.item.create(item=user_item("still here"))
        await collect(conn, "conversation.item.done")
        await conn.response.create()
        events = await collect(conn)
    assert unknown.type == "error" and unknown.error.code == "unknown_event_type"
    assert unknown.error.event_id == "evt_1"
    assert audio.error.code == "audio_not_supported"
    assert not_json.error.code == "invalid_json"
    assert binary.error.code == "binary_frame"
    assert text_of(events) == "still here" and events[-1].response.status == "completed"


async def test_every_new_input_gets_its_error_and_loses_nothing(server):
    """One bad value per client event, on one socket, then the conversation is intact."""
    bad = [
        ({"type": "session.update", "session": {"type": "realtime", "voice": "x"}},
         "unknown_field"),
        ({"type": "session.update", "session": {"type": "realtime", "model": "gpt-x"}},
         "model_not_found"),
        ({"type": "conversation.item.create", "item": {"type": "message", "role": "user",
          "content": [{"type": "input_image", "image_url": "data:"}]}}, "unsupported"),
        ({"type": "conversation.item.delete", "item_id": "nope"}, "item_not_found"),
        ({"type": "conversation.item.retrieve", "item_id": "nope"}, "item_not_found"),
        ({"type": "conversation.item.truncate", "item_id": "nope", "content_index": 0,
          "audio_end_ms": 0}, "item_not_found"),
        ({"type": "response.create", "response": {"output_modalities": ["audio"]}},
         "audio_not_supported"),
        ({"type": "response.cancel"}, "response_cancel_not_active"),
    ]  # fmt: skip
    async with sdk(server) as client, client.realtime.connect(model="echo") as conn:
        await collect(conn, "session.created")
        await conn.conversation.item.create(item={**user_item("kept"), "id": "item_kept"})
        await collect(conn, "conversation.item.done")
        for index, (event, code) in enumerate(bad):
            await conn.send_raw(json.dumps({**event, "event_id": f"evt_{index}"}))
            error = await conn.recv()
            assert error.type == "error", event
            assert (error.error.code, error.error.event_id) == (code, f"evt_{index}")
        await conn.conversation.item.retrieve(item_id="item_kept")
        retrieved = await conn.recv()
        await conn.response.create()
        events = await collect(conn)
    assert retrieved.item.content[0].text == "kept"
    assert text_of(events) == "kept"


async def test_function_call_round_trip_on_the_scripted_engine(server_factory, tiny_model_dir):
    call = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Oslo"}}\n</tool_call>'
    engine = ScriptedEngine([call, "Sunny in Oslo."], model_dir=tiny_model_dir)
    server = server_factory(ServerConfig(log_level="warning", tool_parser="hermes"), engine)
    tool = {
        "type": "function",
        "name": "get_weather",
        "description": "weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
    }
    async with sdk(server) as client, client.realtime.connect(model="scripted") as conn:
        await collect(conn, "session.created")
        await conn.session.update(session={"type": "realtime", "tools": [tool]})
        await collect(conn, "session.updated")
        await conn.conversation.item.create(item=user_item("Weather in Oslo?"))
        await collect(conn, "conversation.item.done")
        await conn.response.create()
        first = await collect(conn)
        args_done = next(e for e in first if e.type == "response.function_call_arguments.done")
        assert args_done.name == "get_weather"
        assert json.loads(args_done.arguments) == {"city": "Oslo"}
        assert any(e.type == "response.function_call_arguments.delta" for e in first)
        assert first[-1].response.output[-1].type == "function_call"
        await conn.conversation.item.create(
            item={
                "type": "function_call_output",
                "call_id": args_done.call_id,
                "output": '{"sky": "sunny"}',
            }
        )
        await collect(conn, "conversation.item.done")
        await conn.response.create()
        second = await collect(conn)
    assert text_of(second) == "Sunny in Oslo."
    assert engine.remaining == []
    prompt = engine.prompts[-1]
    assert '"sky": "sunny"' in prompt and "get_weather" in prompt


async def test_chat_frames_unchanged_on_the_same_server(server):
    """A socket without `model` in its URL speaks chat frames: nothing first, chunks back."""
    async with sdk(server) as client, client.realtime.connect(model="echo") as conn:
        assert (await conn.recv()).type == "session.created"
        async with connect(server.ws_url) as ws:
            await ws.send(
                json.dumps(
                    {
                        "model": "echo",
                        "request_id": "a",
                        "messages": [{"role": "user", "content": "chat"}],
                    }
                )
            )
            frames = []
            while not frames or frames[-1].get("type") != "response.done":
                frames.append(await recv_frame(ws))
    assert frames[0]["object"] == "chat.completion.chunk" and frames[0]["request_id"] == "a"
    assert frames[-1]["status"] == "completed"


async def test_a_client_going_away_mid_response_stops_the_engine(server_factory):
    server = server_factory(ServerConfig(echo_delay=0.02, log_level="warning"))
    stats = server.engine.stats
    async with sdk(server) as client:
        async with client.realtime.connect(model="echo") as conn:
            await collect(conn, "session.created")
            await conn.conversation.item.create(item=user_item(LONG_TEXT))
            await conn.response.create()
            await collect(conn, "response.output_text.delta")
    wait_until(lambda: stats.active == 0)
    assert stats.requests_cancelled == 1
    assert stats.tokens_generated < len(LONG_TEXT.split())


async def test_a_model_not_served_is_an_error_event_and_the_socket_stays(server):
    async with sdk(server) as client, client.realtime.connect(model="gpt-realtime") as conn:
        created = await conn.recv()
        error = await conn.recv()
        assert created.type == "session.created" and created.session.model is None
        assert error.error.code == "model_not_found"
        await conn.session.update(session={"type": "realtime", "model": "echo"})
        assert (await conn.recv()).session.model == "echo"


def test_the_howto_example_runs_and_prints_what_the_howto_shows(server):
    """docs/howto/use-the-openai-sdk.md's Realtime example, run as written against a server."""
    import re
    import subprocess
    import sys
    from pathlib import Path

    howto = (Path(__file__).resolve().parents[3] / "docs/howto/use-the-openai-sdk.md").read_text()
    section = howto[howto.index("## Talk over one socket") :]
    code = re.search(r"```python\n(.*?)```", section, re.S)
    shown = re.search(r"```text\n(.*?)```", section, re.S)
    assert code is not None and shown is not None
    source = code.group(1).replace("http://127.0.0.1:8000/v1", server.http_url + "/v1")
    run = subprocess.run(
        [sys.executable, "-c", source], capture_output=True, text=True, timeout=60, check=True
    )
    assert run.stdout == shown.group(1)


async def test_a_response_the_pipeline_refuses_is_an_error_then_a_failed_done(server_factory):
    config = ServerConfig(max_tokens_cap=8, max_tokens_policy="error", log_level="warning")
    server = server_factory(config)
    async with sdk(server) as client, client.realtime.connect(model="echo") as conn:
        await collect(conn, "session.created")
        await conn.conversation.item.create(item=user_item("hi"))
        await collect(conn, "conversation.item.done")
        await conn.response.create(response={"max_output_tokens": 50}, event_id="evt_big")
        events = await collect(conn)
        error = next(e for e in events if e.type == "error")
        assert (error.error.code, error.error.event_id) == ("max_tokens_exceeded", "evt_big")
        assert events[0].type == "response.created"
        assert events[-1].response.status == "failed"
        assert events[-1].response.status_details.error.code == "max_tokens_exceeded"
        # the next response may write to the conversation: the failed one is over
        await conn.response.create(response={"max_output_tokens": 8})
        assert (await collect(conn))[-1].response.status == "completed"
    assert server.engine.stats.requests_started == 1


async def test_out_of_band_response_beside_one_in_the_conversation(server_factory):
    server = server_factory(ServerConfig(echo_delay=0.01, log_level="warning"))
    async with sdk(server) as client, client.realtime.connect(model="echo") as conn:
        await collect(conn, "session.created")
        await conn.conversation.item.create(item=user_item(LONG_TEXT[:400]))
        await collect(conn, "conversation.item.done")
        await conn.response.create()
        await conn.response.create(
            response={
                "conversation": "none",
                "metadata": {"topic": "title"},
                "input": [user_item("a title")],
            }
        )
        done: dict[str, Any] = {}
        while len(done) < 2:
            event = await conn.recv()
            check_server_event(event.to_dict())
            if event.type == "response.done":
                done[event.response.conversation_id or "none"] = event.response
        await conn.send_raw(
            json.dumps({"type": "conversation.item.retrieve", "item_id": done["none"].output[0].id})
        )
        missing = await conn.recv()
    assert done["none"].metadata == {"topic": "title"}
    assert done["none"].output[0].content[0].text == "a title"
    assert missing.error.code == "item_not_found"  # out of band: not in the conversation
    assert [r.status for r in done.values()] == ["completed", "completed"]


async def test_the_sdk_s_bearer_key_is_checked_at_the_handshake(server_factory):
    server = server_factory(ServerConfig(api_keys=("sk-right",), log_level="warning"))
    async with (
        openai.AsyncOpenAI(
            base_url=server.http_url + "/v1", api_key="sk-right", max_retries=0
        ) as client,
        client.realtime.connect(model="echo") as conn,
    ):
        assert (await conn.recv()).type == "session.created"
    async with openai.AsyncOpenAI(
        base_url=server.http_url + "/v1", api_key="sk-wrong", max_retries=0
    ) as client:
        with pytest.raises(Exception) as refused:  # the SDK raises websockets' InvalidStatus
            async with client.realtime.connect(model="echo"):
                pass
    assert "401" in str(refused.value)
