"""`store: true` responses in SQLite: embedded, kept across restarts, off the event loop.

One file, `responses.sqlite3`, under the configured directory (created with
mode 0700). Every statement runs on one worker thread that owns the connection,
so the event loop never waits for the disk: `put` hands the record to that
thread and returns at once, and until the write is done the record is served
from memory (`_pending`), so a client that continues a response the moment it
ends finds it. `close()` waits for queued writes.

Retention: records older than `max_age_seconds` and, while the file's records
exceed `max_bytes`, the oldest records are deleted; checked when the store
opens, when a write passes the byte limit, and at most once a minute for age.
Freed pages go back to the file system (incremental vacuum), so the file
shrinks with the data.

Owner fingerprints use a random secret kept in the file itself, so they survive
a restart and mean nothing without the file.
"""

from __future__ import annotations

import asyncio
import logging
import os
import secrets
import sqlite3
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import orjson

from realtime.store.base import (
    DEFAULT_MAX_AGE_SECONDS,
    DEFAULT_MAX_BYTES,
    Chain,
    StoredResponse,
    fingerprint,
    walk_chain,
)

log = logging.getLogger("realtime.dialects.responses")

FILENAME = "responses.sqlite3"
SCHEMA_VERSION = 1
#: Seconds between age checks while writing.
_AGE_CHECK_SECONDS = 60.0

_SCHEMA = """
CREATE TABLE IF NOT EXISTS responses (
    id TEXT PRIMARY KEY,
    owner TEXT,
    previous_response_id TEXT,
    created_at REAL NOT NULL,
    size INTEGER NOT NULL,
    data BLOB NOT NULL
);
CREATE INDEX IF NOT EXISTS responses_created_at ON responses (created_at);
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value BLOB NOT NULL);
"""

#: One response and its predecessors, newest first, in one statement.
_CHAIN = """
WITH RECURSIVE chain(id, owner, previous_response_id, created_at, data, depth) AS (
    SELECT id, owner, previous_response_id, created_at, data, 0
    FROM responses WHERE id = ? AND owner IS ? AND created_at >= ?
    UNION ALL
    SELECT r.id, r.owner, r.previous_response_id, r.created_at, r.data, chain.depth + 1
    FROM responses r JOIN chain ON r.id = chain.previous_response_id
    WHERE r.owner IS ? AND r.created_at >= ? AND chain.depth + 1 < ?
)
SELECT id, owner, previous_response_id, created_at, data FROM chain ORDER BY depth
"""


