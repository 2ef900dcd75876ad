"""Stored responses in memory: the store without a directory, and a socket's own.

Used when no `--response-store` directory is configured, and by a WebSocket-mode
socket for its `store: false` responses, which die with it. It keeps the
promises of `base.py` within one process: a record is kept once `put` returns,
and nothing survives a restart.
"""

from __future__ import annotations

import asyncio
import secrets
import time
from collections import OrderedDict
from dataclasses import replace
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
    """Records in a dict in the order they were put (the sequence), bounded by age and
    bytes (`base.py`)."""

    def __init__(
        self,
        *,
        max_age_seconds: float = DEFAULT_MAX_AGE_SECONDS,
        max_bytes: int = DEFAULT_MAX_BYTES,
        clock: Any = time.time,
    ) -> None:
        self.max_age_seconds = max_age_seconds
        self.max_bytes = max_bytes
        self._clock = clock
        self._secret = secrets.token_bytes(32)
        #: by id, oldest first: the insertion order is the store's sequence
        self._records: OrderedDict[str, StoredResponse] = OrderedDict()
        #: id -> runner, for the records put with one (`unfinished`)
        self._runners: dict[str, str] = {}
        self.bytes = 0

    def owner(self, api_key: bytes | None) -> str | None:
        return fingerprint(self._secret, api_key)

    def __len__(self) -> int:
        return len(self._records)

    async def put(self, record: StoredResponse) -> None:
        record.size = await _measure(record)
        old = self._records.pop(record.id, None)  # a record put again is the newest
        if old is not None:
            self.bytes -= old.size
        self._records[record.id] = record
        self.bytes += record.size
        if record.runner is not None:
            self._runners[record.id] = record.runner
        else:
            self._runners.pop(record.id, None)
        self._prune()

    async def get(self, response_id: str, owner: str | None) -> StoredResponse | None:
        return self._find(response_id, owner)

    async def chain(self, response_id: str, owner: str | None, limit: int) -> Chain:
        return walk_chain(lambda rid: self._find(rid, owner), response_id, limit)

    async def delete(self, response_id: str, owner: str | None) -> bool:
        if self._find(response_id, owner) is None:
            return False
        self.bytes -= self._records.pop(response_id).size
        self._runners.pop(response_id, None)
        return True

    async def unfinished(self, runner: str) -> list[StoredResponse]:
        found = []
        for response_id, record in self._records.items():
            if self._runners.get(response_id) == runner and not self._expired(record):
                found.append(replace(record, runner=runner))
        return found

    async def close(self) -> None:
        self.clear()

    def clear(self) -> None:
        self._records.clear()
        self._runners.clear()
        self.bytes = 0

    def _find(self, response_id: str, owner: str | None) -> StoredResponse | None:
        found = self._records.get(response_id)
        if found is None or found.owner != owner or self._expired(found):
            return None
        return found

    def _expired(self, record: StoredResponse) -> bool:
        return bool(self.max_age_seconds) and (
            record.created_at < self._clock() - self.max_age_seconds
        )

    def _prune(self) -> None:
        """The oldest records go while over the byte limit (never the newest), and
        expired ones at the front."""
        records = self._records
        while len(records) > 1:
            oldest = next(iter(records.values()))
            if not ((self.max_bytes and self.bytes > self.max_bytes) or self._expired(oldest)):
                return
            records.popitem(last=False)
            self._runners.pop(oldest.id, None)
            self.bytes -= oldest.size


async def _measure(record: StoredResponse) -> int:
    """`len(record.encode())`, in a worker thread: a record may be megabytes (a long
    input), and measuring it on the event loop would stall every other client."""
    return len(await asyncio.to_thread(record.encode))
