"""`response.steer` over WebSocket mode: a real server on the scripted engine, the
unmodified openai SDK (`responses.connect()`, `connection.response.steer`) and the real
`websockets` client for the frames the SDK never sends.

The script answers a story request with a long story, and a prompt that ends with
the steer's words with a reply of its own: that reply appearing in the answer shows
the new input reached the model, and the story's missing tail shows the first pass
was cut."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import openai
import pytest
from websockets.asyncio.client import connect

from realtime.config import ServerConfig
from realtime.engine.scripted import ScriptedEngine
from tests.conftest import RunningServer, wait_until
from tests.dialects.responses.sdk_types import check_socket_event

STORY = "Once upon a time" + "".join(f" word{i}" for i in range(300)) + "."
DRAGONS = " And then the dragons arrived" + "".join(f" roar{i}" for i in range(300)) + "."
SHORT_DRAGONS = " And then the dragons arrived."
TERMINAL = {"response.completed", "response.incomplete", "response.failed"}


def script(dragons: str = SHORT_DRAGONS) -> list[Any]:
    return [
        {"match": "Tell me a story", "reply": STORY},
        {"match": "make it about dragons", "reply": dragons},
        {"match": "quick", "reply": "Quick answer."},
    ]


def serve(server_factory: Any, dragons: str = SHORT_DRAGONS, delay: float = 0.01) -> RunningServer:
    engine = ScriptedEngine(script(dragons), delay=delay)
    return server_factory(ServerConfig(log_level="warning"), engine)  # type: ignore[no-any-return]


def sdk(server: RunningServer) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=server.http_url + "/v1", api_key="x", max_retries=0)


def ws_url(server: RunningServer) -> str:
    return f"ws://127.0.0.1:{server.port}/v1/responses"


def test_a_steer_changes_the_rest_of_a_running_answer(server_factory: Any) -> None:
    server = serve(server_factory)
    engine: ScriptedEngine = server.engine  # type: ignore[assignment]

    async def go() -> tuple[list[Any], list[Any]]:
        async with sdk(server) as client, client.responses.connect() as connection:
            await connection.send(
                {"type": "response.create", "model": "scripted", "input": "Tell me a story"}
            )
            events: list[Any] = []
            deltas = 0
            async for event in connection:
                events.append(event)
                if event.type == "response.output_text.delta":
                    deltas += 1
                    if deltas == 5:
                        await connection.response.steer(
                            input="Please make it about dragons",
                            previous_response_id=events[0].response.id,
                        )
                if event.type in TERMINAL:
                    break
            items = await client.responses.input_items.list(events[0].response.id, order="asc")
            return events, items.data

    events, input_items = asyncio.run(go())
    response_id = events[0].response.id
    kinds = [e.type for e in events]
    accepted = [e for e in events if e.type == "response.steer.accepted"]
    assert len(accepted) == 1 and accepted[0].steer.previous_response_id == response_id
    assert accepted[0].steer.id.startswith("steer_")
    assert "response.steer.failed" not in kinds
    final = events[-1]
    assert final.type == "response.completed" and final.response.id == response_id
    # one message item: the story so far, then the reply to the new input
    (message,) = final.response.output
    text = message.content[0].text
    assert text.endswith(SHORT_DRAGONS) and text.startswith("Once upon a time word0")
    story_part = text[: -len(SHORT_DRAGONS)]
    assert STORY.startswith(story_part) and len(story_part) < len(STORY) // 2
    assert kinds.count("response.output_item.added") == 1
    deltas = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert deltas == text
    # numbered in the order sent, the steer's event included
    assert [e.sequence_number for e in events] == list(range(len(events)))
    # the continuation's prompt: the conversation, the answer so far, the new input
    prompt = engine.prompts[-1]
    assert prompt.endswith(f"assistant: {story_part}\nuser: Please make it about dragons\n"
                           "assistant: ")  # fmt: skip
    assert prompt.startswith("user: Tell me a story\n")
    # the first pass was stopped at the steer, the second ran to its end
    assert engine.stats.requests_cancelled == 1 and engine.stats.requests_finished == 1
    assert engine.stats.tokens_generated < len(STORY.split()) // 2 + len(SHORT_DRAGONS.split()) + 2
    # both passes count; the steer's input is stored with the response's input
    usage = final.response.usage
    assert usage.output_tokens == engine.stats.tokens_generated
    assert usage.input_tokens > 2 * len("Tell me a story".split())
    texts = [item.content[0].text for item in input_items]
    assert texts == ["Tell me a story", "Please make it about dragons"]


def test_steers_that_cannot_join_fail_with_the_sdks_codes(server_factory: Any) -> None:
    server = serve(server_factory, delay=0.02)

    async def go() -> dict[str, Any]:
        out: dict[str, Any] = {}
        async with connect(ws_url(server)) as ws:

            async def steer(
                target: str, input_: Any = "make it about dragons", **extra: Any
            ) -> Any:
                frame = {"type": "response.steer", "previous_response_id": target, "input": input_}
                await ws.send(json.dumps({**frame, **extra}))

            async def until(kind: str) -> dict[str, Any]:
                while True:
                    frame = json.loads(await ws.recv())
                    check_socket_event(frame)
                    if frame["type"] == kind:
                        return frame

            await steer("resp_nobody")
            out["unknown"] = await until("response.steer.failed")
            await ws.send(json.dumps({"type": "response.steer", "input": "x"}))
            out["no_target"] = await until("error")
            create = {"type": "response.create", "model": "scripted", "input": "Tell me a story"}
            await ws.send(json.dumps({**create, "stream_id": "a"}))
            created = await until("response.created")
            target = created["response"]["id"]
            await steer(target, stream_id="b")
            out["other_lane"] = await until("response.steer.failed")
            await steer(target, [{"role": "assistant", "content": "I said so"}])
            out["not_user"] = await until("response.steer.failed")
            await steer(target, [{"role": "user", "content": "x"}] * 17)
            out["too_many_items"] = await until("response.steer.failed")
            await steer(target, "x" * 40_000)
            out["too_long"] = await until("response.steer.failed")
            await steer(target, [{"role": "user", "content": [{"type": "input_image"}]}])
            out["image"] = await until("response.steer.failed")
            await steer(target, "x", bogus=1)
            out["unknown_field"] = await until("response.steer.failed")
            frames = []
            for _ in range(9):  # at most 4 wait at once, 8 join one response in all
                await steer(target, "make it about dragons")
            while len(frames) < 9:
                frame = json.loads(await ws.recv())
                if frame["type"].startswith("response.steer."):
                    frames.append(frame)
            out["flood"] = frames
            while (await until("response.completed"))["response"]["id"] != target:
                pass
            await steer(target)
            out["ended"] = await until("response.steer.failed")
        return out

    out = asyncio.run(go())

    def code(name: str) -> str:
        return out[name]["error"]["code"]  # type: ignore[no-any-return]

    assert code("unknown") == "response_not_found" and "stream_id" not in out["unknown"]
    assert out["no_target"]["error"]["code"] == "invalid_input"
    assert out["no_target"]["error"]["param"] == "previous_response_id"
    assert code("other_lane") == "response_not_found" and out["other_lane"]["stream_id"] == "b"
    for name in ("not_user", "too_many_items", "too_long", "image", "unknown_field"):
        assert code(name) == "invalid_input", name
        assert out[name]["stream_id"] == "a"  # the target's lane
    assert "user role" in out["not_user"]["error"]["message"]
    assert "bogus" in out["unknown_field"]["error"]["message"]
    accepted = [f for f in out["flood"] if f["type"] == "response.steer.accepted"]
    failed = [f["error"]["code"] for f in out["flood"] if f["type"] == "response.steer.failed"]
    assert 1 <= len(accepted) <= 8 and "too_many_pending_steers" in failed, failed
    assert set(failed) <= {"too_many_pending_steers", "response_already_completed"}
    assert code("ended") == "response_already_completed" and out["ended"]["stream_id"] == "a"
    for name in ("unknown", "other_lane", "not_user", "ended"):
        assert "id" not in out[name]["steer"]  # refused before an id was given


def test_a_client_that_hangs_up_mid_steer_stops_the_engine(server_factory: Any) -> None:
    server = serve(server_factory, dragons=DRAGONS, delay=0.02)
    engine: ScriptedEngine = server.engine  # type: ignore[assignment]

    async def go() -> None:
        async with connect(ws_url(server)) as ws:
            create = {"type": "response.create", "model": "scripted", "input": "Tell me a story"}
            await ws.send(json.dumps(create))
            target = None
            deltas = 0
            while True:
                frame = json.loads(await ws.recv())
                if frame["type"] == "response.created":
                    target = frame["response"]["id"]
                if frame["type"] == "response.output_text.delta":
                    deltas += 1
                    if deltas == 3:
                        steer = {"type": "response.steer", "previous_response_id": target}
                        await ws.send(json.dumps({**steer, "input": "make it about dragons"}))
                    if "roar" in frame["delta"]:  # the continuation is generating
                        return

    asyncio.run(go())
    stats = engine.stats
    wait_until(lambda: stats.active == 0)
    assert stats.requests_cancelled == 2 and stats.requests_finished == 0
    generated = stats.tokens_generated
    time.sleep(0.3)
    assert stats.tokens_generated == generated  # stopped, not just unheard
    assert generated < (len(STORY.split()) + len(DRAGONS.split())) // 4
    assert len(server.app.state.responses.store) == 0


@pytest.mark.parametrize("stream_id", [None, "lane-1"])
def test_a_steer_joins_its_lanes_response_through_the_sdk_lane(
    server_factory: Any, stream_id: str | None
) -> None:
    """The SDK sends no `stream_id` with a steer; the target decides its lane."""
    server = serve(server_factory)

    async def go() -> list[dict[str, Any]]:
        async with connect(ws_url(server)) as ws:
            create = {"type": "response.create", "model": "scripted", "input": "Tell me a story"}
            await ws.send(
                json.dumps(create if stream_id is None else {**create, "stream_id": stream_id})
            )
            frames: list[dict[str, Any]] = []
            while True:
                frame = json.loads(await ws.recv())
                check_socket_event(frame)
                frames.append(frame)
                if frame["type"] == "response.output_text.delta" and len(frames) == 6:
                    steer = {"type": "response.steer", "input": "make it about dragons"}
                    target = frames[0]["response"]["id"]
                    await ws.send(json.dumps({**steer, "previous_response_id": target}))
                if frame["type"] in TERMINAL:
                    return frames

    frames = asyncio.run(go())
    assert all(f.get("stream_id") == stream_id for f in frames)
    assert any(f["type"] == "response.steer.accepted" for f in frames)
    assert frames[-1]["response"]["output"][0]["content"][0]["text"].endswith(SHORT_DRAGONS)


def test_max_output_tokens_bounds_the_whole_steered_answer(server_factory: Any) -> None:
    server = serve(server_factory, dragons=DRAGONS)
    engine: ScriptedEngine = server.engine  # type: ignore[assignment]

    async def go() -> list[dict[str, Any]]:
        async with connect(ws_url(server)) as ws:
            create = {"type": "response.create", "model": "scripted", "input": "Tell me a story"}
            await ws.send(json.dumps({**create, "max_output_tokens": 10}))
            frames: list[dict[str, Any]] = []
            while True:
                frame = json.loads(await ws.recv())
                frames.append(frame)
                deltas = [f for f in frames if f["type"] == "response.output_text.delta"]
                if frame["type"] == "response.output_text.delta" and len(deltas) == 3:
                    steer = {"type": "response.steer", "input": "make it about dragons"}
                    target = frames[0]["response"]["id"]
                    await ws.send(json.dumps({**steer, "previous_response_id": target}))
                if frame["type"] in TERMINAL:
                    return frames

    frames = asyncio.run(go())
    final = frames[-1]["response"]
    assert frames[-1]["type"] == "response.incomplete"
    assert final["usage"]["output_tokens"] == 10 == engine.stats.tokens_generated
    text = final["output"][0]["content"][0]["text"]
    assert text.startswith("Once upon") and "dragons" in text
