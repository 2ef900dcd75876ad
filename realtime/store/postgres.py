"""`store: true` responses in PostgreSQL: one store that several replicas share.

`--response-store postgresql://USER[:PASSWORD]@HOST[:PORT]/DATABASE`. Every
replica pointed at the same database sees every response, so a
`previous_response_id` made on one replica continues on any other.

Driver: asyncpg, on the serving event loop (no thread per query). Measured
against psycopg 3 (`python -m bench.pg_drivers`, the store's own statements, a
pool of 8 each) it took less time and less client CPU for every operation; see
docs/howto/run-several-replicas.md for the numbers.

The promises of `base.py`, kept across replicas:

* **Durable on return.** `put` returns once its transaction has committed
  (PostgreSQL's default `synchronous_commit = on`: the commit record is flushed
  to the server's disk, so kill -9 of the replica or of the database loses
  nothing `put` returned for). A put that fails or times out raises StoreError:
  the response is not acknowledged.
* **Order and bytes across replicas.** Each put first locks the one row of
  `realtime_usage`, which holds the bytes of every record, so the puts of all
  replicas are serialized there: each gets the next `seq` in that order, and the
  byte limit (the oldest records but the newest deleted while over it) is applied
  to the exact total, never a replica's estimate.
* **Age** is checked on every read (`created_at >= now - max_age`, now from this
  replica's clock); expired records are deleted at most once a minute per replica.
* **Bounded.** At most `max_pending_writes` puts are in flight per replica (a
  further put waits for room), at most `pool_size` connections are open, and
  every operation (connecting included) ends within `timeout` seconds: a
  database that is down or unreachable never hangs a request; it gets
  StoreError, which the Responses API answers with a retryable 503
  (`store_unavailable`).
* **Reconnects.** Connections come from a pool that replaces broken ones; an
  operation whose connection was lost (the server restarted, a network cut) is
  tried once more on a new connection within the same `timeout`.

Opening the store (the constructor) connects once, runs the schema migrations
(`postgres_schema.py`) and reads the owner secret, so a wrong URL or an
unreachable database stops the server at startup with a clear message. The URL's
password never reaches a log or an error (`dsn.redact`).

Conversations (`conversations.py`, schema 2): a row per conversation and one per
item; every write to one locks `realtime_usage` as a put does, takes the next
number of the responses' sequence, and counts in the same bytes.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import secrets
import time
from collections.abc import Awaitable, Callable
from dataclasses import replace
from typing import Any, TypeVar

import orjson

from realtime.store import postgres_schema as sql
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
from realtime.store.dsn import passwords, redact

log = logging.getLogger("realtime.dialects.responses")

T = TypeVar("T")

#: Seconds any one store operation may take, connecting included.
DEFAULT_TIMEOUT = 5.0
#: Connections a replica's pool opens at most.
DEFAULT_POOL_SIZE = 8
#: Seconds between deletions of expired records (per replica).
_AGE_CHECK_SECONDS = 60.0
#: Records whose bytes add up to more than this are decoded in a worker thread.
_DECODE_OFF_LOOP_BYTES = 256 * 1024


def _driver() -> Any:
    try:
        import asyncpg
    except ImportError:
        raise ValueError(
            "a postgresql:// response store needs the asyncpg package:"
            " pip install 'realtime[postgres]'"
        ) from None
    return asyncpg


class PostgresResponseStore:
    def __init__(
        self,
        url: str,
        *,
        max_age_seconds: float = DEFAULT_MAX_AGE_SECONDS,
        max_bytes: int = DEFAULT_MAX_BYTES,
        clock: Any = time.time,
        max_pending_writes: int = MAX_PENDING_WRITES,
        pool_size: int = DEFAULT_POOL_SIZE,
        timeout: float = DEFAULT_TIMEOUT,
    ) -> None:
        """Connect, migrate and read the owner secret; raises ValueError saying why not."""
        self._asyncpg = _driver()
        self._url = url
        #: The URL as logs and errors show it (no password).
        self.where = redact(url)
        self.max_age_seconds = max_age_seconds
        self.max_bytes = max_bytes
        self.timeout = timeout
        self._clock = clock
        self._pool_size = pool_size
        self._room = asyncio.Semaphore(max_pending_writes)
        self._writes: set[asyncio.Task[int]] = set()
        self._pool: Any = None
        self._pool_lock: asyncio.Lock | None = None
        self._closed = False
        self._last_age_check = 0.0
        pg = self._asyncpg
        #: Failures a new connection may cure: tried once more.
        self._lost = (
            OSError,
            pg.InterfaceError,
            pg.exceptions.InternalClientError,
            pg.PostgresConnectionError,
            pg.exceptions.OperatorInterventionError,
        )
        #: Every failure of the driver, the network or the database.
        self._failures = (
            OSError,
            asyncio.TimeoutError,
            pg.PostgresError,
            pg.InterfaceError,
            pg.exceptions.InternalClientError,
        )
        with concurrent.futures.ThreadPoolExecutor(1, "response-store-open") as opener:
            try:
                self._secret: bytes = opener.submit(asyncio.run, self._open()).result()
            except ValueError:
                raise
            except Exception as exc:
                raise ValueError(
                    f"cannot open the response store {self.where}: {_reason(exc, self._url)}"
                ) from None

    # --- the interface ---

    def owner(self, api_key: bytes | None) -> str | None:
        return fingerprint(self._secret, api_key)

    async def put(self, record: StoredResponse) -> None:
        """Committed when this returns; waits for room while `max_pending_writes` puts are
        in flight. Raises StoreError."""
        await self._room.acquire()
        try:
            if self._closed:
                raise StoreError("the response store is closed")
            write = asyncio.ensure_future(self._operate("store the response", self._write, record))
        except BaseException:
            self._room.release()
            raise
        # Room comes back when the write ends; `close` waits for it; a caller that goes
        # away leaves it running (it is bounded by `timeout`).
        self._writes.add(write)
        write.add_done_callback(self._write_done)
        record.size = await asyncio.shield(write)

    async def get(self, response_id: str, owner: str | None) -> StoredResponse | None:
        row = await self._operate(
            "read the response", self._fetchrow, sql.GET, response_id, owner, self._oldest_kept()
        )
        if row is None:
            return None
        return (await _decode([row]))[0]

    async def chain(self, response_id: str, owner: str | None, limit: int) -> Chain:
        rows = await self._operate(
            "read the conversation",
            self._fetch,
            sql.CHAIN,
            response_id,
            owner,
            self._oldest_kept(),
            limit + 1,
        )
        records = await _decode(rows)
        chain = Chain(records[:limit])
        if len(records) > limit:
            chain.truncated = True
        elif not records:
            chain.missing = response_id
        else:
            chain.missing = records[-1].previous_response_id  # None: the chain is whole
        return chain

    async def unfinished(self, runner: str) -> list[StoredResponse]:
        rows = await self._operate(
            "read the unfinished background responses",
            self._fetch,
            sql.UNFINISHED,
            runner,
            self._oldest_kept(),
        )
        return [replace(record, runner=runner) for record in await _decode(rows)]

    async def delete(self, response_id: str, owner: str | None) -> bool:
        if self._closed:
            raise StoreError("the response store is closed")
        return await self._operate("delete the response", self._delete, response_id, owner)

    async def close(self) -> None:
        self._closed = True
        if self._writes:
            await asyncio.gather(*self._writes, return_exceptions=True)
        pool, self._pool = self._pool, None
        if pool is not None:
            try:
                await asyncio.wait_for(pool.close(), self.timeout)
            except (asyncio.TimeoutError, *self._failures):
                pool.terminate()

    # --- operations, each bounded and retried once on a lost connection ---

    async def _operate(self, what: str, operation: Callable[..., Awaitable[T]], *args: Any) -> T:
        if self._closed:
            raise StoreError("the response store is closed")
        try:
            return await asyncio.wait_for(self._attempt(operation, *args), self.timeout)
        except asyncio.TimeoutError:
            log.error("response store %s: could not %s within %g s", self.where, what, self.timeout)
            raise StoreError(
                f"the response store did not answer within {self.timeout:g} s"
            ) from None
        except self._failures as exc:
            log.error(
                "response store %s: could not %s: %s", self.where, what, _reason(exc, self._url)
            )
            raise StoreError(f"could not {what}: {_reason(exc, self._url)}") from None

    async def _attempt(self, operation: Callable[..., Awaitable[T]], *args: Any) -> T:
        pool = await self._connections()
        try:
            return await operation(pool, *args)
        except self._lost as exc:
            reason = _reason(exc, self._url)
            log.warning("response store %s: connection lost (%s); reconnecting", self.where, reason)
            self._discard(pool)
            return await operation(await self._connections(), *args)

    def _discard(self, pool: Any) -> None:
        """Drop a pool whose connections were lost (all of them were, when the server
        went away): the next operation opens a new one. Operations still on it fail and
        come here too."""
        if self._pool is pool:
            self._pool = None
            pool.terminate()

    async def _connections(self) -> Any:
        """The pool, made on first use on the serving loop (connections open lazily)."""
        if self._pool is not None:
            return self._pool
        if self._pool_lock is None:
            self._pool_lock = asyncio.Lock()
        async with self._pool_lock:
            if self._pool is None:
                self._pool = await self._asyncpg.create_pool(
                    self._url,
                    min_size=0,
                    max_size=self._pool_size,
                    timeout=self.timeout,
                    command_timeout=self.timeout,
                )
        return self._pool

    async def _fetchrow(self, pool: Any, query: str, *args: Any) -> Any:
        return await pool.fetchrow(query, *args)

    async def _fetch(self, pool: Any, query: str, *args: Any) -> list[Any]:
        rows: list[Any] = await pool.fetch(query, *args)
        return rows

    async def _write(self, pool: Any, record: StoredResponse) -> int:
        data = await asyncio.to_thread(record.encode)
        async with pool.acquire() as db, db.transaction():
            total = await db.fetchval(sql.LOCK_USAGE)  # every replica's writes queue here
            old = await db.fetchval(sql.REPLACE, record.id)  # put again: the newest
            seq = await db.fetchval(
                sql.INSERT,
                record.id,
                record.owner,
                record.previous_response_id,
                record.created_at,
                len(data),
                data,
            )
            if record.runner is not None:  # (put again, the old row went with its record)
                await db.execute(sql.ADD_RUNNER, record.id, record.runner)
            total += len(data) - (old or 0)
            total = await self._apply_limits(db, total, newest=seq)
            await db.execute(sql.SET_USAGE, total)
        return len(data)

    async def _apply_limits(self, db: Any, total: int, *, newest: int) -> int:
        """Expired records go (at most once a minute), then the oldest but `newest` while
        over the byte limit; the bytes left. In the caller's transaction."""
        now = self._clock()
        if self.max_age_seconds and now - self._last_age_check > _AGE_CHECK_SECONDS:
            oldest = self._oldest_kept()
            total -= sum(r[0] for r in await db.fetch(sql.EXPIRE, oldest))
            total -= sum(r[0] for r in await db.fetch(sql.EXPIRE_CONVERSATIONS, oldest))
            self._last_age_check = now
        if self.max_bytes and total > self.max_bytes:
            total -= await _drop_oldest(db, total - self.max_bytes, newest=newest)
        return total

    async def _delete(self, pool: Any, response_id: str, owner: str | None) -> bool:
        async with pool.acquire() as db, db.transaction():
            total = await db.fetchval(sql.LOCK_USAGE)
            size = await db.fetchval(sql.DELETE, response_id, owner, self._oldest_kept())
            if size is None:
                return False
            await db.execute(sql.SET_USAGE, total - size)
        return True

    def _write_done(self, write: asyncio.Task[int]) -> None:
        self._writes.discard(write)
        self._room.release()
        if not write.cancelled():
            write.exception()  # retrieved: the caller, if still there, reported it

    def _oldest_kept(self) -> float:
        return self._clock() - self.max_age_seconds if self.max_age_seconds else float("-inf")

    # --- opening (its own event loop, in a thread: the constructor is synchronous) ---

    async def _open(self) -> bytes:
        db = await self._asyncpg.connect(self._url, timeout=self.timeout)
        try:
            async with db.transaction():
                await db.execute("SELECT pg_advisory_xact_lock($1)", sql.MIGRATION_LOCK)
                await db.execute(sql.CREATE_VERSION_TABLE)
                version = await db.fetchval(sql.READ_VERSION) or 0
                if version > sql.SCHEMA_VERSION:
                    raise ValueError(
                        f"cannot open the response store {self.where}: it was written by a"
                        f" newer version of realtime (schema {version})"
                    )
                for number in range(version + 1, sql.SCHEMA_VERSION + 1):
                    await db.execute(sql.MIGRATIONS[number - 1])
                    log.info("response store %s: schema migrated to %d", self.where, number)
                if version < sql.SCHEMA_VERSION:
                    await db.execute("DELETE FROM realtime_schema")
                    await db.execute(
                        "INSERT INTO realtime_schema (version) VALUES ($1)", sql.SCHEMA_VERSION
                    )
                await db.execute(sql.ADD_SECRET, secrets.token_bytes(32))
                secret: bytes = await db.fetchval(sql.SECRET)
        finally:
            await db.close()
        return bytes(secret)

    # --- conversations (`conversations.py`) ---

    async def create_conversation(
        self, conversation: StoredConversation, items: list[dict[str, Any]]
    ) -> None:
        found = await self._write_conversation(
            "store the conversation", self._create_conversation, conversation, items
        )
        conversation.size, conversation.items = found.size, found.items
        conversation.updated_at = found.updated_at

    async def get_conversation(
        self, conversation_id: str, owner: str | None
    ) -> StoredConversation | None:
        row = await self._operate(
            "read the conversation",
            self._fetchrow,
            sql.GET_CONVERSATION,
            conversation_id,
            owner,
            self._oldest_kept(),
        )
        return _conversation(row) if row is not None else None

    async def update_conversation(
        self, conversation_id: str, owner: str | None, metadata: dict[str, str]
    ) -> StoredConversation | None:
        return await self._write_conversation(
            "update the conversation", self._change, conversation_id, owner, [], metadata, None
        )

    async def delete_conversation(self, conversation_id: str, owner: str | None) -> bool:
        deleted: bool = await self._write_conversation(
            "delete the conversation", self._delete_conversation, conversation_id, owner
        )
        return deleted

    async def append_items(
        self, conversation_id: str, owner: str | None, items: list[dict[str, Any]]
    ) -> StoredConversation | None:
        return await self._write_conversation(
            "store the conversation's items", self._change, conversation_id, owner, items, None,
            None,
        )  # fmt: skip

    async def conversation_items(
        self, conversation_id: str, owner: str | None, limit: int
    ) -> ConversationItems | None:
        return await self._operate(
            "read the conversation", self._conversation_items, conversation_id, owner, limit
        )

    async def list_items(
        self,
        conversation_id: str,
        owner: str | None,
        *,
        after: str | None,
        limit: int,
        order: str,
    ) -> ItemPage | None:
        return await self._operate(
            "read the conversation's items",
            self._list_items,
            conversation_id,
            owner,
            after,
            limit,
            order,
        )

    async def get_item(
        self, conversation_id: str, owner: str | None, item_id: str
    ) -> dict[str, Any] | None:
        return await self._operate(
            "read the conversation's item", self._get_item, conversation_id, owner, item_id
        )

    async def delete_item(self, conversation_id: str, owner: str | None, item_id: str) -> bool:
        deleted: bool = await self._write_conversation(
            "delete the conversation's item", self._change, conversation_id, owner, [], None,
            item_id,
        )  # fmt: skip
        return deleted

    async def _write_conversation(
        self, what: str, operation: Callable[..., Awaitable[T]], *args: Any
    ) -> T:
        """A write, bounded and awaited as `put` is."""
        await self._room.acquire()
        try:
            if self._closed:
                raise StoreError("the response store is closed")
            write = asyncio.ensure_future(self._operate(what, operation, *args))
        except BaseException:
            self._room.release()
            raise
        self._writes.add(write)  # type: ignore[arg-type]
        write.add_done_callback(self._write_done)  # type: ignore[arg-type]
        return await asyncio.shield(write)

    async def _create_conversation(
        self, pool: Any, conversation: StoredConversation, items: list[dict[str, Any]]
    ) -> StoredConversation:
        header = conversation.encode()
        async with pool.acquire() as db, db.transaction():
            total = await db.fetchval(sql.LOCK_USAGE)
            await db.execute(
                sql.CREATE_CONVERSATION,
                conversation.id,
                conversation.owner,
                conversation.created_at,
                self._clock(),
                len(header),
                header,
            )
            found, total = await self._write_items(db, conversation.id, items, None, total)
            total += len(header)
            await db.execute(sql.SET_USAGE, total)
        return found

    async def _change(
        self,
        pool: Any,
        conversation_id: str,
        owner: str | None,
        items: list[dict[str, Any]],
        metadata: dict[str, str] | None,
        delete_item: str | None,
    ) -> Any:
        """One write to a conversation (items appended, its metadata replaced, or an item
        deleted): the updated header, or None / False when not found."""
        async with pool.acquire() as db, db.transaction():
            total = await db.fetchval(sql.LOCK_USAGE)
            row = await db.fetchrow(
                sql.GET_CONVERSATION, conversation_id, owner, self._oldest_kept()
            )
            if row is None:
                return False if delete_item is not None else None
            if delete_item is not None:
                size = await db.fetchval(sql.DELETE_ITEM, conversation_id, delete_item)
                if size is None:
                    return False
                touched = await db.fetchrow(
                    sql.TOUCH_CONVERSATION, conversation_id, self._clock(), -size, -1, None
                )
                await db.execute(sql.SET_USAGE, total - size)
                return touched is not None
            if metadata is not None:
                old = _conversation(row)
                grown = len(orjson.dumps({"metadata": metadata})) - len(old.encode())
                touched = await db.fetchrow(
                    sql.TOUCH_CONVERSATION,
                    conversation_id,
                    self._clock(),
                    grown,
                    0,
                    orjson.dumps({"metadata": metadata}),
                )
                total = await self._apply_limits(db, total + grown, newest=touched[0])
                await db.execute(sql.SET_USAGE, total)
                return _conversation(touched[1:])
            found, total = await self._write_items(db, conversation_id, items, None, total)
            await db.execute(sql.SET_USAGE, total)
            return found

    async def _write_items(
        self,
        db: Any,
        conversation_id: str,
        items: list[dict[str, Any]],
        metadata: bytes | None,
        total: int,
    ) -> tuple[StoredConversation, int]:
        """Insert `items`, move the conversation to the newest, apply the limits; the
        updated header and the store's bytes. In the caller's transaction."""
        if items:
            taken = await db.fetch(sql.EXISTING_ITEMS, conversation_id, [i["id"] for i in items])
            if taken:
                raise DuplicateItemError(taken[0][0])
        encoded = await asyncio.to_thread(lambda: [encode_item(item) for item in items])
        try:
            await db.executemany(
                sql.INSERT_ITEM,
                [
                    (conversation_id, item["id"], len(data), data)
                    for item, data in zip(items, encoded, strict=True)
                ],
            )
        except self._asyncpg.UniqueViolationError:
            raise DuplicateItemError(items[0]["id"]) from None
        grown = sum(len(data) for data in encoded)
        touched = await db.fetchrow(
            sql.TOUCH_CONVERSATION, conversation_id, self._clock(), grown, len(items), metadata
        )
        total = await self._apply_limits(db, total + grown, newest=touched[0])
        return _conversation(touched[1:]), total

    async def _delete_conversation(
        self, pool: Any, conversation_id: str, owner: str | None
    ) -> bool:
        async with pool.acquire() as db, db.transaction():
            total = await db.fetchval(sql.LOCK_USAGE)
            size = await db.fetchval(
                sql.DELETE_CONVERSATION, conversation_id, owner, self._oldest_kept()
            )
            if size is None:
                return False
            await db.execute(sql.SET_USAGE, total - size)
        return True

    async def _conversation_items(
        self, pool: Any, conversation_id: str, owner: str | None, limit: int
    ) -> ConversationItems | None:
        async with pool.acquire() as db, db.transaction(readonly=True, isolation="repeatable_read"):
            row = await db.fetchrow(
                sql.GET_CONVERSATION, conversation_id, owner, self._oldest_kept()
            )
            if row is None:
                return None
            found = _conversation(row)
            if found.items > limit:
                return ConversationItems(found, truncated=True)
            rows = await db.fetch(sql.ALL_ITEMS, conversation_id)
        return ConversationItems(found, await _decode_items(rows))

    async def _list_items(
        self,
        pool: Any,
        conversation_id: str,
        owner: str | None,
        after: str | None,
        limit: int,
        order: str,
    ) -> ItemPage | None:
        async with pool.acquire() as db, db.transaction(readonly=True, isolation="repeatable_read"):
            row = await db.fetchrow(
                sql.GET_CONVERSATION, conversation_id, owner, self._oldest_kept()
            )
            if row is None:
                return None
            ascending = order == "asc"
            start = -1 if ascending else 2**63 - 1
            if after is not None:
                start = await db.fetchval(sql.ITEM_SEQ, conversation_id, after)
                if start is None:
                    return ItemPage([], False, after_missing=True)
            query = sql.ITEMS_AFTER if ascending else sql.ITEMS_BEFORE
            rows = await db.fetch(query, conversation_id, start, limit + 1)
        items = await _decode_items(rows[:limit])
        return ItemPage(items, len(rows) > limit)

    async def _get_item(
        self, pool: Any, conversation_id: str, owner: str | None, item_id: str
    ) -> dict[str, Any] | None:
        async with pool.acquire() as db, db.transaction(readonly=True, isolation="repeatable_read"):
            row = await db.fetchrow(
                sql.GET_CONVERSATION, conversation_id, owner, self._oldest_kept()
            )
            if row is None:
                return None
            data = await db.fetchval(sql.GET_ITEM, conversation_id, item_id)
        if data is None:
            return None
        item: dict[str, Any] = orjson.loads(data)
        return item


