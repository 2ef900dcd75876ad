"""The Conversations API, transport-free: conversations and their items, in the store.

    POST   /v1/conversations                    create (`items`, `metadata`)
    GET    /v1/conversations/{id}               the `conversation` object
    POST   /v1/conversations/{id}               replace its metadata
    DELETE /v1/conversations/{id}               `conversation.deleted`
    GET    /v1/conversations/{id}/items         a page of its items (`after`, `limit`, `order`)
    POST   /v1/conversations/{id}/items         add up to 20 items (`items`)
    GET    /v1/conversations/{id}/items/{item}  one item
    DELETE /v1/conversations/{id}/items/{item}  forget one item; the conversation

A response created with `conversation` (`ResponsesService`) reads the
conversation's items as the context before its input (`context`), and appends
its input and output items when it ends (`append`), before its terminal event.

Items are input items in normal form (`items.py`: validated one at a time, strict,
ids given when missing); ids are unique within a conversation (an item whose id
is already there is a 400 `duplicate_item_id`). Limits, checked before any work:
`--conversation-max-items-per-call` items per create (OpenAI's 20), the body's
JSON limits for each item (as `input`), OpenAI's metadata limits (16 pairs, keys
of 64 characters, values of 512), and `--conversation-max-items`: a conversation
holding more items is refused as a context (400), before its items are read.

Conversations belong to the key that created them, as stored responses do: an
id another key made is answered exactly as an unknown one (404
`conversation_not_found`).
"""

from __future__ import annotations

import functools
import time
from collections.abc import Awaitable
from dataclasses import dataclass
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, ValidationError

from realtime.dialects.responses import ids
from realtime.dialects.responses.errors import (
    ConversationItemNotFoundError,
    ConversationNotFoundError,
    StoreUnavailableError,
)
from realtime.dialects.responses.items import normalize_input
from realtime.dialects.responses.request import check_metadata
from realtime.dialects.responses.validation import client_error
from realtime.pipeline.offload import off_loop
from realtime.protocol.errors import InvalidRequestError
from realtime.store.base import ResponseStore, StoredResponse, StoreError
from realtime.store.conversations import DuplicateItemError, StoredConversation

T = TypeVar("T")

#: Items one `conversations.create` or `items.create` may add (OpenAI's 20).
DEFAULT_MAX_ITEMS_PER_CALL = 20
#: Items a conversation may hold and still be rebuilt as a response's context.
DEFAULT_MAX_CONVERSATION_ITEMS = 100_000
#: `GET .../items`: `limit`'s default and maximum, as OpenAI's.
DEFAULT_LIST_LIMIT = 20
MAX_LIST_LIMIT = 100


@dataclass(frozen=True, slots=True)
class ConversationLimits:
    max_items_per_call: int = DEFAULT_MAX_ITEMS_PER_CALL
    max_items: int = DEFAULT_MAX_CONVERSATION_ITEMS


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class ConversationCreateRequest(_Strict):
    """`POST /v1/conversations`: its first items (input items, at most 20) and metadata."""

    items: list[Any] | None = None
    metadata: dict[str, str] | None = None


class ConversationUpdateRequest(_Strict):
    """`POST /v1/conversations/{id}`: the new metadata (null: none)."""

    metadata: dict[str, str] | None


class ConversationItemsRequest(_Strict):
    """`POST /v1/conversations/{id}/items`: the items to add (at most 20)."""

    items: list[Any]


