"""The response stores: one suite for every implementation of `ResponseStore`, and what only
SQLite does.

Every test taking `make_store` runs against each store in `STORES` (a networked
store joins by adding its factory there); the semantics are `realtime.store.base`'s
docstring: durable and visible on return, bounded writes, owners, an exact order,
retention by age and by bytes that never deletes a record within its limits.
"""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import orjson
import pytest

from realtime.store import MemoryResponseStore, ResponseStore, StoredResponse
from realtime.store.base import StoreError
from realtime.store.conversations import DuplicateItemError, StoredConversation
from realtime.store.postgres import PostgresResponseStore
from realtime.store.sqlite import FILENAME, SQLiteResponseStore


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


def record(
    rid: str, previous: str | None = None, owner: str | None = None, at: float = 1_000_000.0,
    text: str = "x",
) -> StoredResponse:  # fmt: skip
    return StoredResponse(
        id=rid,
        owner=owner,
        created_at=at,
        previous_response_id=previous,
        response={"id": rid, "object": "response", "output": [{"text": text}]},
        input_items=[{"id": f"msg_{rid}", "type": "message", "role": "user", "content": []}],
    )


def run(coroutine: Any) -> Any:
    return asyncio.run(coroutine)


StoreFactory = Callable[..., ResponseStore]

#: Every store implementation: a name and how to open one in a test's directory with
#: `max_age_seconds`, `max_bytes` and `clock`. A store that keeps records across
#: instances (a file, a database) opens the same records each time it is called.
#: A networked store is given the URL of a database of the test's own (`postgres_url`)
#: in place of the directory.
STORES: dict[str, Callable[[Any, dict[str, Any]], ResponseStore]] = {
    "memory": lambda directory, options: MemoryResponseStore(**options),
    "sqlite": lambda directory, options: SQLiteResponseStore(directory / "store", **options),
    "postgresql": lambda url, options: PostgresResponseStore(url, **options),
}
#: The stores whose place is a database URL, not a directory.
NETWORKED = {"postgresql"}


@pytest.fixture(params=sorted(STORES))
def make_store(request: pytest.FixtureRequest, tmp_path: Path) -> StoreFactory:
    place = request.getfixturevalue("postgres_url") if request.param in NETWORKED else tmp_path

    def factory(**options: Any) -> ResponseStore:
        options.setdefault("clock", Clock())
        return STORES[request.param](place, options)

    return factory


def test_put_get_delete_by_owner(make_store: StoreFactory) -> None:
    async def go() -> None:
        store = make_store()
        alice = store.owner(b"alice")
        await store.put(record("r1", owner=alice))
        assert (await store.get("r1", alice)).response["id"] == "r1"  # type: ignore[union-attr]
        assert await store.get("r1", None) is None
        assert await store.get("r1", store.owner(b"bob")) is None
        assert not await store.delete("r1", None)
        assert await store.delete("r1", alice)
        assert await store.get("r1", alice) is None
        assert not await store.delete("r1", alice)
        await store.close()

    run(go())


def test_chains_are_walked_newest_first_and_name_a_missing_link(make_store: StoreFactory) -> None:
    async def go() -> None:
        store = make_store()
        await store.put(record("a"))
        await store.put(record("b", "a"))
        await store.put(record("c", "b"))
        chain = await store.chain("c", None, 10)
        assert [r.id for r in chain.records] == ["c", "b", "a"] and chain.missing is None
        limited = await store.chain("c", None, 2)
        assert [r.id for r in limited.records] == ["c", "b"] and limited.truncated
        await store.delete("b", None)
        broken = await store.chain("c", None, 10)
        assert [r.id for r in broken.records] == ["c"] and broken.missing == "b"
        nothing = await store.chain("zzz", None, 10)
        assert nothing.records == [] and nothing.missing == "zzz"
        other = await store.chain("c", store.owner(b"k"), 10)
        assert other.records == [] and other.missing == "c"
        await store.close()

    run(go())


