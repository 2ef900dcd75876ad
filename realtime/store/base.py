"""Where responses are kept: the interface, its semantics, the record, the chain walk.

`ResponseStore` is the small interface the Responses API needs, so a shared
store (a database several replicas use) can replace the embedded ones:

* `SQLiteResponseStore` (`sqlite.py`): `store: true` responses, on disk
  under `--response-store DIR`, kept across restarts;
* `MemoryResponseStore` (`memory.py`): the same, in memory (no directory configured),
  and the per-connection map of `store: false` responses a socket owns.

A record is one response (the final `Response` object) and its own input items;
a conversation is rebuilt by following `previous_response_id` from record to
record (`chain`).

What every implementation promises (`tests/store/test_store.py` checks each one
against the same suite; a new store joins its fixture):

* **Durable on return.** `put` returns only once the record is kept as far as the
  store can keep anything: committed to its file (SQLite: a crash of the process,
  kill -9 included, loses nothing `put` returned for) or its database (a networked
  store), or in memory (the memory store: nothing survives a restart). The
  Responses API stores a response before it sends the terminal event or the 200,
  so what a client was told is stored is stored. A record `put` could not keep
  raises `StoreError`, and the response is not acknowledged.
* **Bounded writes.** At most a fixed number of writes wait at once; further `put`s
  wait for room (backpressure onto the responses that make them), never queue
  without bound.
* **Visible on return.** After `put` returns, `get` and `chain` find the record,
  on any connection to the store.
* **Owners.** Every read is by owner: when API keys are configured a record
  belongs to the key that created it (an HMAC of the key, never the key; `owner`),
  and another key finds nothing, exactly as if the id did not exist.
* **Order.** Each `put` gives its record the store's next sequence number (a
  record put again takes a new one); "oldest" means lowest sequence number, never
  a timestamp, so two records made in the same second keep their order.
* **Age.** A record is found while `created_at >= now - max_age_seconds` (0: no
  age limit), `created_at` being the precise time the response was created; one
  older is never returned, and is deleted at some point after.
* **Bytes.** A record's size is the length of `encode()`. After each `put` the
  oldest records are deleted while the records' sizes sum to more than
  `max_bytes` (0: no limit), except the record just put: the newest record is
  always kept, even alone over the limit. So a record is deleted for bytes only
  when the records newer than it fill the limit, and never before its age limit
  for any other reason.
* **Deletes** are by owner and take effect at once.
* **Runners.** A record put with `runner` set is a background response that server
  (`runner`: its stable id) has not finished; `unfinished(runner)` lists exactly
  those of that runner, any owner, oldest first, and a record put again without
  `runner` (it ended) leaves the list. So a server that restarts finds, and fails,
  only the background responses it was running itself, even when several replicas
  share the store.

Conversations (`conversations.py`) are kept by the same stores under the same
promises: durable and visible on return, by owner, in the same sequence, and in
the same byte budget; their age counts from their last write.
"""

from __future__ import annotations

import hashlib
import hmac
from dataclasses import dataclass, field
from typing import Any, Protocol

import orjson

from realtime.store.conversations import (
    ConversationItems,
    ItemPage,
    StoredConversation,
)

#: OpenAI keeps stored responses for at least 30 days.
DEFAULT_MAX_AGE_SECONDS = 30 * 24 * 3600.0
#: Bytes of stored responses (their JSON) before the oldest are dropped.
DEFAULT_MAX_BYTES = 1024 * 1024 * 1024
#: Writes a store runs or queues at once; a further `put` waits for one to finish.
MAX_PENDING_WRITES = 32


class StoreError(Exception):
    """A record could not be kept or read (the disk, the database): the store's one
    exception. The Responses API answers it as a retryable 503 and acknowledges
    nothing it could not store."""


@dataclass(slots=True)
class StoredResponse:
    id: str
    #: The creating key's fingerprint (`ResponseStore.owner`); None on an open server.
    owner: str | None
    #: When the response was created, in seconds (`time.time()`, not rounded): the age
    #: limit counts from here. The Response's own `created_at` is this, whole.
    created_at: float
    previous_response_id: str | None
    #: The final `Response` object, as returned to the client. Read-only.
    response: dict[str, Any]
    #: This response's own input items in normal form (`items.py`), oldest first.
    input_items: list[dict[str, Any]]
    #: Bytes of `encode()`, as the store counts them (set by the store on `put` and on
    #: every read; 0 on a record not yet put). Readers use it to decide, before any
    #: work, whether rebuilding a conversation is large.
    size: int = 0
    #: The id of the server running this background response while it is unfinished
    #: (`queued` or `in_progress`); None otherwise. Not part of `encode()`: the store
    #: keeps it beside the record, for `unfinished`.
    runner: str | None = None

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
        """Keep `record` (durable, visible and ordered as the module says) and set its
        `size`; waits for room when writes are pending. Raises StoreError."""
        ...

    async def get(self, response_id: str, owner: str | None) -> StoredResponse | None:
        """The record (None: no such id for this owner, or expired). Raises StoreError."""
        ...

    async def chain(self, response_id: str, owner: str | None, limit: int) -> Chain:
        """`response_id`'s record and its predecessors, newest first, at most `limit`.
        Raises StoreError."""
        ...

    async def delete(self, response_id: str, owner: str | None) -> bool:
        """Forget the record; False when this owner has no such record."""
        ...

    async def unfinished(self, runner: str) -> list[StoredResponse]:
        """The records last put with this `runner` (background responses it had not
        finished), any owner, oldest first, each with its `runner` set. Raises StoreError."""
        ...

    async def close(self) -> None:
        """Finish pending writes (each `put` still waiting completes) and release the store."""
        ...

    # --- conversations (`conversations.py`); each write is durable on return ---

    async def create_conversation(
        self, conversation: StoredConversation, items: list[dict[str, Any]]
    ) -> None:
        """Keep a new conversation with its first items; sets its `size`, `items` and
        `updated_at`. Raises StoreError."""
        ...

    async def get_conversation(
        self, conversation_id: str, owner: str | None
    ) -> StoredConversation | None:
        """The conversation's header (None: no such id for this owner, or expired)."""
        ...

    async def update_conversation(
        self, conversation_id: str, owner: str | None, metadata: dict[str, str]
    ) -> StoredConversation | None:
        """Replace its metadata; the updated header (None: not found)."""
        ...

    async def delete_conversation(self, conversation_id: str, owner: str | None) -> bool:
        """Forget the conversation and its items; False when this owner has none."""
        ...

    async def append_items(
        self, conversation_id: str, owner: str | None, items: list[dict[str, Any]]
    ) -> StoredConversation | None:
        """Add `items` at the end, all or none; the updated header (None: not found).
        Raises DuplicateItemError when an item's id is already in it."""
        ...

    async def conversation_items(
        self, conversation_id: str, owner: str | None, limit: int
    ) -> ConversationItems | None:
        """Every item, oldest first, unless there are more than `limit` (`truncated`, no
        items). None: not found."""
        ...

    async def list_items(
        self,
        conversation_id: str,
        owner: str | None,
        *,
        after: str | None,
        limit: int,
        order: str,
    ) -> ItemPage | None:
        """A page of items (`order` "asc": oldest first), after the item `after`."""
        ...

    async def get_item(
        self, conversation_id: str, owner: str | None, item_id: str
    ) -> dict[str, Any] | None:
        """One item (None: no such conversation or item)."""
        ...

    async def delete_item(self, conversation_id: str, owner: str | None, item_id: str) -> bool:
        """Forget one item; False when there is no such conversation or item."""
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