class Conversations:
    """The conversations of one store (the server's response store)."""

    def __init__(self, store: ResponseStore, limits: ConversationLimits | None = None):
        self.store = store
        self.limits = limits or ConversationLimits()

    # --- conversations ---

    async def create(self, data: Any, owner: str | None, size: int = 0) -> dict[str, Any]:
        body = _parse(ConversationCreateRequest, data)
        check_metadata(body.metadata)
        items = await self._items(body.items, size)
        conversation = StoredConversation(
            id=ids.new_id("conv"), owner=owner, created_at=time.time(), metadata=body.metadata or {}
        )
        await _writing(self.store.create_conversation(conversation, items), items)
        return conversation.as_object()

    async def retrieve(self, conversation_id: str, owner: str | None) -> dict[str, Any]:
        return (await self._find(conversation_id, owner)).as_object()

    async def update(self, conversation_id: str, data: Any, owner: str | None) -> dict[str, Any]:
        body = _parse(ConversationUpdateRequest, data)
        check_metadata(body.metadata)
        found = await _reading(
            self.store.update_conversation(conversation_id, owner, body.metadata or {})
        )
        if found is None:
            raise ConversationNotFoundError(conversation_id)
        return found.as_object()

    async def delete(self, conversation_id: str, owner: str | None) -> dict[str, Any]:
        if not await _reading(self.store.delete_conversation(conversation_id, owner)):
            raise ConversationNotFoundError(conversation_id)
        return {"id": conversation_id, "object": "conversation.deleted", "deleted": True}

    # --- items ---

    async def create_items(
        self, conversation_id: str, data: Any, owner: str | None, size: int = 0
    ) -> dict[str, Any]:
        """The items added, as a list object (in the order given)."""
        body = _parse(ConversationItemsRequest, data)
        await self._find(conversation_id, owner)  # a 404 before the items are validated
        items = await self._items(body.items, size)
        found = await _writing(self.store.append_items(conversation_id, owner, items), items)
        if found is None:
            raise ConversationNotFoundError(conversation_id)
        return {
            "object": "list",
            "data": items,
            "first_id": items[0]["id"] if items else None,
            "last_id": items[-1]["id"] if items else None,
            "has_more": False,
        }

    async def list_items(
        self,
        conversation_id: str,
        owner: str | None,
        *,
        after: str | None = None,
        limit: int = DEFAULT_LIST_LIMIT,
        order: str = "desc",
    ) -> dict[str, Any]:
        page = await _reading(
            self.store.list_items(conversation_id, owner, after=after, limit=limit, order=order)
        )
        if page is None:
            raise ConversationNotFoundError(conversation_id)
        if page.after_missing:
            raise InvalidRequestError(
                f"after: no item with id '{after}' in conversation '{conversation_id}'",
                param="after",
            )
        return page.as_list()

    async def retrieve_item(
        self, conversation_id: str, item_id: str, owner: str | None
    ) -> dict[str, Any]:
        await self._find(conversation_id, owner)
        item = await _reading(self.store.get_item(conversation_id, owner, item_id))
        if item is None:
            raise ConversationItemNotFoundError(conversation_id, item_id)
        return item

    async def delete_item(
        self, conversation_id: str, item_id: str, owner: str | None
    ) -> dict[str, Any]:
        """The conversation, as OpenAI answers an item's deletion."""
        await self._find(conversation_id, owner)
        if not await _reading(self.store.delete_item(conversation_id, owner, item_id)):
            raise ConversationItemNotFoundError(conversation_id, item_id)
        return (await self._find(conversation_id, owner)).as_object()

    # --- a response's conversation ---

    async def context(self, conversation_id: str, owner: str | None) -> StoredResponse:
        """The conversation's items as one record (its input items, no output), for
        `ResponsesService` to rebuild a context from as it does a chain: `size` tells it
        whether to do so off the event loop. Its item count is checked before any item is
        read."""
        found = await _reading(
            self.store.conversation_items(conversation_id, owner, self.limits.max_items)
        )
        if found is None:
            raise ConversationNotFoundError(conversation_id, param="conversation")
        header = found.conversation
        if found.truncated:
            raise InvalidRequestError(
                f"conversation '{conversation_id}' holds {header.items} items, more than this"
                f" server rebuilds a context from ({self.limits.max_items},"
                " --conversation-max-items)",
                param="conversation",
                code="conversation_too_long",
            )
        return StoredResponse(
            id=conversation_id,
            owner=owner,
            created_at=header.created_at,
            previous_response_id=None,
            response={"output": []},
            input_items=found.items,
            size=header.size,
        )

    async def append(
        self, conversation_id: str, owner: str | None, items: list[dict[str, Any]]
    ) -> None:
        """A response's input and output items, at the conversation's end (durable on
        return). Raises StoreUnavailableError, ConversationNotFoundError (deleted while the
        response ran) or a 400 `duplicate_item_id` (an id another response added meanwhile)."""
        found = await _writing(self.store.append_items(conversation_id, owner, items), items)
        if found is None:
            raise ConversationNotFoundError(conversation_id, param="conversation")

    # --- helpers ---

    async def _find(self, conversation_id: str, owner: str | None) -> StoredConversation:
        found = await _reading(self.store.get_conversation(conversation_id, owner))
        if found is None:
            raise ConversationNotFoundError(conversation_id)
        return found

    async def _items(self, raw: list[Any] | None, size: int) -> list[dict[str, Any]]:
        """`items` validated into normal form: their count first, then each (in a worker
        thread when the body is large)."""
        if raw is None:
            return []
        limit = self.limits.max_items_per_call
        if len(raw) > limit:
            raise InvalidRequestError(
                f"items: at most {limit} items may be added at a time"
                f" (--conversation-max-items-per-call), got {len(raw)}",
                param="items",
                code="too_many_items",
            )
        return await off_loop(functools.partial(normalize_input, raw, "items"), size)


def _parse(model: type[T], data: Any) -> T:
    if not isinstance(data, dict):
        raise InvalidRequestError("the request body must be a JSON object")
    try:
        parsed: T = model.model_validate(data)  # type: ignore[attr-defined]
    except ValidationError as exc:
        raise client_error(exc) from None
    return parsed


async def _reading(operation: Awaitable[T]) -> T:
    """A store operation, its `StoreError` as the client's 503."""
    try:
        return await operation
    except StoreError as exc:
        raise StoreUnavailableError(str(exc)) from None


async def _writing(operation: Awaitable[T], items: list[dict[str, Any]]) -> T:
    """A store write; an item id already in the conversation is the client's 400."""
    try:
        return await _reading(operation)
    except DuplicateItemError as exc:
        index = next((i for i, item in enumerate(items) if item["id"] == exc.item_id), 0)
        raise InvalidRequestError(
            f"Duplicate item id {exc.item_id!r}: the conversation already has an item with"
            " this id; item ids must be unique within a conversation",
            param=f"items.{index}.id",
            code="duplicate_item_id",
        ) from None