def test_old_records_expire(make_store: StoreFactory) -> None:
    clock = Clock()

    async def go() -> None:
        store = make_store(max_age_seconds=100, clock=clock)
        await store.put(record("old", at=clock.now - 50))
        await store.put(record("new", at=clock.now))
        assert await store.get("old", None) is not None
        clock.now += 60
        assert await store.get("old", None) is None
        assert await store.get("new", None) is not None
        chain = await store.chain("old", None, 5)
        assert chain.missing == "old"
        await store.close()

    run(go())


def test_the_oldest_records_go_beyond_the_byte_limit(make_store: StoreFactory) -> None:
    size = len(record("r0", at=0).encode())

    async def go() -> None:
        store = make_store(max_bytes=size * 3 + size // 2)
        for i in range(6):
            await store.put(record(f"r{i}", at=1_000_000.0 + i))
        kept = [i for i in range(6) if await store.get(f"r{i}", None) is not None]
        assert kept == [3, 4, 5]
        await store.close()

    run(go())


def test_a_record_is_visible_and_sized_when_put_returns(make_store: StoreFactory) -> None:
    async def go() -> None:
        store = make_store()
        r = record("r1")
        await store.put(r)
        assert r.size == len(r.encode())
        found = await store.get("r1", None)
        assert found is not None and found.size == r.size
        chain = await store.chain("r1", None, 5)
        assert [c.size for c in chain.records] == [r.size]
        await store.close()

    run(go())


def test_order_is_the_order_of_puts_not_of_timestamps(make_store: StoreFactory) -> None:
    """Records made in the same second (or put out of their `created_at` order) keep
    the order they were put in: the byte limit removes the first put first."""
    size = len(record("r0").encode())

    async def go() -> None:
        store = make_store(max_bytes=size * 3)
        # the same whole second, then an earlier one: neither decides the order
        for i, at in enumerate([1_000_000.2, 1_000_000.7, 1_000_000.4, 999_999.0]):
            await store.put(record(f"r{i}", at=at))
        kept = [i for i in range(4) if await store.get(f"r{i}", None) is not None]
        assert kept == [1, 2, 3]
        await store.put(record("r1", at=1_000_000.9))  # put again: now the newest
        await store.put(record("r4"))
        kept = [i for i in range(5) if await store.get(f"r{i}", None) is not None]
        assert kept == [1, 3, 4]
        await store.close()

    run(go())


@pytest.mark.parametrize("limit_in_records", [1, 2, 5])
def test_the_byte_limit_keeps_exactly_the_newest_that_fit(
    make_store: StoreFactory, limit_in_records: int
) -> None:
    """After every put, a record is kept if it and every newer record fit within
    `max_bytes` (sizes vary); the newest is kept even alone over the limit."""
    texts = ["a" * n for n in (10, 900, 30, 4000, 5, 700, 60, 2500, 1, 300)]

    async def go() -> None:
        sizes = [len(record(f"r{i}", text=t).encode()) for i, t in enumerate(texts)]
        max_bytes = sorted(sizes)[len(sizes) // 2] * limit_in_records
        store = make_store(max_bytes=max_bytes)
        for n, text in enumerate(texts):
            await store.put(record(f"r{n}", text=text))
            expected, total = [], 0
            for i in range(n, -1, -1):
                total += sizes[i]
                if i != n and total > max_bytes:
                    break
                expected.append(i)
            kept = [i for i in range(n + 1) if await store.get(f"r{i}", None) is not None]
            assert kept == sorted(expected), (n, max_bytes)
        await store.close()

    run(go())


def test_the_age_limit_counts_from_the_precise_creation_time(make_store: StoreFactory) -> None:
    """A record made at x.9 s is kept until x.9 + max_age, not deleted at x + max_age."""
    clock = Clock()

    async def go() -> None:
        store = make_store(max_age_seconds=10, clock=clock)
        made = clock.now + 0.9
        await store.put(record("r", at=made))
        clock.now = made + 9.95
        await store.put(record("later", at=clock.now))  # a write may prune: not this one
        assert await store.get("r", None) is not None
        assert (await store.chain("r", None, 5)).records
        clock.now = made + 10.05
        assert await store.get("r", None) is None
        assert not await store.delete("r", None)
        await store.close()

    run(go())


def test_a_put_again_replaces_the_record(make_store: StoreFactory) -> None:
    async def go() -> None:
        store = make_store()
        await store.put(record("r", text="first"))
        await store.put(record("r", text="second, longer"))
        found = await store.get("r", None)
        assert found is not None and found.response["output"] == [{"text": "second, longer"}]
        await store.close()

    run(go())


def test_sqlite_keeps_records_and_owners_across_a_restart(tmp_path: Path) -> None:
    async def first() -> str | None:
        store = SQLiteResponseStore(tmp_path, clock=Clock())
        owner = store.owner(b"key")
        await store.put(record("r1", owner=owner, text="kept"))
        await store.put(record("r2", "r1", owner=owner))
        await store.close()  # waits for the queued writes
        return owner

    owner = run(first())

    async def second() -> None:
        store = SQLiteResponseStore(tmp_path, clock=Clock())
        assert store.owner(b"key") == owner  # the secret lives in the file
        found = await store.get("r1", owner)
        assert found is not None and found.response["output"] == [{"text": "kept"}]
        chain = await store.chain("r2", owner, 10)
        assert [r.id for r in chain.records] == ["r2", "r1"]
        await store.close()

    run(second())
    with sqlite3.connect(tmp_path / FILENAME) as db:
        columns = [row[1] for row in db.execute("PRAGMA table_info(responses)")]
        assert "owner" in columns
        secret = db.execute("SELECT value FROM meta").fetchone()[0]
        assert b"key" not in secret and len(secret) == 32


def test_an_unusable_directory_or_a_newer_file_is_refused(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    with pytest.raises(ValueError, match="cannot open the response store"):
        SQLiteResponseStore(blocker / "store")
    with sqlite3.connect(tmp_path / FILENAME) as db:
        db.execute("PRAGMA user_version = 99")
    with pytest.raises(ValueError, match="newer version"):
        SQLiteResponseStore(tmp_path)


def test_sqlite_put_returns_once_committed_to_the_file(tmp_path: Path) -> None:
    """What `put` returned for is in the file: another connection reads it at once."""

    async def go() -> None:
        store = SQLiteResponseStore(tmp_path, clock=Clock())
        for i in range(5):
            await store.put(record(f"r{i}"))
            with sqlite3.connect(tmp_path / FILENAME) as db:
                ids = {row[0] for row in db.execute("SELECT id FROM responses")}
            assert f"r{i}" in ids
        await store.close()

    run(go())


def test_sqlite_writes_are_bounded_and_wait_for_room(tmp_path: Path) -> None:
    """With its writer busy, at most `max_pending_writes` puts are queued; the next waits
    (backpressure) and goes on once one is written."""

    async def go() -> None:
        store = SQLiteResponseStore(tmp_path, clock=Clock(), max_pending_writes=3)
        gate = threading.Event()
        store._writer.submit(gate.wait)  # the writer's thread is busy
        puts = [asyncio.create_task(store.put(record(f"r{i}"))) for i in range(5)]
        await asyncio.sleep(0.2)
        assert store._writer._work_queue.qsize() == 3  # the blocker ran; 3 writes queued
        assert not any(put.done() for put in puts)
        gate.set()
        await asyncio.gather(*puts)
        assert all([await store.get(f"r{i}", None) for i in range(5)])
        await store.close()

    run(go())


def test_sqlite_a_failed_write_raises_store_error(tmp_path: Path) -> None:
    async def go() -> None:
        store = SQLiteResponseStore(tmp_path, clock=Clock())
        with sqlite3.connect(tmp_path / FILENAME) as db:  # a write the database refuses
            db.execute(
                "CREATE TRIGGER refuse BEFORE INSERT ON responses WHEN NEW.id = 'bad'"
                " BEGIN SELECT RAISE(ABORT, 'the disk says no'); END"
            )
        with pytest.raises(StoreError, match="the disk says no"):
            await store.put(record("bad"))
        await store.put(record("ok"))  # the store carries on
        assert await store.get("ok", None) is not None
        await store.close()

    run(go())


def test_sqlite_migrates_a_first_version_file_in_creation_order(tmp_path: Path) -> None:
    with sqlite3.connect(tmp_path / FILENAME) as db:
        db.executescript(
            """
            CREATE TABLE responses (id TEXT PRIMARY KEY, owner TEXT, previous_response_id TEXT,
                created_at REAL NOT NULL, size INTEGER NOT NULL, data BLOB NOT NULL);
            CREATE INDEX responses_created_at ON responses (created_at);
            CREATE TABLE meta (key TEXT PRIMARY KEY, value BLOB NOT NULL);
            PRAGMA user_version = 1;
            """
        )
        for rid, at in [("b", 2.0), ("a", 1.0), ("c", 3.0)]:
            data = record(rid, at=at).encode()
            db.execute(
                "INSERT INTO responses VALUES (?, NULL, NULL, ?, ?, ?)", (rid, at, len(data), data)
            )

    async def go() -> None:
        size = len(record("a").encode())
        store = SQLiteResponseStore(tmp_path, clock=Clock(), max_age_seconds=0, max_bytes=size * 3)
        await store.put(record("d"))  # over the limit: the oldest by creation goes
        assert await store.get("a", None) is None
        assert all([await store.get(rid, None) for rid in ("b", "c", "d")])
        await store.close()

    run(go())
    with sqlite3.connect(tmp_path / FILENAME) as db:
        assert db.execute("PRAGMA user_version").fetchone()[0] == 3


# --- conversations (`realtime.store.conversations`): every store, the same promises ---


def conversation(cid: str, owner: str | None = None, **metadata: str) -> StoredConversation:
    return StoredConversation(id=cid, owner=owner, created_at=1_000_000.5, metadata=metadata)


def item(iid: str, text: str = "x") -> dict[str, Any]:
    return {"id": iid, "type": "message", "role": "user", "content": [{"text": text}]}


def test_a_conversation_keeps_its_items_in_order_by_owner(make_store: StoreFactory) -> None:
    async def go() -> None:
        store = make_store()
        alice, bob = store.owner(b"alice"), store.owner(b"bob")
        made = conversation("c1", alice, topic="t")
        await store.create_conversation(made, [item("a"), item("b")])
        assert made.items == 2 and made.size > 0
        found = await store.get_conversation("c1", alice)
        assert found is not None and found.metadata == {"topic": "t"} and found.items == 2
        shown = {"id": "c1", "object": "conversation", "created_at": 1_000_000}
        assert found.as_object() == {**shown, "metadata": {"topic": "t"}}
        assert await store.get_conversation("c1", bob) is None
        assert await store.get_conversation("c1", None) is None
        grown = await store.append_items("c1", alice, [item("c"), item("d")])
        assert grown is not None and grown.items == 4
        assert await store.append_items("c1", bob, [item("e")]) is None
        context = await store.conversation_items("c1", alice, 10)
        assert context is not None and [i["id"] for i in context.items] == ["a", "b", "c", "d"]
        assert context.conversation.size == grown.size
        too_many = await store.conversation_items("c1", alice, 3)
        assert too_many is not None and too_many.truncated and too_many.items == []
        assert await store.conversation_items("c1", bob, 10) is None
        assert await store.get_item("c1", alice, "c") == item("c")
        assert await store.get_item("c1", bob, "c") is None
        assert await store.get_item("c1", alice, "zz") is None
        await store.close()

    run(go())


def test_conversation_items_are_paged_both_ways(make_store: StoreFactory) -> None:
    async def go() -> None:
        store = make_store()
        await store.create_conversation(conversation("c"), [item(f"i{n}") for n in range(5)])

        async def ids(after: str | None, limit: int, order: str) -> tuple[list[str], bool]:
            page = await store.list_items("c", None, after=after, limit=limit, order=order)
            assert page is not None and not page.after_missing
            return [i["id"] for i in page.items], page.has_more

        assert await ids(None, 2, "asc") == (["i0", "i1"], True)
        assert await ids("i1", 2, "asc") == (["i2", "i3"], True)
        assert await ids("i3", 2, "asc") == (["i4"], False)
        assert await ids(None, 3, "desc") == (["i4", "i3", "i2"], True)
        assert await ids("i2", 3, "desc") == (["i1", "i0"], False)
        assert await ids(None, 5, "asc") == ([f"i{n}" for n in range(5)], False)
        missing = await store.list_items("c", None, after="nope", limit=2, order="asc")
        assert missing is not None and missing.after_missing
        other = store.owner(b"k")
        assert await store.list_items("c", other, after=None, limit=2, order="asc") is None
        page = await store.list_items("c", None, after=None, limit=2, order="asc")
        assert page is not None and page.as_list()["first_id"] == "i0"
        await store.close()

    run(go())


def test_conversation_writes_update_delete_and_refuse_a_repeated_id(
    make_store: StoreFactory,
) -> None:
    async def go() -> None:
        store = make_store()
        await store.create_conversation(conversation("c", a="1"), [item("x")])
        updated = await store.update_conversation("c", None, {"b": "2"})
        assert updated is not None and updated.metadata == {"b": "2"}
        assert (await store.get_conversation("c", None)).metadata == {"b": "2"}  # type: ignore[union-attr]
        assert await store.update_conversation("c", store.owner(b"k"), {}) is None
        with pytest.raises(DuplicateItemError) as raised:
            await store.append_items("c", None, [item("y"), item("x")])
        assert raised.value.item_id == "x"
        after = await store.conversation_items("c", None, 10)
        assert after is not None and [i["id"] for i in after.items] == ["x"]  # all or none
        assert after.conversation.items == 1
        assert not await store.delete_item("c", None, "nope")
        assert not await store.delete_item("c", store.owner(b"k"), "x")
        assert await store.delete_item("c", None, "x")
        assert await store.get_item("c", None, "x") is None
        emptied = await store.get_conversation("c", None)
        assert emptied is not None and emptied.items == 0
        assert emptied.size == len(emptied.encode())  # the header is all that is left
        assert not await store.delete_conversation("c", store.owner(b"k"))
        assert await store.delete_conversation("c", None)
        assert await store.get_conversation("c", None) is None
        assert await store.list_items("c", None, after=None, limit=5, order="asc") is None
        assert not await store.delete_conversation("c", None)
        await store.close()

    run(go())


def test_a_conversation_expires_a_max_age_after_its_last_write(make_store: StoreFactory) -> None:
    clock = Clock()

    async def go() -> None:
        store = make_store(max_age_seconds=100, clock=clock)
        await store.create_conversation(conversation("used"), [item("a")])
        await store.create_conversation(conversation("idle"), [item("b")])
        clock.now += 60
        assert await store.append_items("used", None, [item("c")]) is not None
        clock.now += 60  # idle: 120 s since its last write; used: 60 s
        assert await store.get_conversation("idle", None) is None
        assert await store.conversation_items("idle", None, 10) is None
        assert await store.get_conversation("used", None) is not None
        clock.now += 50
        assert await store.get_conversation("used", None) is None
        await store.close()

    run(go())


def test_conversations_and_responses_share_the_byte_limit_oldest_first(
    make_store: StoreFactory,
) -> None:
    """The oldest write goes first, whole conversations included; a conversation written
    to is the newest again; the one just written is never dropped."""
    size = len(record("r0").encode())
    one = len(orjson.dumps(item("i0"))) + len(conversation("c").encode())

    async def go() -> None:
        store = make_store(max_bytes=size * 2 + one + one // 2)
        await store.put(record("r0"))
        await store.create_conversation(conversation("c"), [item("i0")])
        await store.put(record("r1"))
        await store.append_items("c", None, [item("i1", "y" * 10)])  # c is the newest write
        await store.put(record("r2"))  # over: r0 goes first, then r1
        assert await store.get("r0", None) is None
        assert await store.get_conversation("c", None) is not None
        await store.put(record("r3", text="z" * (size * 3)))  # alone over the limit
        assert await store.get("r3", None) is not None
        assert await store.get_conversation("c", None) is None
        assert await store.get_item("c", None, "i0") is None
        big = [item(f"b{n}", "w" * size * 2) for n in range(3)]
        await store.create_conversation(conversation("d"), big)  # the newest: kept, alone
        assert (await store.conversation_items("d", None, 10)).items == big  # type: ignore[union-attr]
        assert await store.get("r3", None) is None
        await store.close()

    run(go())


def test_sqlite_keeps_conversations_across_a_restart(tmp_path: Path) -> None:
    async def first() -> str | None:
        store = SQLiteResponseStore(tmp_path, clock=Clock())
        owner = store.owner(b"key")
        await store.create_conversation(conversation("c", owner, k="v"), [item("a")])
        await store.append_items("c", owner, [item("b")])
        await store.close()
        return owner

    owner = run(first())

    async def second() -> None:
        store = SQLiteResponseStore(tmp_path, clock=Clock())
        found = await store.conversation_items("c", owner, 10)
        assert found is not None and [i["id"] for i in found.items] == ["a", "b"]
        assert found.conversation.metadata == {"k": "v"}
        await store.close()

    run(second())


def test_sqlite_adds_the_conversation_tables_to_a_schema_2_file(tmp_path: Path) -> None:
    with sqlite3.connect(tmp_path / FILENAME) as db:
        db.executescript(
            """
            CREATE TABLE responses (seq INTEGER PRIMARY KEY, id TEXT NOT NULL UNIQUE,
                owner TEXT, previous_response_id TEXT, created_at REAL NOT NULL,
                size INTEGER NOT NULL, data BLOB NOT NULL);
            CREATE TABLE meta (key TEXT PRIMARY KEY, value BLOB NOT NULL);
            PRAGMA user_version = 2;
            """
        )
        data = record("old").encode()
        db.execute(
            "INSERT INTO responses VALUES (7, 'old', NULL, NULL, 1000000.0, ?, ?)",
            (len(data), data),
        )

    async def go() -> None:
        store = SQLiteResponseStore(tmp_path, clock=Clock(), max_age_seconds=0)
        assert await store.get("old", None) is not None
        await store.create_conversation(conversation("c"), [item("a")])
        assert await store.get_item("c", None, "a") == item("a")
        await store.close()

    run(go())
    with sqlite3.connect(tmp_path / FILENAME) as db:
        assert db.execute("PRAGMA user_version").fetchone()[0] == 3
        seq = db.execute("SELECT seq FROM conversations").fetchone()[0]
        assert seq > 7  # after the response: the sequence is shared


def test_unfinished_lists_a_runners_background_responses_until_they_end(
    make_store: StoreFactory,
) -> None:
    """`unfinished(runner)`: the records put with that runner (any owner, oldest first),
    each with its runner; one put again without a runner (it ended) leaves the list, and
    another runner's are never listed. A store reopened (a restart) still lists them."""

    async def go() -> None:
        store = make_store()
        alice = store.owner(b"alice")
        mine = [replace(record("a", owner=alice), runner="host-1"), record("b")]
        mine[1].runner = "host-1"
        await store.put(mine[0])
        await store.put(mine[1])
        await store.put(replace(record("c"), runner="host-2"))
        await store.put(record("d"))
        found = await store.unfinished("host-1")
        assert [(r.id, r.owner, r.runner) for r in found] == [
            ("a", alice, "host-1"),
            ("b", None, "host-1"),
        ]
        assert [r.id for r in await store.unfinished("host-2")] == ["c"]
        assert await store.unfinished("host-3") == []
        await store.put(record("a", owner=alice))  # it ended: put again without a runner
        assert [r.id for r in await store.unfinished("host-1")] == ["b"]
        assert await store.delete("c", None)  # a deleted record is not listed
        assert await store.unfinished("host-2") == []
        await store.close()
        reopened = make_store()
        assert [r.id for r in await reopened.unfinished("host-1")] == (
            [] if isinstance(reopened, MemoryResponseStore) else ["b"]
        )
        await reopened.close()

    run(go())


def test_unfinished_records_go_with_their_record_when_it_expires(
    make_store: StoreFactory,
) -> None:
    async def go() -> None:
        clock = Clock()
        store = make_store(max_age_seconds=100, clock=clock)
        await store.put(replace(record("old", at=clock.now), runner="host-1"))
        clock.now += 101
        await store.put(replace(record("new", at=clock.now), runner="host-1"))
        assert [r.id for r in await store.unfinished("host-1")] == ["new"]
        await store.close()

    run(go())