async def _drop_oldest(db: Any, excess: int, *, newest: int) -> int:
    """Delete the oldest records (never `newest`) until `excess` bytes are freed, or all
    others are gone; the bytes freed."""
    cutoff, freed, after = None, 0, -1
    while freed < excess:
        page = await db.fetch(sql.OLDEST, newest, after)
        if not page:
            break
        for seq, size in page:
            freed += size
            cutoff = seq
            if freed >= excess:
                break
        after = page[-1][0]
    if cutoff is None:
        return 0
    dropped: int = sum(r[0] for r in await db.fetch(sql.DROP_UP_TO, cutoff, newest))
    dropped += sum(r[0] for r in await db.fetch(sql.DROP_CONVERSATIONS_UP_TO, cutoff, newest))
    return dropped


async def _decode(rows: list[Any]) -> list[StoredResponse]:
    """Records from rows; large ones decoded in a worker thread (never on the loop)."""
    if sum(row[4] for row in rows) > _DECODE_OFF_LOOP_BYTES:
        return await asyncio.to_thread(lambda: [_record(row) for row in rows])
    return [_record(row) for row in rows]


def _record(row: Any) -> StoredResponse:
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


async def _decode_items(rows: list[Any]) -> list[dict[str, Any]]:
    """Items from (size, data) rows; many bytes of them decoded in a worker thread."""
    if sum(row[0] for row in rows) > _DECODE_OFF_LOOP_BYTES:
        return await asyncio.to_thread(lambda: [orjson.loads(row[1]) for row in rows])
    return [orjson.loads(row[1]) for row in rows]


def _conversation(row: Any) -> StoredConversation:
    return StoredConversation(
        id=row[0],
        owner=row[1],
        created_at=row[2],
        updated_at=row[3],
        size=row[4],
        items=row[5],
        metadata=orjson.loads(row[6])["metadata"],
    )


def _reason(exc: BaseException, url: str = "") -> str:
    """One line for a log or an error: the driver's message, with the URL's password
    (should the message quote it) replaced."""
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    for secret in passwords(url):
        text = text.replace(secret, "***")
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
