"""`python -m bench.pg_drivers`: asyncpg against psycopg 3 on the response store's operations.

Why: the PostgreSQL response store (`realtime/store/postgres.py`) had to pick one
asyncio driver, and the issue asks for the choice to be measured. Each driver
runs the store's own statements on a throwaway cluster (`realtime.testing.postgres`),
through a pool of the same size, with the same concurrency:

* put: one transaction (lock the usage row, insert the record with its ~4 kB
  JSON, add its size), as `PostgresResponseStore.put` does;
* get: one record by id and owner;
* chain: a 10-record `previous_response_id` chain in one recursive query.

The drivers alternate round by round (A/B, B/A, ...) so a drift of the machine is
shared. Printed: the median over rounds of each operation's mean latency, in
microseconds, and the client process's CPU per operation (what the driver costs
the server's event loop). Not part of `python -m bench`: a one-off measurement,
its numbers in the store's docstring.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import time
from collections.abc import Awaitable, Callable
from typing import Any

import orjson

from realtime.testing.postgres import ThrowawayPostgres

SCHEMA = """
DROP TABLE IF EXISTS bench_responses;
DROP TABLE IF EXISTS bench_usage;
CREATE TABLE bench_responses (
    seq BIGSERIAL PRIMARY KEY, id TEXT NOT NULL UNIQUE, owner TEXT,
    previous_response_id TEXT, created_at DOUBLE PRECISION NOT NULL,
    size BIGINT NOT NULL, data BYTEA NOT NULL);
CREATE TABLE bench_usage (one BOOLEAN PRIMARY KEY, bytes BIGINT NOT NULL);
INSERT INTO bench_usage VALUES (TRUE, 0);
"""
CHAIN = """
WITH RECURSIVE chain AS (
    SELECT id, previous_response_id, data, 0 AS depth FROM bench_responses
        WHERE id = {0} AND owner IS NOT DISTINCT FROM {1}
    UNION ALL
    SELECT r.id, r.previous_response_id, r.data, chain.depth + 1
        FROM bench_responses r JOIN chain ON r.id = chain.previous_response_id
        WHERE r.owner IS NOT DISTINCT FROM {1} AND chain.depth < {2})
