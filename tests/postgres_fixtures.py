"""A throwaway PostgreSQL cluster for the tests that need one (the response store, replicas).

One cluster per test session (`realtime.testing.postgres`: initdb in a temporary
directory, a loopback port, stopped by PID at the end); each test that asks for
`postgres_url` gets a database of its own in it. The tests skip when PostgreSQL's
server binaries are missing, unless REALTIME_REQUIRE_POSTGRES=1 (scripts/test sets
it, after installing PostgreSQL from Debian's packages), which turns the skip into
a failure so a broken install cannot pass silently.
"""

from __future__ import annotations

import asyncio
import itertools
import os
from collections.abc import Iterator

import pytest

from realtime.testing.postgres import PostgresUnavailable, ThrowawayPostgres

_databases = itertools.count()


def _unavailable(reason: str) -> None:
    if os.environ.get("REALTIME_REQUIRE_POSTGRES") == "1":
        pytest.fail(f"PostgreSQL tests required but {reason}")
    pytest.skip(reason)


@pytest.fixture(scope="session")
def postgres_cluster() -> Iterator[ThrowawayPostgres]:
    try:
        import asyncpg  # noqa: F401
    except ImportError:
        _unavailable("asyncpg is not installed (pip install -e '.[postgres]')")
    try:
        cluster = ThrowawayPostgres()
    except PostgresUnavailable as exc:
        _unavailable(str(exc))
    with cluster:
        yield cluster


def create_database(cluster: ThrowawayPostgres, name: str) -> str:
    """A new empty database in `cluster`; its URL."""
    import asyncpg

    async def create() -> None:
        db = await asyncpg.connect(cluster.dsn)
        try:
            await db.execute(f'CREATE DATABASE "{name}"')
        finally:
            await db.close()

    asyncio.run(create())
    return cluster.dsn.rsplit("/", 1)[0] + "/" + name


@pytest.fixture
def postgres_url(postgres_cluster: ThrowawayPostgres) -> str:
    """The URL of a database of this test's own."""
    return create_database(postgres_cluster, f"test_{os.getpid()}_{next(_databases)}")
