"""The response stores: memory and SQLite, one contract, and what only SQLite does."""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from realtime.store import MemoryResponseStore, ResponseStore, StoredResponse
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


@pytest.fixture(params=["memory", "sqlite"])
def make_store(request: pytest.FixtureRequest, tmp_path: Path) -> StoreFactory:
    def factory(**options: Any) -> ResponseStore:
        options.setdefault("clock", Clock())
        if request.param == "memory":
            return MemoryResponseStore(**options)
        return SQLiteResponseStore(tmp_path / "store", **options)

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


def test_a_chain_reads_pending_records_over_written_ones(make_store: StoreFactory) -> None:
    """A record is in the chain as soon as `put` returns, still being written or written
    (for SQLite: from memory, then from the file)."""

    async def go() -> None:
        store = make_store()
        assert isinstance(store, (MemoryResponseStore, SQLiteResponseStore))
        await store.put(record("a"))
        await store.put(record("b", "a"))
        assert [r.id for r in (await store.chain("b", None, 10)).records] == ["b", "a"]
        if isinstance(store, SQLiteResponseStore):
            await store.flush()  # a and b written: read back from the file
        await store.put(record("c", "b"))  # pending, over written ones
        chain = await store.chain("c", None, 10)
        assert [r.id for r in chain.records] == ["c", "b", "a"] and chain.missing is None
        truncated = await store.chain("c", None, 2)
        assert truncated.truncated and len(truncated.records) == 2
        assert (await store.chain("c", store.owner(b"k"), 10)).missing == "c"
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
        await store.flush()  # type: ignore[attr-defined]
        kept = [i for i in range(6) if await store.get(f"r{i}", None) is not None]
        assert kept == [3, 4, 5]
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


def test_sqlite_serves_a_record_before_its_write_is_done(tmp_path: Path) -> None:
    async def go() -> None:
        store = SQLiteResponseStore(tmp_path, clock=Clock())
        gate = asyncio.Event()
        # hold the store's thread, so the write below waits behind it
        blocker = asyncio.get_running_loop().run_in_executor(
            store._executor, lambda: asyncio.run_coroutine_threadsafe(gate.wait(), loop).result()
        )
        await store.put(record("r1"))
        await store.put(record("r2", "r1"))
        assert store._pending  # nothing is written yet
        assert await store.get("r1", None) is not None
        chain = await store.chain("r2", None, 5)
        assert [r.id for r in chain.records] == ["r2", "r1"]
        gate.set()
        await blocker
        await store.close()

    loop = asyncio.new_event_loop()
    try:
        loop.run_until_complete(go())
    finally:
        loop.close()
    store = SQLiteResponseStore(tmp_path, clock=Clock())
    assert run(store.get("r2", None)) is not None
    run(store.close())


def test_an_unusable_directory_or_a_newer_file_is_refused(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    with pytest.raises(ValueError, match="cannot open the response store"):
        SQLiteResponseStore(blocker / "store")
    with sqlite3.connect(tmp_path / FILENAME) as db:
        db.execute("PRAGMA user_version = 99")
    with pytest.raises(ValueError, match="newer version"):
        SQLiteResponseStore(tmp_path)