SELECT id, previous_response_id, data FROM chain ORDER BY depth
"""
PAYLOAD = orjson.dumps({"response": {"output": [{"text": "x" * 4000}]}, "input_items": []})


class Driver:
    name: str

    async def open(self, dsn: str, size: int) -> None: ...
    async def put(self, rid: str, previous: str | None) -> None: ...
    async def get(self, rid: str) -> Any: ...
    async def chain(self, rid: str) -> Any: ...
    async def close(self) -> None: ...


class Asyncpg(Driver):
    name = "asyncpg"

    async def open(self, dsn: str, size: int) -> None:
        import asyncpg

        self.pool = await asyncpg.create_pool(dsn, min_size=size, max_size=size)
        self.chain_sql = CHAIN.format("$1", "$2", "$3")

    async def put(self, rid: str, previous: str | None) -> None:
        async with self.pool.acquire() as conn, conn.transaction():
            await conn.execute("SELECT bytes FROM bench_usage FOR UPDATE")
            await conn.fetchval(
                "INSERT INTO bench_responses (id, owner, previous_response_id, created_at,"
                " size, data) VALUES ($1, $2, $3, $4, $5, $6) RETURNING seq",
                rid, None, previous, time.time(), len(PAYLOAD), PAYLOAD,
            )  # fmt: skip
            await conn.execute("UPDATE bench_usage SET bytes = bytes + $1", len(PAYLOAD))

    async def get(self, rid: str) -> Any:
        return await self.pool.fetchrow(
            "SELECT id, data FROM bench_responses WHERE id = $1 AND owner IS NOT DISTINCT FROM $2",
            rid,
            None,
        )

    async def chain(self, rid: str) -> Any:
        return await self.pool.fetch(self.chain_sql, rid, None, 10)

    async def close(self) -> None:
        await self.pool.close()


class Psycopg(Driver):
    name = "psycopg"

    async def open(self, dsn: str, size: int) -> None:
        from psycopg_pool import AsyncConnectionPool

        self.pool = AsyncConnectionPool(
            dsn, min_size=size, max_size=size, open=False, kwargs={"autocommit": True}
        )
        await self.pool.open(wait=True)
        self.chain_sql = CHAIN.format("%s", "%s", "%s")

    async def put(self, rid: str, previous: str | None) -> None:
        async with self.pool.connection() as conn, conn.transaction():
            await conn.execute("SELECT bytes FROM bench_usage FOR UPDATE")
            cursor = await conn.execute(
                "INSERT INTO bench_responses (id, owner, previous_response_id, created_at,"
                " size, data) VALUES (%s, %s, %s, %s, %s, %s) RETURNING seq",
                (rid, None, previous, time.time(), len(PAYLOAD), PAYLOAD),
            )
            await cursor.fetchone()
            await conn.execute("UPDATE bench_usage SET bytes = bytes + %s", (len(PAYLOAD),))

    async def get(self, rid: str) -> Any:
        async with self.pool.connection() as conn:
            cursor = await conn.execute(
                "SELECT id, data FROM bench_responses WHERE id = %s"
                " AND owner IS NOT DISTINCT FROM %s",
                (rid, None),
            )
            return await cursor.fetchone()

    async def chain(self, rid: str) -> Any:
        async with self.pool.connection() as conn:
            cursor = await conn.execute(self.chain_sql, (rid, None, None, 10))  # {1} twice
            return await cursor.fetchall()

    async def close(self) -> None:
        await self.pool.close()


async def _timed(n: int, concurrency: int, op: Callable[[int], Awaitable[Any]]) -> float:
    """Mean seconds per operation over `n`, `concurrency` at a time."""
    counter = iter(range(n))

    async def worker() -> None:
        for i in counter:
            await op(i)

    start = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return (time.perf_counter() - start) / n


async def _round(driver: Driver, dsn: str, tag: str, n: int, concurrency: int) -> dict[str, float]:
    await driver.open(dsn, concurrency)
    try:
        result: dict[str, float] = {}
        cpu = time.process_time()
        result["put"] = await _timed(
            n, concurrency, lambda i: driver.put(f"{tag}-{i}", f"{tag}-{i - 1}" if i else None)
        )
        result["put cpu"] = (time.process_time() - cpu) / n
        cpu = time.process_time()
        result["get"] = await _timed(n, concurrency, lambda i: driver.get(f"{tag}-{i}"))
        result["get cpu"] = (time.process_time() - cpu) / n
        cpu = time.process_time()
        result["chain"] = await _timed(n, concurrency, lambda i: driver.chain(f"{tag}-{i}"))
        result["chain cpu"] = (time.process_time() - cpu) / n
        return result
    finally:
        await driver.close()


async def _main(dsn: str, rounds: int, n: int, concurrency: int) -> None:
    import asyncpg

    conn = await asyncpg.connect(dsn)
    await conn.execute(SCHEMA)
    await conn.close()
    drivers: list[Driver] = [Asyncpg(), Psycopg()]
    results: dict[str, list[dict[str, float]]] = {d.name: [] for d in drivers}
    for r in range(rounds):
        order = drivers if r % 2 == 0 else drivers[::-1]
        for driver in order:
            results[driver.name].append(
                await _round(driver, dsn, f"{driver.name}{r}", n, concurrency)
            )
    print(f"{rounds} rounds x {n} ops, {concurrency} concurrent; load {os.getloadavg()[0]:.2f}")
    print(f"{'operation':<12}" + "".join(f"{d.name:>12}" for d in drivers) + "     ratio")
    for op in ("put", "get", "chain", "put cpu", "get cpu", "chain cpu"):
        values = [statistics.median(x[op] for x in results[d.name]) * 1e6 for d in drivers]
        print(
            f"{op + ' us':<12}"
            + "".join(f"{v:12.0f}" for v in values)
            + f"{values[1] / values[0]:9.2f}x"
        )


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.pg_drivers", description=__doc__)
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--ops", type=int, default=1000)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--dsn", help="an existing database (default: a throwaway cluster)")
    args = parser.parse_args()
    try:
        import asyncpg  # noqa: F401
        import psycopg_pool  # noqa: F401
    except ImportError as exc:
        raise SystemExit(
            f"{exc.name} is missing: pip install asyncpg 'psycopg[binary,pool]'"
        ) from None
    if args.dsn:
        asyncio.run(_main(args.dsn, args.rounds, args.ops, args.concurrency))
        return
    with ThrowawayPostgres() as cluster:
        asyncio.run(_main(cluster.dsn, args.rounds, args.ops, args.concurrency))


if __name__ == "__main__":
    main()
