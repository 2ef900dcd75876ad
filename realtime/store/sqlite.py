"""`store: true` responses in SQLite: embedded, durable, kept across restarts, off the loop.

One file, `responses.sqlite3`, under the configured directory (created with
mode 0700), in WAL mode. Two threads own a connection each, so the event loop
never waits for the disk and a read never waits behind a write:

* the writer: every `put` and `delete`, one transaction each, in order. `put`
  returns once its transaction is committed with `synchronous = FULL` (the WAL
  is synced to the disk at each commit), so a response the client was told is
  stored survives kill -9, and an operating-system crash or a power loss too.
  At most `max_pending_writes` writes are queued or running; a further `put`
  waits for room, which holds back the response that makes it (backpressure),
  instead of a queue that grows with load and with it what a crash would lose;
* the reader: `get` and `chain` (each record decoded there too).

Order is the table's `seq` (an integer key given at each insert), never a
timestamp. Retention (`base.py`): a record older than `max_age_seconds` is never
read and is deleted when the store opens and at most once a minute while
writing; after a write that takes the file's records past `max_bytes`, the
oldest records other than the newest are deleted until they fit. Freed pages go
back to the file system (incremental vacuum), so the file shrinks with the data.

Owner fingerprints use a random secret kept in the file itself, so they survive
a restart and mean nothing without the file.

Background responses not yet finished are listed in `background` (id, runner),
which every `put` keeps (a record put with a runner is added, one put without
is removed); the table is created when missing, so files of schema 2 gain it
when opened.

Files written by the first version (schema 1: no `seq`) are migrated when opened,
their records in the order of their `created_at`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import secrets
import sqlite3
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path
from typing import Any, TypeVar

import orjson

from realtime.store.base import (
    DEFAULT_MAX_AGE_SECONDS,
    DEFAULT_MAX_BYTES,
    MAX_PENDING_WRITES,
    Chain,
    StoredResponse,
    StoreError,
    fingerprint,
)

log = logging.getLogger("realtime.dialects.responses")

T = TypeVar("T")

FILENAME = "responses.sqlite3"
SCHEMA_VERSION = 2
#: Seconds between age checks while writing.
_AGE_CHECK_SECONDS = 60.0

_SCHEMA = """
CREATE TABLE IF NOT EXISTS responses (
    seq INTEGER PRIMARY KEY,
    id TEXT NOT NULL UNIQUE,
    owner TEXT,
    previous_response_id TEXT,
    created_at REAL NOT NULL,
    size INTEGER NOT NULL,
    data BLOB NOT NULL
);
CREATE INDEX IF NOT EXISTS responses_created_at ON responses (created_at);
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value BLOB NOT NULL);
CREATE TABLE IF NOT EXISTS background (id TEXT PRIMARY KEY, runner TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS background_runner ON background (runner);
"""

#: Schema 1 -> 2: the same rows, numbered in the order of their creation.
_MIGRATE_1 = f"""
DROP INDEX IF EXISTS responses_created_at;
ALTER TABLE responses RENAME TO responses_1;
{_SCHEMA}
INSERT INTO responses (id, owner, previous_response_id, created_at, size, data)
    SELECT id, owner, previous_response_id, created_at, size, data
    FROM responses_1 ORDER BY created_at, rowid;
DROP TABLE responses_1;
"""

_COLUMNS = "id, owner, previous_response_id, created_at, size, data"

#: A runner's unfinished background responses, oldest first.
_UNFINISHED = (
    "SELECT r.id, r.owner, r.previous_response_id, r.created_at, r.size, r.data"
    " FROM background b JOIN responses r ON r.id = b.id"
    " WHERE b.runner = ? AND r.created_at >= ? ORDER BY r.seq"
)

#: One response and its predecessors, newest first, in one statement.
_CHAIN = f"""
WITH RECURSIVE chain({_COLUMNS}, depth) AS (
    SELECT {_COLUMNS}, 0
    FROM responses WHERE id = ? AND owner IS ? AND created_at >= ?
    UNION ALL
    SELECT r.id, r.owner, r.previous_response_id, r.created_at, r.size, r.data,
           chain.depth + 1
    FROM responses r JOIN chain ON r.id = chain.previous_response_id
    WHERE r.owner IS ? AND r.created_at >= ? AND chain.depth + 1 < ?
)
SELECT {_COLUMNS} FROM chain ORDER BY depth
"""


class SQLiteResponseStore:
    def __init__(
        self,
        directory: str | os.PathLike[str],
        *,
        max_age_seconds: float = DEFAULT_MAX_AGE_SECONDS,
        max_bytes: int = DEFAULT_MAX_BYTES,
        clock: Any = time.time,
        max_pending_writes: int = MAX_PENDING_WRITES,
    ) -> None:
        """Open (or create) the store; raises ValueError saying why it cannot."""
        self.path = Path(directory) / FILENAME
        self.max_age_seconds = max_age_seconds
        self.max_bytes = max_bytes
        self._clock = clock
        self._room = asyncio.Semaphore(max_pending_writes)
        self._writes: set[asyncio.Future[int]] = set()
        self._writer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="response-store-w")
        self._reader = ThreadPoolExecutor(max_workers=1, thread_name_prefix="response-store-r")
        self._db: sqlite3.Connection | None = None  # the writer's
        self._read_db: sqlite3.Connection | None = None  # the reader's
        self._closed = False
        #: bytes of the file's records (kept by the writer)
        self.bytes = 0
        self._last_age_check = 0.0
        try:
            self._secret: bytes = self._writer.submit(self._open).result()
            self._reader.submit(self._open_reader).result()
        except (OSError, sqlite3.Error) as exc:
            self._writer.submit(self._close_writer).result()
            self._writer.shutdown(wait=False)
            self._reader.shutdown(wait=False)
            raise ValueError(f"cannot open the response store {str(self.path)!r}: {exc}") from None

    # --- the interface ---

    def owner(self, api_key: bytes | None) -> str | None:
        return fingerprint(self._secret, api_key)

    async def put(self, record: StoredResponse) -> None:
        """Committed (FULL) when this returns; waits for room while `max_pending_writes`
        writes are queued or running. Raises StoreError."""
        await self._room.acquire()
        try:
            if self._closed:
                raise StoreError("the response store is closed")
            write = asyncio.wrap_future(self._writer.submit(self._write, record))
        except BaseException:
            self._room.release()
            raise
        # Room comes back when the write ends, not when this caller stops waiting (a
        # cancelled caller leaves a write that still runs).
        self._writes.add(write)
        write.add_done_callback(self._write_done)
        try:
            record.size = await asyncio.shield(write)
        except (OSError, sqlite3.Error) as exc:
            log.error("could not store response %s: %s", record.id, exc)
            raise StoreError(f"the response could not be stored: {exc}") from None

    async def get(self, response_id: str, owner: str | None) -> StoredResponse | None:
        return await self._read(self._get, response_id, owner)

    async def chain(self, response_id: str, owner: str | None, limit: int) -> Chain:
        return await self._read(self._chain, response_id, owner, limit)

    async def unfinished(self, runner: str) -> list[StoredResponse]:
        return await self._read(self._unfinished, runner)

    async def delete(self, response_id: str, owner: str | None) -> bool:
        if self._closed:
            raise StoreError("the response store is closed")
        try:
            deleted: bool = await asyncio.wrap_future(
                self._writer.submit(self._delete, response_id, owner)
            )
        except (OSError, sqlite3.Error) as exc:
            raise StoreError(f"the response could not be deleted: {exc}") from None
        return deleted

    async def flush(self) -> None:
        """Wait until every write started so far has ended."""
        if self._writes:
            await asyncio.gather(*self._writes, return_exceptions=True)

    async def close(self) -> None:
        self._closed = True
        await self.flush()
        await asyncio.wrap_future(self._writer.submit(self._close_writer))
        await asyncio.wrap_future(self._reader.submit(self._close_reader))
        self._writer.shutdown(wait=True)
        self._reader.shutdown(wait=True)

    # --- on the event loop ---

    def _write_done(self, write: asyncio.Future[int]) -> None:
        self._writes.discard(write)
        self._room.release()
        if not write.cancelled():
            write.exception()  # retrieved: the caller, if still there, reported it

    async def _read(self, function: Callable[..., T], *args: Any) -> T:
        if self._closed:
            raise StoreError("the response store is closed")
        try:
            return await asyncio.wrap_future(self._reader.submit(function, *args))
        except (OSError, sqlite3.Error) as exc:
            raise StoreError(f"the response store could not be read: {exc}") from None

    # --- on the writer's thread ---

    def _open(self) -> bytes:
        self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        db = sqlite3.connect(self.path, isolation_level=None)
        self._db = db
        db.execute("PRAGMA auto_vacuum = INCREMENTAL")  # before the first table exists
        db.execute("PRAGMA journal_mode = WAL")
        db.execute("PRAGMA synchronous = FULL")
        version = db.execute("PRAGMA user_version").fetchone()[0]
        if version > SCHEMA_VERSION:
            raise sqlite3.DatabaseError(
                f"it was written by a newer version of realtime (schema {version})"
            )
        if version == 1:
            with _transaction(db):
                for statement in _MIGRATE_1.split(";"):
                    if statement.strip():
                        db.execute(statement)
                db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
        else:
            db.executescript(_SCHEMA)
            db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
        secret = db.execute("SELECT value FROM meta WHERE key = 'owner_secret'").fetchone()
        if secret is None:
            secret = (secrets.token_bytes(32),)
            db.execute("INSERT INTO meta (key, value) VALUES ('owner_secret', ?)", secret)
        self.bytes = db.execute("SELECT COALESCE(SUM(size), 0) FROM responses").fetchone()[0]
        self._prune(newest=None)
        return bytes(secret[0])

    def _write(self, record: StoredResponse) -> int:
        assert self._db is not None
        data = record.encode()
        db = self._db
        with _transaction(db):
            old = db.execute("SELECT size FROM responses WHERE id = ?", (record.id,)).fetchone()
            if old is not None:  # put again: the newest, with a new sequence number
                db.execute("DELETE FROM responses WHERE id = ?", (record.id,))
            seq = db.execute(
                "INSERT INTO responses (id, owner, previous_response_id, created_at, size, data)"
                " VALUES (?, ?, ?, ?, ?, ?)",
                (
                    record.id,
                    record.owner,
                    record.previous_response_id,
                    record.created_at,
                    len(data),
                    data,
                ),
            ).lastrowid
            db.execute("DELETE FROM background WHERE id = ?", (record.id,))
            if record.runner is not None:
                db.execute(
                    "INSERT INTO background (id, runner) VALUES (?, ?)", (record.id, record.runner)
                )
        self.bytes += len(data) - (old[0] if old else 0)
        now = self._clock()
        if (self.max_bytes and self.bytes > self.max_bytes) or (
            now - self._last_age_check > _AGE_CHECK_SECONDS
        ):
            self._prune(newest=seq)
        return len(data)

    def _delete(self, response_id: str, owner: str | None) -> bool:
        assert self._db is not None
        with _transaction(self._db):
            row = self._db.execute(
                "SELECT size FROM responses WHERE id = ? AND owner IS ? AND created_at >= ?",
                (response_id, owner, self._oldest_kept()),
            ).fetchone()
            if row is None:
                return False
            self._db.execute("DELETE FROM responses WHERE id = ?", (response_id,))
            self._db.execute("DELETE FROM background WHERE id = ?", (response_id,))
        self.bytes -= row[0]
        return True

    def _prune(self, newest: int | None) -> None:
        """Delete expired records, then the oldest (by `seq`, never `newest`) while over
        the byte limit."""
        assert self._db is not None
        db = self._db
        self._last_age_check = self._clock()
        deleted = 0
        with _transaction(db):
            if self.max_age_seconds:
                deleted += db.execute(
                    "DELETE FROM responses WHERE created_at < ?", (self._oldest_kept(),)
                ).rowcount
            if deleted:
                self.bytes = db.execute("SELECT COALESCE(SUM(size), 0) FROM responses").fetchone()[
                    0
                ]
            if self.max_bytes and self.bytes > self.max_bytes:
                # Walk from the oldest, summing sizes, up to what must go.
                excess = self.bytes - self.max_bytes
                cutoff, freed = None, 0
                for seq, size in db.execute(
                    "SELECT seq, size FROM responses WHERE seq != ? ORDER BY seq",
                    (newest if newest is not None else -1,),
                ):
                    freed += size
                    cutoff = seq
                    if freed >= excess:
                        break
                if cutoff is not None:
                    deleted += db.execute(
                        "DELETE FROM responses WHERE seq <= ? AND seq != ?",
                        (cutoff, newest if newest is not None else -1),
                    ).rowcount
                    self.bytes -= freed
            if deleted:
                db.execute("DELETE FROM background WHERE id NOT IN (SELECT id FROM responses)")
        if deleted:
            db.execute("PRAGMA incremental_vacuum")
            log.info("response store: %d expired or over-limit responses deleted", deleted)

    def _close_writer(self) -> None:
        if self._db is not None:
            self._db.close()
            self._db = None

    # --- on the reader's thread ---

    def _open_reader(self) -> None:
        self._read_db = sqlite3.connect(self.path, isolation_level=None)

    def _get(self, response_id: str, owner: str | None) -> StoredResponse | None:
        assert self._read_db is not None
        row = self._read_db.execute(
            f"SELECT {_COLUMNS} FROM responses WHERE id = ? AND owner IS ? AND created_at >= ?",
            (response_id, owner, self._oldest_kept()),
        ).fetchone()
        return _record(row) if row is not None else None

    def _chain(self, response_id: str, owner: str | None, limit: int) -> Chain:
        assert self._read_db is not None
        oldest = self._oldest_kept()
        rows = self._read_db.execute(
            _CHAIN, (response_id, owner, oldest, owner, oldest, limit + 1)
        ).fetchall()
        records = [_record(row) for row in rows]
        chain = Chain(records[:limit])
        if len(records) > limit:
            chain.truncated = True
        elif not records:
            chain.missing = response_id
        else:
            chain.missing = records[-1].previous_response_id  # None: the chain is whole
        return chain

    def _unfinished(self, runner: str) -> list[StoredResponse]:
        assert self._read_db is not None
        rows = self._read_db.execute(_UNFINISHED, (runner, self._oldest_kept())).fetchall()
        return [replace(_record(row), runner=runner) for row in rows]

    def _close_reader(self) -> None:
        if self._read_db is not None:
            self._read_db.close()
            self._read_db = None

    # --- either ---

    def _oldest_kept(self) -> float:
        return self._clock() - self.max_age_seconds if self.max_age_seconds else float("-inf")


@contextlib.contextmanager
def _transaction(db: sqlite3.Connection) -> Iterator[None]:
    """One transaction (the connection is in autocommit mode: nothing begins one by itself)."""
    db.execute("BEGIN IMMEDIATE")
    try:
        yield
    except BaseException:
        db.execute("ROLLBACK")
        raise
    db.execute("COMMIT")


def _record(row: tuple[Any, ...]) -> StoredResponse:
    data = orjson.loads(row[5])
    return StoredResponse(
        id=row[0],
        owner=row[1],
        previous_response_id=row[2],
        created_at=row[3],
        size=row[4],
        response=data["response"],
        input_items=data["input_items"],
    )
