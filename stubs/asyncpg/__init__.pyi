# What realtime uses of asyncpg (it ships no type information): the entry points and
# the exception classes the PostgreSQL response store catches.
from typing import Any

from asyncpg import exceptions as exceptions
from asyncpg.exceptions import InterfaceError as InterfaceError
from asyncpg.exceptions import PostgresConnectionError as PostgresConnectionError
from asyncpg.exceptions import PostgresError as PostgresError

async def connect(dsn: str | None = ..., **kwargs: Any) -> Any: ...
def create_pool(dsn: str | None = ..., **kwargs: Any) -> Any: ...
