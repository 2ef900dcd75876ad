"""Stored responses in memory: the store without a directory, and a socket's own.

Used when no `--response-store` directory is configured, and by a WebSocket-mode
socket for its `store: false` responses, which die with it. It keeps the
promises of `base.py` within one process: a record is kept once `put` returns,
and nothing survives a restart. Conversations (`conversations.py`) are kept
here too, in the same order and byte budget as the responses.
"""

from __future__ import annotations

import asyncio
import secrets
import time
from collections import OrderedDict
from dataclasses import dataclass, field, replace
from typing import Any

from realtime.store.base import (
    DEFAULT_MAX_AGE_SECONDS,
    DEFAULT_MAX_BYTES,
    Chain,
    StoredResponse,
    fingerprint,
    walk_chain,
)
from realtime.store.conversations import (
    ConversationItems,
    DuplicateItemError,
    ItemPage,
    StoredConversation,
    encode_item,
    page_of,
)

#: Keys of `MemoryResponseStore._order`: ("r", response id) or ("c", conversation id).
_RESPONSE, _CONVERSATION = "r", "c"


@dataclass(slots=True)
class _Conversation:
    header: StoredConversation
    #: by id, oldest first
    items: OrderedDict[str, dict[str, Any]] = field(default_factory=OrderedDict)
    sizes: dict[str, int] = field(default_factory=dict)


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
        self._conversations: dict[str, _Conversation] = {}
        #: responses and conversations, oldest write first: the store's sequence
        self._order: OrderedDict[tuple[str, str], None] = OrderedDict()
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
        self._order.pop((_RESPONSE, record.id), None)
        self._order[(_RESPONSE, record.id)] = None
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
        self._order.pop((_RESPONSE, response_id), None)
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
        self._conversations.clear()
        self._order.clear()
        self.bytes = 0

    def _find(self, response_id: str, owner: str | None) -> StoredResponse | None:
        found = self._records.get(response_id)
        if found is None or found.owner != owner or self._expired(found):
            return None
        return found

    def _expired(self, record: StoredResponse | StoredConversation) -> bool:
        at = record.updated_at if isinstance(record, StoredConversation) else record.created_at
        return bool(self.max_age_seconds) and (at < self._clock() - self.max_age_seconds)

    def _prune(self) -> None:
        """The oldest records and conversations go while over the byte limit (never the
        newest), and expired ones at the front."""
        order = self._order
        while len(order) > 1:
            kind, key = next(iter(order))
            oldest: StoredResponse | StoredConversation
            if kind == _RESPONSE:
                oldest = self._records[key]
            else:
                oldest = self._conversations[key].header
            if not ((self.max_bytes and self.bytes > self.max_bytes) or self._expired(oldest)):
                return
            order.popitem(last=False)
            if kind == _RESPONSE:
                del self._records[key]
                self._runners.pop(key, None)
            else:
                del self._conversations[key]
            self.bytes -= oldest.size

    # --- conversations ---

    async def create_conversation(
        self, conversation: StoredConversation, items: list[dict[str, Any]]
    ) -> None:
        kept = _Conversation(conversation)
        conversation.size = len(conversation.encode())
        sizes = await _item_sizes(items)
        _check_new_ids(kept, items)
        self._conversations[conversation.id] = kept
        self.bytes += conversation.size
        self._keep(kept, items, sizes)

    async def get_conversation(
        self, conversation_id: str, owner: str | None
    ) -> StoredConversation | None:
        found = self._conversation(conversation_id, owner)
        return found.header if found is not None else None

    async def update_conversation(
        self, conversation_id: str, owner: str | None, metadata: dict[str, str]
    ) -> StoredConversation | None:
        found = self._conversation(conversation_id, owner)
        if found is None:
            return None
        header = found.header
        header.metadata = dict(metadata)
        old, header.size = header.size, len(header.encode()) + sum(found.sizes.values())
        self.bytes += header.size - old
        self._written(found)
        return header

    async def delete_conversation(self, conversation_id: str, owner: str | None) -> bool:
        found = self._conversation(conversation_id, owner)
        if found is None:
            return False
        del self._conversations[conversation_id]
        self._order.pop((_CONVERSATION, conversation_id), None)
        self.bytes -= found.header.size
        return True

    async def append_items(
        self, conversation_id: str, owner: str | None, items: list[dict[str, Any]]
    ) -> StoredConversation | None:
        sizes = await _item_sizes(items)
        found = self._conversation(conversation_id, owner)
        if found is None:
            return None
        _check_new_ids(found, items)
        self._keep(found, items, sizes)
        return found.header

    async def conversation_items(
        self, conversation_id: str, owner: str | None, limit: int
    ) -> ConversationItems | None:
        found = self._conversation(conversation_id, owner)
        if found is None:
            return None
        if len(found.items) > limit:
            return ConversationItems(found.header, truncated=True)
        return ConversationItems(found.header, list(found.items.values()))

    async def list_items(
        self,
        conversation_id: str,
        owner: str | None,
        *,
        after: str | None,
        limit: int,
        order: str,
    ) -> ItemPage | None:
        found = self._conversation(conversation_id, owner)
        if found is None:
            return None
        return page_of(list(found.items.values()), after=after, limit=limit, order=order)

    async def get_item(
        self, conversation_id: str, owner: str | None, item_id: str
    ) -> dict[str, Any] | None:
        found = self._conversation(conversation_id, owner)
        return found.items.get(item_id) if found is not None else None

    async def delete_item(self, conversation_id: str, owner: str | None, item_id: str) -> bool:
        found = self._conversation(conversation_id, owner)
        if found is None or item_id not in found.items:
            return False
        del found.items[item_id]
        size = found.sizes.pop(item_id)
        found.header.size -= size
        found.header.items -= 1
        self.bytes -= size
        self._written(found)
        return True

    def _conversation(self, conversation_id: str, owner: str | None) -> _Conversation | None:
        found = self._conversations.get(conversation_id)
        if found is None or found.header.owner != owner or self._expired(found.header):
            return None
        return found

    def _keep(self, kept: _Conversation, items: list[dict[str, Any]], sizes: list[int]) -> None:
        for item, size in zip(items, sizes, strict=True):
            kept.items[item["id"]] = item
            kept.sizes[item["id"]] = size
        kept.header.size += sum(sizes)
        kept.header.items = len(kept.items)
        self.bytes += sum(sizes)
        self._written(kept)

    def _written(self, kept: _Conversation) -> None:
        """A write: the conversation is the newest, and its age starts again."""
        kept.header.updated_at = self._clock()
        key = (_CONVERSATION, kept.header.id)
        self._order.pop(key, None)
        self._order[key] = None
        self._prune()


def _check_new_ids(kept: _Conversation, items: list[dict[str, Any]]) -> None:
    seen = set(kept.items)
    for item in items:
        if item["id"] in seen:
            raise DuplicateItemError(item["id"])
        seen.add(item["id"])


async def _item_sizes(items: list[dict[str, Any]]) -> list[int]:
    """Each item's encoded length, in a worker thread (an item may be large)."""
    return await asyncio.to_thread(lambda: [len(encode_item(item)) for item in items])


async def _measure(record: StoredResponse) -> int:
    """`len(record.encode())`, in a worker thread: a record may be megabytes (a long
    input), and measuring it on the event loop would stall every other client."""
    return len(await asyncio.to_thread(record.encode))
