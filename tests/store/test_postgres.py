"""What only the PostgreSQL store does (the shared suite in test_store.py runs against it too):
one database for several replicas, versioned migrations, a lost or frozen database
answered with StoreError within the timeout (never a hang), reconnecting, and a URL's
password kept out of every message.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
import signal
import time
from collections.abc import Iterator
from typing import Any

import pytest

from realtime.store.base import StoredResponse, StoreError
from realtime.store.dsn import redact
from realtime.store.postgres import PostgresResponseStore
from realtime.store.postgres_schema import SCHEMA_VERSION
from realtime.testing.postgres import ThrowawayPostgres, free_port
from tests.postgres_fixtures import create_database


def record(rid: str, previous: str | None = None, owner: str | None = None) -> StoredResponse:
    return StoredResponse(
        id=rid,
        owner=owner,
        created_at=time.time(),
        previous_response_id=previous,
        response={"id": rid, "object": "response", "output": []},
        input_items=[],
    )


async def _query(url: str, statement: str) -> Any:
    import asyncpg

    db = await asyncpg.connect(url)
    try:
        return await db.fetch(statement)
    finally:
        await db.close()


def test_two_replicas_share_records_owners_and_the_byte_limit(postgres_url: str) -> None:
    """Two stores on one database (two replicas): what one puts the other reads at once,
    keys fingerprint alike, and the byte limit counts both replicas' records."""
    size = len(record("a0").encode())

    async def go() -> None:
        a = PostgresResponseStore(postgres_url, max_bytes=size * 3)
        b = PostgresResponseStore(postgres_url, max_bytes=size * 3)
        assert a.owner(b"key") == b.owner(b"key") != a.owner(b"other")
        owner = a.owner(b"key")
        await a.put(record("a0", owner=owner))
        await b.put(record("b1", "a0", owner=owner))
        chain = await a.chain("b1", owner, 10)
        assert [r.id for r in chain.records] == ["b1", "a0"] and chain.missing is None
        await a.put(record("a2", owner=owner))
        await b.put(record("b3", owner=owner))  # four records, room for three
        found = [rid for rid in ("a0", "b1", "a2", "b3") if await b.get(rid, owner)]
        assert found == ["b1", "a2", "b3"]
        (usage,) = await _query(postgres_url, "SELECT bytes FROM realtime_usage")
        assert usage[0] == 3 * size
        await a.close()
        await b.close()

    asyncio.run(go())


def test_migrations_run_once_and_a_newer_schema_is_refused(postgres_url: str) -> None:
    PostgresResponseStore(postgres_url)
    PostgresResponseStore(postgres_url)  # opening again migrates nothing
    rows = asyncio.run(_query(postgres_url, "SELECT version FROM realtime_schema"))
    assert [row[0] for row in rows] == [SCHEMA_VERSION]
    asyncio.run(_query(postgres_url, "UPDATE realtime_schema SET version = 99"))
    with pytest.raises(ValueError, match=r"newer version of realtime \(schema 99\)"):
        PostgresResponseStore(postgres_url)


def test_a_schema_1_database_gets_the_conversation_tables(postgres_url: str) -> None:
    """Migrations 2 and 3 on a database a release without conversations wrote: its
    response stays, conversations work, and their sequence follows the responses' (one
    sequence); so do background runners (3)."""
    from realtime.store import postgres_schema as sql
    from realtime.store.conversations import StoredConversation

    kept = record("r")
    data = kept.encode()

    async def schema_1() -> None:
        import asyncpg

        db = await asyncpg.connect(postgres_url)
        try:
            await db.execute(sql.CREATE_VERSION_TABLE)
            await db.execute(sql.MIGRATIONS[0])
            await db.execute("INSERT INTO realtime_schema (version) VALUES (1)")
            await db.execute(sql.INSERT, "r", None, None, kept.created_at, len(data), data)
            await db.execute(sql.SET_USAGE, len(data))
        finally:
            await db.close()

    async def go() -> None:
        store = PostgresResponseStore(postgres_url)  # this release: migrates to 3
        found = await store.get("r", None)
        assert found is not None and found.response == kept.response
        await store.put(dataclasses.replace(record("bg"), runner="replica-a"))
        assert [r.id for r in await store.unfinished("replica-a")] == ["bg"]
        item = {"id": "i", "type": "message", "role": "user", "content": []}
        await store.create_conversation(StoredConversation("c", None, time.time()), [item])
        assert await store.get_item("c", None, "i") == item
        await store.close()

    asyncio.run(schema_1())
    asyncio.run(go())
    rows = asyncio.run(_query(postgres_url, "SELECT version FROM realtime_schema"))
    assert [row[0] for row in rows] == [SCHEMA_VERSION] == [3]
    ((later,),) = asyncio.run(
        _query(
            postgres_url,
            "SELECT (SELECT max(seq) FROM realtime_conversations)"
            " > (SELECT max(seq) FROM realtime_responses)",
        )
    )
    assert later is True


