"""The Realtime session's state under hostile use, on a real server with the real
`websockets` client: deleting the item a response writes, items of many parts, and
large inputs prepared away from the event loop.
"""

from __future__ import annotations

import json
import threading
from typing import Any

import pytest
from websockets.asyncio.client import connect

from realtime.config import ServerConfig
from realtime.dialects.realtime_events.conversation import Conversation, item_bytes
from realtime.dialects.realtime_events.limits import (
    ITEM_OVERHEAD_BYTES,
    PART_OVERHEAD_BYTES,
    EventLimits,
)
from realtime.pipeline import ChatPipeline
from tests.conftest import RunningServer, async_wait_until
from tests.dialects.realtime_events.sdk_types import check_server_event

pytestmark = pytest.mark.anyio

LONG_TEXT = " ".join(f"word{i}" for i in range(400))


def url(server: RunningServer) -> str:
    return f"ws://127.0.0.1:{server.port}/v1/realtime?model=echo"


def user_item(text: str, **extra: Any) -> dict[str, Any]:
    return {
        "type": "message",
        "role": "user",
        "content": [{"type": "input_text", "text": text}],
    } | extra


async def recv(ws: Any) -> dict[str, Any]:
    event: dict[str, Any] = json.loads(await ws.recv())
    check_server_event(event)
    return event


async def until(ws: Any, kind: str) -> list[dict[str, Any]]:
    events = []
    while True:
        events.append(await recv(ws))
        if events[-1]["type"] == kind:
            return events


def names(event: dict[str, Any], item_id: str) -> bool:
    """Whether `event` is about item `item_id` (its `item_id`, its `item`, or an output)."""
    return item_id in json.dumps(event)


# --- no event for a deleted item ------------------------------------------------------


async def test_deleting_the_item_being_written_cancels_its_response_and_silences_it(
    server_factory: Any,
) -> None:
    server = server_factory(ServerConfig(log_level="warning", echo_delay=0.02))
    stats = server.engine.stats
    async with connect(url(server)) as ws:
        await until(ws, "session.created")
        await ws.send(
            json.dumps({"type": "conversation.item.create", "item": user_item(LONG_TEXT)})
        )
        await until(ws, "conversation.item.done")
        await ws.send(json.dumps({"type": "response.create"}))
        added = next(
            e for e in await until(ws, "response.output_text.delta")
            if e["type"] == "conversation.item.added"
        )  # fmt: skip
        item_id = added["item"]["id"]
        await ws.send(json.dumps({"type": "conversation.item.delete", "item_id": item_id}))
        events = await until(ws, "response.done")
        if not any(e["type"] == "conversation.item.deleted" for e in events):
            events += await until(ws, "conversation.item.deleted")
        deleted_at = next(
            i for i, e in enumerate(events) if e["type"] == "conversation.item.deleted"
        )
        after = [e for e in events[deleted_at + 1 :] if names(e, item_id)]
        assert after == [], f"events named {item_id} after its deletion: {after}"
        done = next(e for e in events if e["type"] == "response.done")["response"]
        assert done["status"] == "cancelled"
        assert all(item["id"] != item_id for item in done["output"])
        await async_wait_until(lambda: stats.active == 0)
        assert stats.requests_cancelled == 1
        assert stats.tokens_generated < len(LONG_TEXT.split())
        # the session carries on, without the deleted item
        await ws.send(json.dumps({"type": "conversation.item.retrieve", "item_id": item_id}))
        missing = await recv(ws)
        assert missing["type"] == "error" and missing["error"]["code"] == "item_not_found"
        await ws.send(json.dumps({"type": "response.create"}))
        final = await until(ws, "response.done")
        assert final[-1]["response"]["status"] == "completed"


