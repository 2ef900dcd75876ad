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
            now = self._clock()
            if self.max_age_seconds and now - self._last_age_check > _AGE_CHECK_SECONDS:
                total -= sum(r[0] for r in await db.fetch(sql.EXPIRE, self._oldest_kept()))
                self._last_age_check = now
            if self.max_bytes and total > self.max_bytes:
                total -= await _drop_oldest(db, total - self.max_bytes, newest=seq)
            await db.execute(sql.SET_USAGE, total)
        return len(data)

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
    return sum(r[0] for r in await db.fetch(sql.DROP_UP_TO, cutoff, newest))


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


def _reason(exc: BaseException, url: str = "") -> str:
    """One line for a log or an error: the driver's message, with the URL's password
    (should the message quote it) replaced."""
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    for secret in passwords(url):
        text = text.replace(secret, "***")
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
