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
their records in the order of their `created_at`; schema 2 files get the
conversation tables (schema 3) when opened.

Conversations (`conversations.py`): a row per conversation (its header, its total
size and its place in the sequence) and a row per item. The sequence is shared:
every write (a response put, any write to a conversation) takes one more than
the largest `seq` of both tables, inside its transaction, so the byte limit drops
responses and whole conversations oldest first.
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
from realtime.store.conversations import (
    ConversationItems,
    DuplicateItemError,
    ItemPage,
    StoredConversation,
    encode_item,
)

log = logging.getLogger("realtime.dialects.responses")

T = TypeVar("T")

FILENAME = "responses.sqlite3"
SCHEMA_VERSION = 3
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
CREATE TABLE IF NOT EXISTS conversations (
    id TEXT PRIMARY KEY,
    seq INTEGER NOT NULL UNIQUE,
    owner TEXT,
    created_at REAL NOT NULL,
    updated_at REAL NOT NULL,
    size INTEGER NOT NULL,
    items INTEGER NOT NULL,
    metadata BLOB NOT NULL
);
CREATE INDEX IF NOT EXISTS conversations_updated_at ON conversations (updated_at);
CREATE TABLE IF NOT EXISTS conversation_items (
    seq INTEGER PRIMARY KEY,
    conversation_id TEXT NOT NULL,
    id TEXT NOT NULL,
    size INTEGER NOT NULL,
    data BLOB NOT NULL,
    UNIQUE (conversation_id, id)
);
CREATE INDEX IF NOT EXISTS conversation_items_order ON conversation_items (conversation_id, seq);
"""

#: The next number of the sequence both tables share.
_NEXT_SEQ = """
SELECT COALESCE(MAX(m), 0) + 1 FROM (
    SELECT MAX(seq) AS m FROM responses UNION ALL SELECT MAX(seq) FROM conversations
)
"""
_CONVERSATION_COLUMNS = "id, owner, created_at, updated_at, size, items, metadata"

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
        #: the sequence number of the conversation a write just wrote (writer's thread)
        self._written_seq: int | None = None
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
        self.bytes = self._total_bytes()
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
                "INSERT INTO responses"
                " (seq, id, owner, previous_response_id, created_at, size, data)"
                " VALUES (?, ?, ?, ?, ?, ?, ?)",
                (
                    db.execute(_NEXT_SEQ).fetchone()[0],
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
                oldest = self._oldest_kept()
                deleted += db.execute(
                    "DELETE FROM responses WHERE created_at < ?", (oldest,)
                ).rowcount
                db.execute(
                    "DELETE FROM conversation_items WHERE conversation_id IN"
                    " (SELECT id FROM conversations WHERE updated_at < ?)",
                    (oldest,),
                )
                deleted += db.execute(
                    "DELETE FROM conversations WHERE updated_at < ?", (oldest,)
                ).rowcount
            if deleted:
                self.bytes = self._total_bytes()
            if self.max_bytes and self.bytes > self.max_bytes:
                # Walk from the oldest (responses and conversations), summing sizes, up
                # to what must go.
                excess = self.bytes - self.max_bytes
                keep = newest if newest is not None else -1
                cutoff, freed = None, 0
                for seq, size in db.execute(
                    "SELECT seq, size FROM responses WHERE seq != ? UNION ALL"
                    " SELECT seq, size FROM conversations WHERE seq != ? ORDER BY 1",
                    (keep, keep),
                ):
                    freed += size
                    cutoff = seq
                    if freed >= excess:
                        break
                if cutoff is not None:
                    deleted += db.execute(
                        "DELETE FROM responses WHERE seq <= ? AND seq != ?", (cutoff, keep)
                    ).rowcount
                    db.execute(
                        "DELETE FROM conversation_items WHERE conversation_id IN (SELECT id"
                        " FROM conversations WHERE seq <= ? AND seq != ?)",
                        (cutoff, keep),
                    )
                    deleted += db.execute(
                        "DELETE FROM conversations WHERE seq <= ? AND seq != ?", (cutoff, keep)
                    ).rowcount
                    self.bytes -= freed
            if deleted:
                db.execute("DELETE FROM background WHERE id NOT IN (SELECT id FROM responses)")
        if deleted:
            db.execute("PRAGMA incremental_vacuum")
            log.info(
                "response store: %d expired or over-limit responses or conversations deleted",
                deleted,
            )

    def _total_bytes(self) -> int:
        assert self._db is not None
        total: int = self._db.execute(
            "SELECT (SELECT COALESCE(SUM(size), 0) FROM responses)"
            " + (SELECT COALESCE(SUM(size), 0) FROM conversations)"
        ).fetchone()[0]
        return total

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

    # --- conversations (`conversations.py`): writes on the writer, reads on the reader ---

    async def create_conversation(
        self, conversation: StoredConversation, items: list[dict[str, Any]]
    ) -> None:
        await self._write_conversation(self._create_conversation, conversation, items)

    async def get_conversation(
        self, conversation_id: str, owner: str | None
    ) -> StoredConversation | None:
        return await self._read(self._get_conversation, conversation_id, owner)

    async def update_conversation(
        self, conversation_id: str, owner: str | None, metadata: dict[str, str]
    ) -> StoredConversation | None:
        return await self._write_conversation(
            self._update_conversation, conversation_id, owner, metadata
        )

    async def delete_conversation(self, conversation_id: str, owner: str | None) -> bool:
        deleted: bool = await self._write_conversation(
            self._delete_conversation, conversation_id, owner
        )
        return deleted

    async def append_items(
        self, conversation_id: str, owner: str | None, items: list[dict[str, Any]]
    ) -> StoredConversation | None:
        return await self._write_conversation(self._append_items, conversation_id, owner, items)

    async def conversation_items(
        self, conversation_id: str, owner: str | None, limit: int
    ) -> ConversationItems | None:
        return await self._read(self._conversation_items, conversation_id, owner, limit)

    async def list_items(
        self,
        conversation_id: str,
        owner: str | None,
        *,
        after: str | None,
        limit: int,
        order: str,
    ) -> ItemPage | None:
        return await self._read(self._list_items, conversation_id, owner, after, limit, order)

    async def get_item(
        self, conversation_id: str, owner: str | None, item_id: str
    ) -> dict[str, Any] | None:
        return await self._read(self._get_item, conversation_id, owner, item_id)

    async def delete_item(self, conversation_id: str, owner: str | None, item_id: str) -> bool:
        deleted: bool = await self._write_conversation(
            self._delete_item, conversation_id, owner, item_id
        )
        return deleted

    async def _write_conversation(self, function: Callable[..., T], *args: Any) -> T:
        """A conversation write on the writer's thread, bounded and awaited as `put` is."""
        await self._room.acquire()
        try:
            if self._closed:
                raise StoreError("the response store is closed")
            write = asyncio.wrap_future(
                self._writer.submit(self._conversation_write, function, *args)
            )
        except BaseException:
            self._room.release()
            raise
        self._writes.add(write)  # type: ignore[arg-type]
        write.add_done_callback(self._write_done)  # type: ignore[arg-type]
        try:
            return await asyncio.shield(write)
        except (OSError, sqlite3.Error) as exc:
            log.error("could not store a conversation: %s", exc)
            raise StoreError(f"the conversation could not be stored: {exc}") from None

    # on the writer's thread

    def _conversation_write(self, function: Callable[..., T], *args: Any) -> T:
        """`function` (one transaction), then the limits applied if it grew the store
        past one (never to the conversation just written)."""
        self._written_seq = None
        result = function(*args)
        newest = self._written_seq
        if newest is not None and (
            (self.max_bytes and self.bytes > self.max_bytes)
            or self._clock() - self._last_age_check > _AGE_CHECK_SECONDS
        ):
            self._prune(newest=newest)
        return result

    def _create_conversation(
        self, conversation: StoredConversation, items: list[dict[str, Any]]
    ) -> None:
        assert self._db is not None
        db = self._db
        header = conversation.encode()
        with _transaction(db):
            db.execute(
                f"INSERT INTO conversations (seq, {_CONVERSATION_COLUMNS})"
                " VALUES (?, ?, ?, ?, ?, ?, 0, ?)",
                (
                    db.execute(_NEXT_SEQ).fetchone()[0],
                    conversation.id,
                    conversation.owner,
                    conversation.created_at,
                    self._clock(),
                    len(header),
                    header,
                ),
            )
            added = self._add_items(conversation.id, items)
            self._refresh(conversation)
        self.bytes += len(header) + added  # counted once committed

    def _update_conversation(
        self, conversation_id: str, owner: str | None, metadata: dict[str, str]
    ) -> StoredConversation | None:
        assert self._db is not None
        db = self._db
        with _transaction(db):
            found = self._find_conversation(db, conversation_id, owner)
            if found is None:
                return None
            old = len(found.encode())
            found.metadata = dict(metadata)
            header = found.encode()
            db.execute(
                "UPDATE conversations SET metadata = ?, size = size + ? WHERE id = ?",
                (header, len(header) - old, conversation_id),
            )
            self._touch(conversation_id)
            self._refresh(found)
        self.bytes += len(header) - old
        return found

    def _delete_conversation(self, conversation_id: str, owner: str | None) -> bool:
        assert self._db is not None
        db = self._db
        with _transaction(db):
            found = self._find_conversation(db, conversation_id, owner)
            if found is None:
                return False
            db.execute("DELETE FROM conversation_items WHERE conversation_id = ?", (found.id,))
            db.execute("DELETE FROM conversations WHERE id = ?", (found.id,))
        self.bytes -= found.size
        return True

    def _append_items(
        self, conversation_id: str, owner: str | None, items: list[dict[str, Any]]
    ) -> StoredConversation | None:
        assert self._db is not None
        db = self._db
        with _transaction(db):
            found = self._find_conversation(db, conversation_id, owner)
            if found is None:
                return None
            added = self._add_items(conversation_id, items)
            self._touch(conversation_id)
            self._refresh(found)
        self.bytes += added
        return found

    def _delete_item(self, conversation_id: str, owner: str | None, item_id: str) -> bool:
        assert self._db is not None
        db = self._db
        with _transaction(db):
            found = self._find_conversation(db, conversation_id, owner)
            if found is None:
                return False
            row = db.execute(
                "DELETE FROM conversation_items WHERE conversation_id = ? AND id = ?"
                " RETURNING size",
                (conversation_id, item_id),
            ).fetchone()
            if row is None:
                return False
            db.execute(
                "UPDATE conversations SET size = size - ?, items = items - 1 WHERE id = ?",
                (row[0], conversation_id),
            )
            self._touch(conversation_id)
        self.bytes -= row[0]
        return True

    def _add_items(self, conversation_id: str, items: list[dict[str, Any]]) -> int:
        """Insert `items` (in the caller's transaction), their bytes; a repeated id raises
        DuplicateItemError, and the transaction rolls back."""
        assert self._db is not None
        db = self._db
        total = 0
        for item in items:
            data = encode_item(item)
            try:
                db.execute(
                    "INSERT INTO conversation_items (conversation_id, id, size, data)"
                    " VALUES (?, ?, ?, ?)",
                    (conversation_id, item["id"], len(data), data),
                )
            except sqlite3.IntegrityError:
                raise DuplicateItemError(item["id"]) from None
            total += len(data)
        db.execute(
            "UPDATE conversations SET size = size + ?, items = items + ? WHERE id = ?",
            (total, len(items), conversation_id),
        )
        return total

    def _touch(self, conversation_id: str) -> None:
        """A write: the conversation takes the next sequence number; its age starts again."""
        assert self._db is not None
        db = self._db
        db.execute(
            "UPDATE conversations SET seq = (" + _NEXT_SEQ + "), updated_at = ? WHERE id = ?",
            (self._clock(), conversation_id),
        )

    def _refresh(self, conversation: StoredConversation) -> None:
        """Read back what the store set (size, items, updated_at, its sequence number for
        `_conversation_write`). In the caller's transaction."""
        assert self._db is not None
        row = self._db.execute(
            "SELECT seq, size, items, updated_at FROM conversations WHERE id = ?",
            (conversation.id,),
        ).fetchone()
        self._written_seq, conversation.size, conversation.items, conversation.updated_at = row

    # on the reader's thread (and the writer's, inside its transactions)

    def _find_conversation(
        self, db: sqlite3.Connection, conversation_id: str, owner: str | None
    ) -> StoredConversation | None:
        row = db.execute(
            f"SELECT {_CONVERSATION_COLUMNS} FROM conversations"
            " WHERE id = ? AND owner IS ? AND updated_at >= ?",
            (conversation_id, owner, self._oldest_kept()),
        ).fetchone()
        return _conversation(row) if row is not None else None

    def _get_conversation(
        self, conversation_id: str, owner: str | None
    ) -> StoredConversation | None:
        assert self._read_db is not None
        return self._find_conversation(self._read_db, conversation_id, owner)

    def _conversation_items(
        self, conversation_id: str, owner: str | None, limit: int
    ) -> ConversationItems | None:
        assert self._read_db is not None
        db = self._read_db
        with _snapshot(db):
            found = self._find_conversation(db, conversation_id, owner)
            if found is None:
                return None
            if found.items > limit:
                return ConversationItems(found, truncated=True)
            rows = db.execute(
                "SELECT data FROM conversation_items WHERE conversation_id = ? ORDER BY seq",
                (conversation_id,),
            ).fetchall()
        return ConversationItems(found, [orjson.loads(row[0]) for row in rows])

    def _list_items(
        self, conversation_id: str, owner: str | None, after: str | None, limit: int, order: str
    ) -> ItemPage | None:
        assert self._read_db is not None
        db = self._read_db
        with _snapshot(db):
            if self._find_conversation(db, conversation_id, owner) is None:
                return None
            ascending = order == "asc"
            start = -1 if ascending else 2**63 - 1
            if after is not None:
                row = db.execute(
                    "SELECT seq FROM conversation_items WHERE conversation_id = ? AND id = ?",
                    (conversation_id, after),
                ).fetchone()
                if row is None:
                    return ItemPage([], False, after_missing=True)
                start = row[0]
            rows = db.execute(
                "SELECT data FROM conversation_items WHERE conversation_id = ? AND "
                + ("seq > ? ORDER BY seq" if ascending else "seq < ? ORDER BY seq DESC")
                + " LIMIT ?",
                (conversation_id, start, limit + 1),
            ).fetchall()
        items = [orjson.loads(row[0]) for row in rows[:limit]]
        return ItemPage(items, len(rows) > limit)

    def _get_item(
        self, conversation_id: str, owner: str | None, item_id: str
    ) -> dict[str, Any] | None:
        assert self._read_db is not None
        db = self._read_db
        with _snapshot(db):
            if self._find_conversation(db, conversation_id, owner) is None:
                return None
            row = db.execute(
                "SELECT data FROM conversation_items WHERE conversation_id = ? AND id = ?",
                (conversation_id, item_id),
            ).fetchone()
        if row is None:
            return None
        item: dict[str, Any] = orjson.loads(row[0])
        return item


@contextlib.contextmanager
def _snapshot(db: sqlite3.Connection) -> Iterator[None]:
    """One read transaction: the reads inside see one state of the file."""
    db.execute("BEGIN")
    try:
        yield
    finally:
        db.execute("COMMIT")


def _conversation(row: tuple[Any, ...]) -> StoredConversation:
    return StoredConversation(
        id=row[0],
        owner=row[1],
        created_at=row[2],
        updated_at=row[3],
        size=row[4],
        items=row[5],
        metadata=orjson.loads(row[6])["metadata"],
    )


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