async def test_deleting_the_item_before_the_one_being_written_is_never_named_again(
    server_factory: Any,
) -> None:
    """The response's item followed the deleted one: its `conversation.item.done`
    names the item before the deleted one as its previous item, and the response
    goes on."""
    server = server_factory(ServerConfig(log_level="warning", echo_delay=0.01))
    async with connect(url(server)) as ws:
        await until(ws, "session.created")
        await ws.send(json.dumps({"type": "conversation.item.create", "item": user_item("a")}))
        first = (await until(ws, "conversation.item.done"))[-1]["item"]["id"]
        await ws.send(
            json.dumps({"type": "conversation.item.create", "item": user_item(LONG_TEXT)})
        )
        second = (await until(ws, "conversation.item.done"))[-1]["item"]["id"]
        await ws.send(json.dumps({"type": "response.create"}))
        added = next(
            e for e in await until(ws, "response.output_text.delta")
            if e["type"] == "conversation.item.added"
        )  # fmt: skip
        assert added["previous_item_id"] == second
        await ws.send(json.dumps({"type": "conversation.item.delete", "item_id": second}))
        events = await until(ws, "response.done")
        deleted_at = next(
            i for i, e in enumerate(events) if e["type"] == "conversation.item.deleted"
        )
        after = [e for e in events[deleted_at + 1 :] if names(e, second)]
        assert after == [], f"events named {second} after its deletion: {after}"
        done = next(e for e in events if e["type"] == "conversation.item.done")
        assert done["previous_item_id"] == first
        assert events[-1]["response"]["status"] == "completed"


def test_deleting_a_finished_item_of_a_running_response_leaves_it_out_of_response_done() -> None:
    """The rule's other half, without sockets: an item the model already finished is
    forgotten (no more events name it), and the response goes on."""
    from realtime.dialects.realtime_events.ids import EventIds
    from realtime.dialects.realtime_events.render import ResponseRenderer
    from realtime.dialects.realtime_events.session_config import GenerationConfig

    renderer = ResponseRenderer(
        "resp_1", EventIds(), GenerationConfig(model="echo"), on_item=lambda item: None
    )
    renderer.output.append(
        {"id": "item_done", "status": "completed", "type": "message", "content": []}
    )
    renderer.output.append(
        {"id": "item_open", "status": "in_progress", "type": "message", "content": []}
    )
    assert renderer.writes("item_done") and not renderer.forget("item_done")
    assert renderer.forget("item_open")
    assert [item["id"] for item in renderer.response("completed")["output"]] == []


# --- memory bounded in parts and bytes ------------------------------------------------


async def test_an_item_of_too_many_parts_is_refused_before_it_is_validated(
    server_factory: Any,
) -> None:
    server = server_factory(ServerConfig(log_level="warning", realtime_max_item_parts=8))
    parts = [{"type": "input_text", "text": ""}] * 9
    async with connect(url(server)) as ws:
        await until(ws, "session.created")
        item = {"type": "message", "role": "user", "content": parts}
        await ws.send(json.dumps({"type": "conversation.item.create", "item": item}))
        error = await recv(ws)
        assert error["type"] == "error"
        assert error["error"]["code"] == "too_many_content_parts"
        assert error["error"]["param"] == "item.content"
        oob = {"type": "response.create", "response": {"conversation": "none", "input": [item]}}
        await ws.send(json.dumps(oob))
        error = await recv(ws)
        assert error["error"]["code"] == "too_many_content_parts"
        assert error["error"]["param"] == "response.input.0.content"


