"""The Conversations API through a real server and the unmodified openai SDK.

A conversation carried by responses over HTTP and over WebSocket mode (its items
are each response's context, and each response's input and output join it),
the items routes, per-key visibility, a restart of the SQLite store, and bad
input, each answered with a specific OpenAI error body.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from realtime.config import ServerConfig
from realtime.engine.echo import EchoTokenizer
from realtime.engine.scripted import ScriptedEngine
from tests.conftest import RunningServer, wait_until

TOKENIZER = EchoTokenizer()
#: The scripted model answers "Answer N." to the newest "turn N" of its prompt (which
#: holds the whole conversation: its template renders every message).
SCRIPT: list[Any] = [{"match": f"turn {n}", "reply": f"Answer {n}."} for n in range(1, 6)]
TERMINAL = {"response.completed", "response.incomplete", "response.failed", "error"}


@pytest.fixture(params=["memory", "sqlite", "postgresql"])
def store_kind(request: pytest.FixtureRequest) -> str:
    """The store's name, or for PostgreSQL the URL of a database of the test's own."""
    if request.param == "postgresql":
        return str(request.getfixturevalue("postgres_url"))
    return str(request.param)


def config(kind: str, tmp_path: Path, **fields: Any) -> ServerConfig:
    place = {"memory": None, "sqlite": str(tmp_path / "store")}.get(kind, kind)
    return ServerConfig(log_level="warning", response_store_dir=place, **fields)


def sdk(server: RunningServer, key: str = "x") -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=server.http_url + "/v1", api_key=key, max_retries=0)


async def on_socket(connection: Any, **create: Any) -> Any:
    """One `response.create` on a WebSocket-mode connection; its last event."""
    await connection.send({"type": "response.create", "model": "echo", **create})
    async for event in connection:
        if event.type in TERMINAL:
            return event
    raise AssertionError("the socket closed before a terminal event")


def texts(items: list[Any]) -> list[tuple[str, str]]:
    """(role, text) of each message item."""
    return [(item.role, item.content[0].text) for item in items]


def test_a_conversation_across_five_responses_over_http_and_websocket(
    server_factory: Any, store_kind: str, tmp_path: Path
) -> None:
    engine = ScriptedEngine(SCRIPT)
    server = server_factory(config(store_kind, tmp_path), engine)
    turns = [f"turn {n}" for n in range(1, 6)]
    answers = [f"Answer {n}." for n in range(1, 6)]

    fifth_prompt: list[str] = []

    async def go() -> tuple[Any, list[Any], list[Any], Any]:
        async with sdk(server) as client:
            conversation = await client.conversations.create(metadata={"topic": "five"})
            responses: list[Any] = []
            async with client.responses.connect() as connection:
                responses.append(
                    await client.responses.create(
                        model="scripted", input=turns[0], conversation=conversation.id
                    )
                )
                event = await on_socket(
                    connection, model="scripted", input=turns[1], conversation=conversation.id
                )
                assert event.type == "response.completed", event
                responses.append(event.response)
                stream = await client.responses.create(
                    model="scripted",
                    input=turns[2],
                    conversation={"id": conversation.id},
                    stream=True,
                )
                async for streamed in stream:
                    if streamed.type == "response.completed":
                        responses.append(streamed.response)
                event = await on_socket(
                    connection,
                    model="scripted",
                    input=turns[3],
                    conversation={"id": conversation.id},
                    store=False,
                )
                assert event.type == "response.completed", event
                responses.append(event.response)
            responses.append(
                await client.responses.create(
                    model="scripted", input=turns[4], conversation=conversation.id
                )
            )
            fifth_prompt.append(engine.prompts[-1])
            alone = await client.responses.create(model="scripted", input=turns[4])
            items = [
                item
                async for item in client.conversations.items.list(
                    conversation.id, order="asc", limit=3
                )
            ]
            newest_first = await client.conversations.items.list(conversation.id)
            return conversation, responses, items, (alone, newest_first)

    conversation, responses, items, (alone, newest_first) = asyncio.run(go())
    assert conversation.id.startswith("conv_") and conversation.metadata == {"topic": "five"}
    assert [r.output_text for r in responses] == answers
    assert all(r.conversation.id == conversation.id for r in responses)
    # every turn's input and output, in order, paged three at a time
    assert texts(items) == [
        pair
        for turn, answer in zip(turns, answers, strict=True)
        for pair in (("user", turn), ("assistant", answer))
    ]
    assert [item.id for item in items[1::2]] == [r.output[0].id for r in responses]
    assert [item.id for item in newest_first.data] == [item.id for item in reversed(items)]
    assert newest_first.has_more is False
    # the fifth response saw the four turns before it: its prompt holds them, and is longer
    # than the same input alone by at least their text
    [prompt] = fifth_prompt
    assert all(text in prompt for text in [*turns, *answers[:4]]), prompt
    assert "Answer 5." not in prompt
    earlier = sum(len(TOKENIZER.encode(t)) for t in [*turns[:4], *answers[:4]])
    assert responses[4].usage.input_tokens >= alone.usage.input_tokens + earlier


def test_another_key_cannot_see_a_conversation(server_factory: Any) -> None:
    server = server_factory(ServerConfig(log_level="warning", api_keys=("key-a", "key-b")))

    async def go() -> None:
        async with sdk(server, "key-a") as alice, sdk(server, "key-b") as bob:
            mine = await alice.conversations.create(items=[{"role": "user", "content": "hi"}])
            [kept] = (await alice.conversations.items.list(mine.id)).data
            unknown = "conv_" + "0" * 32
            for conversation_id in (mine.id, unknown):
                calls = [
                    bob.conversations.retrieve(conversation_id),
                    bob.conversations.update(conversation_id, metadata={"a": "b"}),
                    bob.conversations.delete(conversation_id),
                    bob.conversations.items.list(conversation_id),
                    bob.conversations.items.create(
                        conversation_id, items=[{"role": "user", "content": "x"}]
                    ),
                    bob.conversations.items.retrieve(kept.id, conversation_id=conversation_id),
                    bob.conversations.items.delete(kept.id, conversation_id=conversation_id),
                ]
                for call in calls:
                    with pytest.raises(openai.NotFoundError) as info:
                        await call
                    body = info.value.body
                    assert body["code"] == "conversation_not_found", body  # type: ignore[index]
                    # the same answer as for an id nobody made
                    assert body["message"] == (  # type: ignore[index]
                        f"Conversation with id '{conversation_id}' not found."
                    )
                with pytest.raises(openai.NotFoundError) as info:
                    await bob.responses.create(
                        model="echo", input="x", conversation=conversation_id
                    )
                assert info.value.body["param"] == "conversation"  # type: ignore[index]
                async with bob.responses.connect() as connection:
                    event = await on_socket(connection, input="x", conversation=conversation_id)
                assert event.type == "error" and event.status == 404
                assert event.error.code == "conversation_not_found"
            # alice still has it, untouched
            assert len((await alice.conversations.items.list(mine.id)).data) == 1
            answer = await alice.responses.create(model="echo", input="yes", conversation=mine.id)
            assert answer.output_text == "yes"

    asyncio.run(go())


def test_a_conversation_survives_a_server_restart_on_sqlite(
    server_factory: Any, tmp_path: Path
) -> None:
    settings = config("sqlite", tmp_path, api_keys=("key",))
    first = server_factory(settings, ScriptedEngine(SCRIPT))

    async def before() -> tuple[str, list[str]]:
        async with sdk(first, "key") as client:
            conversation = await client.conversations.create(metadata={"kept": "yes"})
            await client.responses.create(
                model="scripted", input="turn 1", conversation=conversation.id
            )
            items = await client.conversations.items.list(conversation.id, order="asc")
            return conversation.id, [item.id for item in items.data]

    conversation_id, item_ids = asyncio.run(before())
    first.stop()
    engine = ScriptedEngine(SCRIPT)
    second = server_factory(settings, engine)

    async def after() -> tuple[Any, Any, Any]:
        async with sdk(second, "key") as client:
            found = await client.conversations.retrieve(conversation_id)
            items = await client.conversations.items.list(conversation_id, order="asc")
            more = await client.responses.create(
                model="scripted", input="turn 2", conversation=found.id
            )
            return found, items, more

    found, items, more = asyncio.run(after())
    assert found.metadata == {"kept": "yes"}
    assert [item.id for item in items.data] == item_ids and len(item_ids) == 2
    assert more.output_text == "Answer 2."
    assert "turn 1" in engine.prompts[-1] and "Answer 1." in engine.prompts[-1]


def test_items_create_retrieve_and_delete_round_trip(server_factory: Any) -> None:
    server = server_factory(ServerConfig(log_level="warning"))

    async def go() -> None:
        async with sdk(server) as client:
            conversation = await client.conversations.create(
                items=[
                    {"role": "system", "content": "Be brief."},
                    {"type": "message", "role": "user", "content": "one"},
                ]
            )
            added = await client.conversations.items.create(
                conversation.id,
                items=[
                    {"type": "message", "role": "assistant", "content": "two", "id": "msg_mine"},
                    {"role": "user", "content": [{"type": "input_text", "text": "three"}]},
                ],
            )
            assert added.data[0].id == "msg_mine"
            assert added.first_id == "msg_mine" and added.last_id == added.data[1].id
            got = await client.conversations.items.retrieve(
                "msg_mine", conversation_id=conversation.id
            )
            assert got.type == "message" and got.role == "assistant"
            assert got.content[0].text == "two"
            after = await client.conversations.items.delete(
                "msg_mine", conversation_id=conversation.id
            )
            assert after.id == conversation.id and after.object == "conversation"
            listed = await client.conversations.items.list(conversation.id, order="asc")
            assert texts(listed.data) == [
                ("system", "Be brief."), ("user", "one"), ("user", "three")
            ]  # fmt: skip
            with pytest.raises(openai.NotFoundError) as info:
                await client.conversations.items.retrieve(
                    "msg_mine", conversation_id=conversation.id
                )
            assert info.value.body["code"] == "item_not_found"  # type: ignore[index]
            # a response continues it: the system message is in its context
            answer = await client.responses.create(
                model="echo", input="four", conversation=conversation.id
            )
            assert answer.output_text == "four"
            updated = await client.conversations.update(conversation.id, metadata={"k": "v"})
            assert updated.metadata == {"k": "v"}
            assert (await client.conversations.retrieve(conversation.id)).metadata == {"k": "v"}
            deleted = await client.conversations.delete(conversation.id)
            assert deleted.deleted and deleted.object == "conversation.deleted"
            with pytest.raises(openai.NotFoundError):
                await client.conversations.retrieve(conversation.id)
            with pytest.raises(openai.NotFoundError):
                await client.conversations.items.list(conversation.id)

    asyncio.run(go())


def test_what_ends_a_response_decides_what_joins_its_conversation(server_factory: Any) -> None:
    """A response cut off by `max_output_tokens` joins (its output is an answer); one whose
    client hung up mid-stream does not, and its engine stopped."""
    server = server_factory(ServerConfig(log_level="warning", echo_delay=0.05))
    text = " ".join(f"word{i}" for i in range(200))
    with httpx.Client(base_url=server.http_url + "/v1", timeout=30) as client:
        cid = client.post("/conversations", json={}).json()["id"]
        body = {"model": "echo", "input": text, "conversation": cid}
        cut = client.post("/responses", json={**body, "max_output_tokens": 2}).json()
        assert cut["status"] == "incomplete"
        items = client.get(f"/conversations/{cid}/items", params={"order": "asc"}).json()
        assert [item["id"] for item in items["data"]][1:] == [cut["output"][0]["id"]]
        with client.stream("POST", "/responses", json={**body, "stream": True}) as response:
            for line in response.iter_lines():
                if '"response.output_text.delta"' in line:
                    break
        stats = server.engine.stats
        wait_until(lambda: stats.requests_cancelled == 1)
        after = client.get(f"/conversations/{cid}/items").json()
        assert len(after["data"]) == 2  # the abandoned response added nothing


# --- bad input: a specific OpenAI error, never a 500 ---

MESSAGE = {"role": "user", "content": "x"}


@pytest.fixture
def limited(server_factory: Any) -> RunningServer:
    return server_factory(  # type: ignore[no-any-return]
        ServerConfig(log_level="warning", conversation_max_items=3)
    )


def error(response: httpx.Response) -> tuple[int, str | None, str | None]:
    body = response.json()["error"]
    return response.status_code, body["code"], body["param"]


def test_bad_conversation_requests_get_specific_errors(limited: RunningServer) -> None:
    with httpx.Client(base_url=limited.http_url + "/v1", timeout=30) as client:
        conversation = client.post("/conversations", json={"items": [MESSAGE]}).json()
        cid = conversation["id"]
        kept = client.get(f"/conversations/{cid}/items").json()["data"][0]["id"]
        cases: list[tuple[str, str, Any, tuple[int, str | None, str | None]]] = [
            ("POST", "/conversations", {"items": [MESSAGE] * 21}, (400, "too_many_items", "items")),
            ("POST", "/conversations", {"metadata": {f"k{i}": "v" for i in range(17)}},
             (400, None, "metadata")),
            ("POST", "/conversations", {"metadata": {"k" * 65: "v"}}, (400, None, "metadata")),
            ("POST", "/conversations", {"metadata": {"k": "v" * 513}}, (400, None, "metadata.k")),
            ("POST", "/conversations", {"metadata": {"k": 1}}, (400, "invalid_type", "metadata.k")),
            ("POST", "/conversations", {"itemz": []}, (400, "unknown_field", "itemz")),
            ("POST", "/conversations", {"items": "x"}, (400, "invalid_type", "items")),
            ("POST", "/conversations", {"items": [{"type": "bogus"}]},
             (400, "invalid_value", "items.0.type")),
            ("POST", "/conversations", {"items": [{"type": "web_search_call"}]},
             (400, "unsupported", "items.0.type")),
            ("POST", "/conversations", {"items": [{**MESSAGE, "id": "a"}, {**MESSAGE, "id": "a"}]},
             (400, "duplicate_item_id", "items.1.id")),
            ("POST", "/conversations", [1], (400, None, None)),
            ("GET", "/conversations/conv_nope", None,
             (404, "conversation_not_found", "conversation_id")),
            ("POST", f"/conversations/{cid}", {}, (400, "missing_required_parameter", "metadata")),
            ("POST", f"/conversations/{cid}", {"metadata": {"a": "b"}, "x": 1},
             (400, "unknown_field", "x")),
            ("GET", f"/conversations/{cid}?limit=0", None, (400, "unknown_field", "limit")),
            ("GET", f"/conversations/{cid}/items?limit=0", None, (400, "invalid_value", "limit")),
            ("GET", f"/conversations/{cid}/items?limit=101", None, (400, "invalid_value", "limit")),
            ("GET", f"/conversations/{cid}/items?order=up", None, (400, "invalid_value", "order")),
            ("GET", f"/conversations/{cid}/items?after=nope", None, (400, None, "after")),
            ("GET", f"/conversations/{cid}/items?include=nope", None,
             (400, "invalid_value", "include")),
            ("GET", f"/conversations/{cid}/items?page=2", None, (400, "unknown_field", "page")),
            ("POST", f"/conversations/{cid}/items", {},
             (400, "missing_required_parameter", "items")),
            ("POST", f"/conversations/{cid}/items", {"items": [{**MESSAGE, "id": kept}]},
             (400, "duplicate_item_id", "items.0.id")),
            ("POST", f"/conversations/{cid}/items", {"items": [MESSAGE] * 21},
             (400, "too_many_items", "items")),
            ("GET", f"/conversations/{cid}/items/nope", None, (404, "item_not_found", "item_id")),
            ("DELETE", f"/conversations/{cid}/items/nope", None,
             (404, "item_not_found", "item_id")),
            ("POST", "/responses", {"model": "echo", "input": "x", "conversation": cid,
                                    "previous_response_id": "resp_x"},
             (400, "invalid_value", "conversation")),
            ("POST", "/responses", {"model": "echo", "input": "x", "conversation": {"id": 5}},
             (400, "invalid_type", "conversation.id")),
            ("POST", "/responses", {"model": "echo", "input": "x", "conversation": {"idd": cid}},
             (400, "unknown_field", "conversation.idd")),
            ("POST", "/responses", {"model": "echo", "input": "x", "conversation": ""},
             (400, "invalid_value", "conversation")),
            ("POST", "/responses", {"model": "echo", "input": "x", "conversation": "conv_nope"},
             (404, "conversation_not_found", "conversation")),
            ("POST", "/responses", {"model": "echo", "input": [{**MESSAGE, "id": kept}],
                                    "conversation": cid},
             (400, "duplicate_item_id", "input.0.id")),
        ]  # fmt: skip
        for method, path, body, expected in cases:
            answer = client.request(method, path, json=body)
            assert error(answer) == expected, (method, path, body, answer.text)
        # nothing above changed the conversation
        assert len(client.get(f"/conversations/{cid}/items").json()["data"]) == 1
        # past --conversation-max-items (3), before any item is read
        client.post(f"/conversations/{cid}/items", json={"items": [MESSAGE] * 3})
        too_long = client.post(
            "/responses", json={"model": "echo", "input": "x", "conversation": cid}
        )
        assert error(too_long) == (400, "conversation_too_long", "conversation"), too_long.text
        not_json = client.post("/conversations", content=b"{", headers={"content-type": "x"})
        assert not_json.status_code == 400


@pytest.mark.anyio
async def test_bad_conversation_creates_on_a_socket_get_error_events(
    limited: RunningServer,
) -> None:
    async with sdk(limited) as client, client.responses.connect() as connection:
        both = await on_socket(
            connection, input="x", conversation="conv_x", previous_response_id="resp_x"
        )
        assert both.type == "error" and both.error.param == "conversation"
        unknown = await on_socket(connection, input="x", conversation="conv_nope")
        assert unknown.type == "error" and unknown.error.code == "conversation_not_found"
        # the socket carries on
        conversation = await client.conversations.create()
        ok = await on_socket(connection, input="fine", conversation=conversation.id)
        assert ok.type == "response.completed" and ok.response.output_text == "fine"


def test_json_of_a_conversation_is_what_the_sdk_defines(server_factory: Any) -> None:
    """Every field of the objects, as sent (the SDK would accept extra ones silently)."""
    server = server_factory(ServerConfig(log_level="warning"))
    with httpx.Client(base_url=server.http_url + "/v1", timeout=30) as client:
        made = client.post("/conversations", json={"metadata": {"a": "b"}}).json()
        assert set(made) == {"id", "object", "created_at", "metadata"}
        assert made["object"] == "conversation" and isinstance(made["created_at"], int)
        page = client.get(f"/conversations/{made['id']}/items").json()
        assert page == {
            "object": "list", "data": [], "first_id": None, "last_id": None, "has_more": False
        }  # fmt: skip
        gone = client.delete(f"/conversations/{made['id']}").json()
        assert gone == {"id": made["id"], "object": "conversation.deleted", "deleted": True}
        response = client.post("/responses", json={"model": "echo", "input": "x"}).json()
        assert "conversation" not in response  # only a response in one names it
        assert json.dumps(response)  # plain JSON


def test_automatic_compaction_in_a_conversation_stands_for_what_came_before(
    server_factory: Any,
) -> None:
    """`context_management` on a response in a long conversation: the compaction item joins
    the conversation with the answer, and the next response renders the conversation from
    it on (the summary, not the 40 turns before it)."""
    from tests.http.test_responses_compaction import CONTEXT, SUMMARY, turn_text
    from tests.http.test_responses_compaction import SCRIPT as COMPACTION_SCRIPT

    engine = ScriptedEngine(COMPACTION_SCRIPT)
    server = server_factory(ServerConfig(log_level="warning"), engine)

    async def go() -> tuple[Any, Any, list[Any]]:
        async with sdk(server) as client:
            conversation = await client.conversations.create()
            for start in range(0, len(CONTEXT), 20):  # 20 items a call at most
                await client.conversations.items.create(
                    conversation.id, items=CONTEXT[start : start + 20]
                )
            first = await client.responses.create(
                model="scripted",
                input="next question",
                conversation=conversation.id,
                context_management=[{"type": "compaction", "compact_threshold": 1000}],
            )
            again = await client.responses.create(
                model="scripted", input="next question", conversation=conversation.id
            )
            items = [
                item
                async for item in client.conversations.items.list(
                    conversation.id, order="asc", limit=100
                )
            ]
            return first, again, items

    first, again, items = asyncio.run(go())
    assert [item.type for item in first.output] == ["compaction", "message"]
    follow = engine.prompts[-1]
    assert SUMMARY in follow and turn_text(0, "user") not in follow
    assert follow.endswith("assistant: Answered.\nuser: next question\nassistant: ")
    assert again.usage is not None and again.usage.input_tokens < 0.3 * 4000
    # the conversation keeps every item: the 41 given, then each response's input and output
    assert len(items) == len(CONTEXT) + 3 + 2
    assert [item.type for item in items[len(CONTEXT) :]] == [
        "message", "compaction", "message", "message", "message"
    ]  # fmt: skip
