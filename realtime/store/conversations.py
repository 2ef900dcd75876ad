"""Conversations in the response store: their record, their items' pages, their rules.

A conversation (`POST /v1/conversations`) is a header (id, owner, metadata) and
an ordered list of items (the normal form of `realtime.dialects.responses.items`,
each with an id unique within the conversation). Items are appended (a
response's input and output, `items.create`) and deleted one at a time; every
store keeps one row per item, so an append writes only what it adds.

The store's promises (`base.py`) hold for conversations as for responses:

* **Durable and visible on return**: every write (create, append, update, delete)
  returns once committed; a read on any connection sees it.
* **Owners**: a conversation belongs to the key that created it; another key
  finds nothing, exactly as if the id did not exist.
* **Order**: every write to a conversation gives it the store's next sequence
  number (shared with responses), so "oldest" means the conversation written to
  least recently.
* **Age**: a conversation is found while `updated_at >= now - max_age_seconds`:
  the age counts from its last write (its creation, an append, a metadata
  update), so a conversation in use does not expire under its user; one left
  alone that long is never returned, and is deleted (with its items) after.
* **Bytes**: a conversation's size is the sum of its header's and its items'
  encoded sizes, and counts in the same `max_bytes` as the responses. After a
  write over the limit, the oldest records (responses and whole conversations,
  by sequence) but the one just written are deleted until the rest fit.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import orjson


class DuplicateItemError(Exception):
    """An appended item's id is already in the conversation (a client's own id given twice,
    or two responses racing with one id); nothing of the append was kept."""

    def __init__(self, item_id: str) -> None:
        super().__init__(item_id)
        self.item_id = item_id


@dataclass(slots=True)
class StoredConversation:
    id: str
    #: The creating key's fingerprint (`ResponseStore.owner`); None on an open server.
    owner: str | None
    #: When it was created, precise (`time.time()`); the object shows it whole.
    created_at: float
    metadata: dict[str, str] = field(default_factory=dict)
    #: Its last write: the age limit counts from here (set by the store on each write).
    updated_at: float = 0.0
    #: Bytes of its header and items, as the store counts them (set by the store).
    size: int = 0
    #: Items it holds (set by the store).
    items: int = 0

    def encode(self) -> bytes:
        """The header's bytes (what its size counts besides its items)."""
        return orjson.dumps({"metadata": self.metadata})

    def as_object(self) -> dict[str, Any]:
        """OpenAI's `conversation` object."""
        return {
            "id": self.id,
            "object": "conversation",
            "created_at": int(self.created_at),
            "metadata": dict(self.metadata),
        }


@dataclass(slots=True)
class ConversationItems:
    """A conversation's items for a context, oldest first, and their bytes; `truncated`:
    it holds more than the limit asked for (none are returned then)."""

    conversation: StoredConversation
    items: list[dict[str, Any]] = field(default_factory=list)
    truncated: bool = False


@dataclass(slots=True)
class ItemPage:
    """One page of a conversation's items. `after_missing`: the `after` id is not an item
    of the conversation (the page is empty then)."""

    items: list[dict[str, Any]]
    has_more: bool
    after_missing: bool = False

    def as_list(self) -> dict[str, Any]:
        """OpenAI's list object."""
        return {
            "object": "list",
            "data": self.items,
            "first_id": self.items[0]["id"] if self.items else None,
            "last_id": self.items[-1]["id"] if self.items else None,
            "has_more": self.has_more,
        }


def encode_item(item: dict[str, Any]) -> bytes:
    return orjson.dumps(item)


def page_of(items: list[dict[str, Any]], *, after: str | None, limit: int, order: str) -> ItemPage:
    """A page from a whole list of items, oldest first (the memory store's; the database
    stores page with one query)."""
    ordered = list(reversed(items)) if order == "desc" else items
    start = 0
    if after is not None:
        positions = [i for i, item in enumerate(ordered) if item["id"] == after]
        if not positions:
            return ItemPage([], False, after_missing=True)
        start = positions[0] + 1
    page = ordered[start : start + limit]
    return ItemPage(list(page), len(ordered) > start + limit)
