"""Where responses are kept: the interface, the record, and the chain walk both stores share.

`ResponseStore` is the small interface the Responses API needs, so a shared
store (a database several replicas use) can replace the embedded ones:

* `SQLiteResponseStore` (`sqlite.py`): `store: true` responses, on disk
  under `--response-store DIR`, kept across restarts;
* `MemoryResponseStore` (`memory.py`): the same, in memory (no directory configured),
  and the per-connection map of `store: false` responses a socket owns.

A record is one response (the final `Response` object) and its own input items;
a conversation is rebuilt by following `previous_response_id` from record to
record (`chain`). Every read is by owner: when API keys are configured a record
belongs to the key that created it (an HMAC of the key, never the key), and
another key finds nothing, exactly as if the id did not exist.

Retention is bounded by age and by bytes; the oldest records go first.
"""

from __future__ import annotations

import hashlib
import hmac
from dataclasses import dataclass, field
from typing import Any, Protocol

import orjson

#: OpenAI keeps stored responses for at least 30 days.
DEFAULT_MAX_AGE_SECONDS = 30 * 24 * 3600.0
#: Bytes of stored responses (their JSON) before the oldest are dropped.
DEFAULT_MAX_BYTES = 1024 * 1024 * 1024


@dataclass(slots=True)
class StoredResponse:
    id: str
    #: The creating key's fingerprint (`ResponseStore.owner`); None on an open server.
    owner: str | None
    created_at: float
    previous_response_id: str | None
    #: The final `Response` object, as returned to the client. Read-only.
    response: dict[str, Any]
    #: This response's own input items in normal form (`items.py`), oldest first.
    input_items: list[dict[str, Any]]

    def encode(self) -> bytes:
        return orjson.dumps({"response": self.response, "input_items": self.input_items})


@dataclass(slots=True)
class Chain:
    """Records found from one id backwards (newest first), and where the walk stopped.

    `missing` is the id the walk could not find (None: the chain reached a
    response that continues nothing). `truncated`: the walk stopped at its limit.
    """

    records: list[StoredResponse] = field(default_factory=list)
    missing: str | None = None
    truncated: bool = False


class ResponseStore(Protocol):
    """What the Responses API needs from a store. Reads never see other owners' records.

    Every operation on records is awaited, and there is no synchronous twin of any:
    the callers (the Responses run, WebSocket mode's job) await them before or
    after the work they belong to, so a store reached over the network fits."""

    def owner(self, api_key: bytes | None) -> str | None:
        """The owner fingerprint of `api_key` (None for none): stable across restarts of a
        persistent store, never the key itself."""
        ...

    async def put(self, record: StoredResponse) -> None:
        """Keep `record`. Visible to `get` and `chain` as soon as this returns."""
        ...

    async def get(self, response_id: str, owner: str | None) -> StoredResponse | None: ...

    async def chain(self, response_id: str, owner: str | None, limit: int) -> Chain:
        """`response_id`'s record and its predecessors, newest first, at most `limit`."""
        ...

    async def delete(self, response_id: str, owner: str | None) -> bool: ...

    async def close(self) -> None:
        """Finish pending writes and release the store."""
        ...


def fingerprint(secret: bytes, api_key: bytes | None) -> str | None:
    """HMAC-SHA256 of the key under the store's secret: 128 bits, hex."""
    if api_key is None:
        return None
    return hmac.new(secret, api_key, hashlib.sha256).hexdigest()[:32]


def walk_chain(get: Any, response_id: str, limit: int) -> Chain:
    """Follow `previous_response_id` from `response_id` with `get(id) -> record | None`."""
    chain = Chain()
    next_id: str | None = response_id
    while next_id is not None:
        if len(chain.records) >= limit:
            chain.truncated = True
            return chain
        record = get(next_id)
        if record is None:
            chain.missing = next_id
            return chain
        chain.records.append(record)
        next_id = record.previous_response_id
    return chain