async def test_the_byte_limit_counts_parts_not_only_characters(server_factory: Any) -> None:
    """Items of empty parts hold no characters; the byte limit still fills."""
    limit = 64 * 1024
    server = server_factory(
        ServerConfig(log_level="warning", realtime_max_conversation_bytes=limit)
    )
    parts = [{"type": "input_text", "text": ""}] * 64
    per_item = ITEM_OVERHEAD_BYTES + len("item_00000") + 64 * PART_OVERHEAD_BYTES
    accepted = 0
    async with connect(url(server)) as ws:
        await until(ws, "session.created")
        for n in range(limit // per_item + 2):
            item = {"type": "message", "role": "user", "content": parts, "id": f"item_{n:05d}"}
            await ws.send(json.dumps({"type": "conversation.item.create", "item": item}))
            event = await recv(ws)
            if event["type"] == "error":
                assert event["error"]["code"] == "conversation_full"
                break
            await recv(ws)  # its conversation.item.done
            accepted += 1
    assert accepted == limit // per_item


def test_item_bytes_count_utf8_and_each_part() -> None:
    parts = [{"type": "input_text", "text": "é"}, {"type": "input_text", "text": ""}]
    item = {"id": "i", "type": "message", "role": "user", "content": parts}
    assert item_bytes(item) == ITEM_OVERHEAD_BYTES + 1 + 2 * PART_OVERHEAD_BYTES + 2


def test_retrieving_a_complete_item_copies_nothing() -> None:
    """A complete item never changes again: retrieve sends it as it is (a huge item costs
    no copy on the event loop); one still being written is copied, as far as it got."""
    conversation = Conversation(EventLimits())
    done = {"id": "a", "type": "message", "role": "user", "status": "completed",
            "content": [{"type": "input_text", "text": "x" * 100_000}]}  # fmt: skip
    conversation.add(done)
    assert conversation.snapshot("a") is done
    part = {"type": "output_text", "text": "so far"}
    writing = {"id": "b", "type": "message", "role": "assistant", "status": "in_progress",
               "content": [part]}  # fmt: skip
    conversation.add(writing)
    copy = conversation.snapshot("b")
    part["text"] += " and more"
    assert copy["content"][0]["text"] == "so far"


# --- large inputs are prepared off the event loop -------------------------------------


async def test_a_large_out_of_band_input_is_prepared_off_the_event_loop(
    server_factory: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The off-loop threshold looks at what the response renders: here its own input (an
    empty conversation), not the conversation alone."""
    threads: list[str] = []
    prepare = ChatPipeline.prepare

    def spy(self: ChatPipeline, *args: Any, **kwargs: Any) -> Any:
        threads.append(threading.current_thread().name)
        return prepare(self, *args, **kwargs)

    monkeypatch.setattr(ChatPipeline, "prepare", spy)
    server = server_factory(ServerConfig(log_level="warning"))
    loop_thread = server.thread.name
    text = "many words " * 12_000  # 132 kB: over the off-loop threshold
    async with connect(url(server), max_size=None) as ws:
        await until(ws, "session.created")
        create = {
            "type": "response.create",
            "response": {
                "conversation": "none",
                "input": [user_item(text)],
                "max_output_tokens": 2,
            },
        }
        await ws.send(json.dumps(create))
        done = (await until(ws, "response.done"))[-1]
        assert done["response"]["status"] in ("completed", "incomplete")
    assert threads and loop_thread not in threads, threads


async def test_an_out_of_band_input_over_the_conversation_limits_is_refused_before_work(
    server_factory: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A response's own input is bounded as the conversation is (characters here): a
    7 MB input is refused at once, before it is templated or tokenized."""
    prepared: list[str] = []
    prepare = ChatPipeline.prepare

    def spy(self: ChatPipeline, *args: Any, **kwargs: Any) -> Any:
        prepared.append(threading.current_thread().name)
        return prepare(self, *args, **kwargs)

    monkeypatch.setattr(ChatPipeline, "prepare", spy)
    server = server_factory(ServerConfig(log_level="warning", realtime_max_conversation_chars=1000))
    create = {
        "type": "response.create",
        "response": {"conversation": "none", "input": [user_item("x" * 1001)]},
    }
    async with connect(url(server)) as ws:
        await until(ws, "session.created")
        await ws.send(json.dumps(create))
        error = await recv(ws)
        assert error["type"] == "error", error
        assert error["error"]["code"] == "conversation_full"
        assert error["error"]["param"] == "response.input"
        create["response"]["input"] = [user_item("x" * 1000)]  # type: ignore[index]
        create["response"]["max_output_tokens"] = 1  # type: ignore[index]
        await ws.send(json.dumps(create))
        done = (await until(ws, "response.done"))[-1]
        assert done["response"]["status"] in ("completed", "incomplete")
    assert len(prepared) == 1  # only the one within the limit was prepared