def test_replicas_opening_at_once_migrate_once(postgres_cluster: ThrowawayPostgres) -> None:
    url = create_database(postgres_cluster, f"test_{os.getpid()}_together")

    async def open_several() -> list[PostgresResponseStore]:
        return await asyncio.gather(
            *(asyncio.to_thread(PostgresResponseStore, url) for _ in range(4))
        )

    stores = asyncio.run(open_several())
    assert len({store.owner(b"k") for store in stores}) == 1  # one secret
    rows = asyncio.run(_query(url, "SELECT version FROM realtime_schema"))
    assert [row[0] for row in rows] == [SCHEMA_VERSION]


def test_an_unreachable_database_is_refused_at_start_without_its_password() -> None:
    url = f"postgresql://app:s3cret-pw@127.0.0.1:{free_port()}/realtime"
    started = time.monotonic()
    with pytest.raises(ValueError) as refused:
        PostgresResponseStore(url, timeout=2)
    assert time.monotonic() - started < 30
    message = str(refused.value)
    assert message.startswith("cannot open the response store postgresql://app:***@127.0.0.1:"), (
        message
    )
    assert "s3cret" not in message


def test_a_wrong_password_is_refused_without_echoing_it(postgres_url: str) -> None:
    """trust authentication takes any password, so this checks the message of a database
    that does not exist, reached with a password."""
    url = postgres_url.replace("realtime@", "realtime:hunter22@").rsplit("/", 1)[0] + "/nope"
    with pytest.raises(ValueError) as refused:
        PostgresResponseStore(url, timeout=5)
    assert "hunter22" not in str(refused.value)
    assert 'database "nope" does not exist' in str(refused.value)


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("postgresql://u:pw@h:5/db", "postgresql://u:***@h:5/db"),
        ("postgresql://u@h/db?password=pw&sslmode=require", "postgresql://u@h/db?password=***&sslmode=require"),
        ("postgres://h/db", "postgres://h/db"),
        ("postgresql://u:p%40ss@[::1]:5432/db", "postgresql://u:***@[::1]:5432/db"),
    ],
)  # fmt: skip
def test_a_url_is_shown_without_its_password(url: str, shown: str) -> None:
    assert redact(url) == shown


@pytest.fixture
def own_cluster() -> Iterator[ThrowawayPostgres]:
    """A cluster this test may stop, freeze and restart."""
    with ThrowawayPostgres() as cluster:
        yield cluster


def test_a_lost_database_gives_store_errors_in_time_and_the_store_reconnects(
    own_cluster: ThrowawayPostgres, caplog: pytest.LogCaptureFixture
) -> None:
    url = own_cluster.dsn.replace("realtime@", "realtime:pw-in-url@")

    async def go() -> None:
        store = PostgresResponseStore(url, timeout=2)
        await store.put(record("before"))
        # down: refused connections, each operation fails fast
        own_cluster.kill()
        for operation in (store.put(record("during")), store.get("before", None)):
            started = time.monotonic()
            with pytest.raises(StoreError):
                await operation
            assert time.monotonic() - started < 10
        # frozen: the server accepts nothing and answers nothing; the timeout ends it
        own_cluster.restart()
        assert own_cluster.process is not None
        os.killpg(own_cluster.process.pid, signal.SIGSTOP)
        try:
            started = time.monotonic()
            with pytest.raises(StoreError, match="did not answer within 2 s"):
                await store.get("before", None)
            assert time.monotonic() - started < 10
        finally:
            os.killpg(own_cluster.process.pid, signal.SIGCONT)
        # back: the same store reconnects, and what was committed is there
        found = await store.get("before", None)
        assert found is not None
        await store.put(record("after", "before"))
        chain = await store.chain("after", None, 10)
        assert [r.id for r in chain.records] == ["after", "before"]
        await store.close()

    with caplog.at_level(logging.INFO):
        asyncio.run(go())
    assert "pw-in-url" not in caplog.text
    assert "could not" in caplog.text
