"""Stored responses in memory: the store without a directory, and a socket's own.

Used when no `--response-store` directory is configured, and by a WebSocket-mode
socket for its `store: false` responses, which die with it.
"""

from __future__ import annotations

import secrets
import time
from collections import OrderedDict
from typing import Any

from realtime.store.base import (
    DEFAULT_MAX_AGE_SECONDS,
    DEFAULT_MAX_BYTES,
    Chain,
    StoredResponse,
    fingerprint,
    walk_chain,
)


class MemoryResponseStore:
    """Records in a dict, oldest first, bounded by age, bytes and (optionally) count.

    Used when no store directory is configured, and by a socket for its
    `store: false` responses (which die with it)."""

    def __init__(
        self,
        *,
        max_age_seconds: float = DEFAULT_MAX_AGE_SECONDS,
        max_bytes: int = DEFAULT_MAX_BYTES,
        max_records: int | None = None,
        clock: Any = time.time,
    ) -> None:
        self.max_age_seconds = max_age_seconds
        self.max_bytes = max_bytes
        self.max_records = max_records
        self._clock = clock
        self._secret = secrets.token_bytes(32)
        self._records: OrderedDict[str, tuple[StoredResponse, int]] = OrderedDict()
        self.bytes = 0

    def owner(self, api_key: bytes | None) -> str | None:
        return fingerprint(self._secret, api_key)

    def __len__(self) -> int:
        return len(self._records)

    async def put(self, record: StoredResponse) -> None:
        size = len(record.encode())
        old = self._records.pop(record.id, None)
        if old is not None:
            self.bytes -= old[1]
        self._records[record.id] = (record, size)
        self.bytes += size
        self._prune()

    async def get(self, response_id: str, owner: str | None) -> StoredResponse | None:
        return self._find(response_id, owner)

    async def chain(self, response_id: str, owner: str | None, limit: int) -> Chain:
        return walk_chain(lambda rid: self._find(rid, owner), response_id, limit)

    async def delete(self, response_id: str, owner: str | None) -> bool:
        if self._find(response_id, owner) is None:
            return False
        _, size = self._records.pop(response_id)
        self.bytes -= size
        return True

    async def flush(self) -> None:
        """Nothing to wait for: a put is done when it returns."""

    async def close(self) -> None:
        self.clear()

    def clear(self) -> None:
        self._records.clear()
        self.bytes = 0

    def _find(self, response_id: str, owner: str | None) -> StoredResponse | None:
        found = self._records.get(response_id)
        if found is None or found[0].owner != owner or self._expired(found[0]):
            return None
        return found[0]

    def _expired(self, record: StoredResponse) -> bool:
        return (
            bool(self.max_age_seconds) and record.created_at < self._clock() - self.max_age_seconds
        )

    def _prune(self) -> None:
        records = self._records
        while records:
            oldest, size = next(iter(records.values()))
            over = (
                (self.max_bytes and self.bytes > self.max_bytes)
                or (self.max_records is not None and len(records) > self.max_records)
                or self._expired(oldest)
            )
            if not over:
                return
            records.popitem(last=False)
            self.bytes -= size