class SQLiteResponseStore:
    def __init__(
        self,
        directory: str | os.PathLike[str],
        *,
        max_age_seconds: float = DEFAULT_MAX_AGE_SECONDS,
        max_bytes: int = DEFAULT_MAX_BYTES,
        clock: Any = time.time,
    ) -> None:
        """Open (or create) the store; raises ValueError saying why it cannot."""
        self.path = Path(directory) / FILENAME
        self.max_age_seconds = max_age_seconds
        self.max_bytes = max_bytes
        self._clock = clock
        self._pending: dict[str, StoredResponse] = {}
        self._writes: set[asyncio.Future[None]] = set()
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="response-store")
        self._db: sqlite3.Connection | None = None
        self.bytes = 0
        self._last_age_check = 0.0
        try:
            self._secret: bytes = self._executor.submit(self._open).result()
        except (OSError, sqlite3.Error) as exc:
            self._executor.shutdown(wait=False)
            raise ValueError(f"cannot open the response store {str(self.path)!r}: {exc}") from None

    # --- the interface ---

    def owner(self, api_key: bytes | None) -> str | None:
        return fingerprint(self._secret, api_key)

    async def put(self, record: StoredResponse) -> None:
        """Hand the record to the store's thread; served from memory until written."""
        self._pending[record.id] = record
        future = asyncio.wrap_future(self._executor.submit(self._write, record))
        self._writes.add(future)
        future.add_done_callback(lambda done: self._written(record, done))

    async def get(self, response_id: str, owner: str | None) -> StoredResponse | None:
        if response_id in self._pending:
            return self._pending_for(response_id, owner)
        found: StoredResponse | None = await self._run(self._get, response_id, owner)
        return found

    async def chain(self, response_id: str, owner: str | None, limit: int) -> Chain:
        # Records still being written are served from memory; a record's predecessors
        # were put before it, so once the walk reaches a written one the rest are too.
        chain = walk_chain(lambda rid: self._pending_for(rid, owner), response_id, limit)
        if chain.missing is None:
            return chain
        rest: Chain = await self._run(self._chain, chain.missing, owner, limit - len(chain.records))
        chain.records += rest.records
        chain.missing, chain.truncated = rest.missing, rest.truncated
        return chain

    async def delete(self, response_id: str, owner: str | None) -> bool:
        pending = self._pending.get(response_id)
        if pending is not None and pending.owner != owner:
            return False
        if pending is not None:
            # The queued write runs first (one thread, in order); the delete follows it.
            self._pending.pop(response_id, None)
        deleted: bool = await self._run(self._delete, response_id, owner)
        return deleted or pending is not None

    async def flush(self) -> None:
        """Wait until every record put so far is written (or failed)."""
        if self._writes:
            await asyncio.gather(*self._writes, return_exceptions=True)

    async def close(self) -> None:
        await self.flush()
        await self._run(self._close)
        self._executor.shutdown(wait=True)

    # --- on the event loop ---

    def _pending_for(self, response_id: str, owner: str | None) -> StoredResponse | None:
        record = self._pending.get(response_id)
        if record is None or record.owner != owner or record.created_at < self._oldest_kept():
            return None
        return record

    def _written(self, record: StoredResponse, done: asyncio.Future[None]) -> None:
        self._writes.discard(done)
        if self._pending.get(record.id) is record:
            del self._pending[record.id]
        if not done.cancelled() and done.exception() is not None:
            log.error(
                "could not store response %s: %s (it cannot be retrieved or continued)",
                record.id,
                done.exception(),
            )

    async def _run(self, function: Any, *args: Any) -> Any:
        return await asyncio.get_running_loop().run_in_executor(self._executor, function, *args)

    # --- on the store's thread ---

    def _open(self) -> bytes:
        self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        db = sqlite3.connect(self.path, isolation_level=None)
        self._db = db
        db.execute("PRAGMA auto_vacuum = INCREMENTAL")  # before the first table exists
        db.execute("PRAGMA journal_mode = WAL")
        db.execute("PRAGMA synchronous = NORMAL")
        version = db.execute("PRAGMA user_version").fetchone()[0]
        if version > SCHEMA_VERSION:
            raise sqlite3.DatabaseError(
                f"it was written by a newer version of realtime (schema {version})"
            )
        db.executescript(_SCHEMA)
        db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
        secret = db.execute("SELECT value FROM meta WHERE key = 'owner_secret'").fetchone()
        if secret is None:
            secret = (secrets.token_bytes(32),)
            db.execute("INSERT INTO meta (key, value) VALUES ('owner_secret', ?)", secret)
        self.bytes = db.execute("SELECT COALESCE(SUM(size), 0) FROM responses").fetchone()[0]
        self._prune()
        return bytes(secret[0])

    def _write(self, record: StoredResponse) -> None:
        assert self._db is not None
        data = record.encode()
        with self._db:
            old = self._db.execute(
                "SELECT size FROM responses WHERE id = ?", (record.id,)
            ).fetchone()
            self._db.execute(
                "INSERT OR REPLACE INTO responses"
                " (id, owner, previous_response_id, created_at, size, data)"
                " VALUES (?, ?, ?, ?, ?, ?)",
                (
                    record.id,
                    record.owner,
                    record.previous_response_id,
                    record.created_at,
                    len(data),
                    data,
                ),
            )
        self.bytes += len(data) - (old[0] if old else 0)
        now = self._clock()
        if (self.max_bytes and self.bytes > self.max_bytes) or (
            now - self._last_age_check > _AGE_CHECK_SECONDS
        ):
            self._prune()

    def _get(self, response_id: str, owner: str | None) -> StoredResponse | None:
        assert self._db is not None
        row = self._db.execute(
            "SELECT id, owner, previous_response_id, created_at, data FROM responses"
            " WHERE id = ? AND owner IS ? AND created_at >= ?",
            (response_id, owner, self._oldest_kept()),
        ).fetchone()
        return _record(row) if row is not None else None

    def _chain(self, response_id: str, owner: str | None, limit: int) -> Chain:
        assert self._db is not None
        return _read_chain(self._db, response_id, owner, limit, self._oldest_kept())

    def _delete(self, response_id: str, owner: str | None) -> bool:
        assert self._db is not None
        with self._db:
            row = self._db.execute(
                "SELECT size FROM responses WHERE id = ? AND owner IS ?", (response_id, owner)
            ).fetchone()
            if row is None:
                return False
            self._db.execute("DELETE FROM responses WHERE id = ?", (response_id,))
        self.bytes -= row[0]
        return True

    def _prune(self) -> None:
        """Delete expired records, then the oldest while over the byte limit."""
        assert self._db is not None
        db = self._db
        self._last_age_check = self._clock()
        deleted = 0
        with db:
            if self.max_age_seconds:
                deleted += db.execute(
                    "DELETE FROM responses WHERE created_at < ?", (self._oldest_kept(),)
                ).rowcount
            if self.max_bytes and self.bytes > self.max_bytes:
                # Walk from the oldest, summing sizes, up to what must go.
                excess = self.bytes - self.max_bytes
                cutoff, freed = None, 0
                for created_at, size in db.execute(
                    "SELECT created_at, size FROM responses ORDER BY created_at"
                ):
                    freed += size
                    cutoff = created_at
                    if freed >= excess:
                        break
                if cutoff is not None:
                    deleted += db.execute(
                        "DELETE FROM responses WHERE created_at <= ?", (cutoff,)
                    ).rowcount
        if deleted:
            self.bytes = db.execute("SELECT COALESCE(SUM(size), 0) FROM responses").fetchone()[0]
            db.execute("PRAGMA incremental_vacuum")
            log.info("response store: %d expired or over-limit responses deleted", deleted)

    def _oldest_kept(self) -> float:
        return self._clock() - self.max_age_seconds if self.max_age_seconds else float("-inf")

    def _close(self) -> None:
        if self._db is not None:
            self._db.close()
            self._db = None


def _read_chain(
    db: sqlite3.Connection, response_id: str, owner: str | None, limit: int, oldest: float
) -> Chain:
    rows = db.execute(_CHAIN, (response_id, owner, oldest, owner, oldest, limit + 1)).fetchall()
    records = [_record(row) for row in rows]
    chain = Chain(records[:limit])
    if len(records) > limit:
        chain.truncated = True
    elif not records:
        chain.missing = response_id
    else:
        chain.missing = records[-1].previous_response_id  # None: the chain is whole
    return chain


def _record(row: tuple[Any, ...]) -> StoredResponse:
    data = orjson.loads(row[4])
    return StoredResponse(
        id=row[0],
        owner=row[1],
        created_at=row[3],
        previous_response_id=row[2],
        response=data["response"],
        input_items=data["input_items"],
    )
