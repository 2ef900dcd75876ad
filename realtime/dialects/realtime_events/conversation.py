"""The session's conversation: its items in order, as the server shows them.

Items are kept as the dicts the server sends (`conversation.item.added`,
`.retrieved`, `response.done`), so showing one costs nothing: an item is never
changed once complete, so `conversation.item.retrieve` sends the item itself,
whatever its size (no copy on the event loop). An item the model is still
writing is the very dict its response keeps filling; a retrieve sends a copy of
it as far as it got (one text part, or the arguments so far). The conversation
is bounded by item count, characters and bytes (`EventLimits`; each item's
content parts by `max_item_parts` when it is decoded), checked before an item
goes in.
"""

from __future__ import annotations

from typing import Any, NoReturn

from realtime.dialects.realtime_events.errors import (
    AudioNotSupportedError,
    ConversationFullError,
    DuplicateItemIdError,
    ItemNotFoundError,
)
from realtime.dialects.realtime_events.ids import new_call_id, new_item_id
from realtime.dialects.realtime_events.limits import (
    ITEM_OVERHEAD_BYTES,
    PART_OVERHEAD_BYTES,
    EventLimits,
)
from realtime.dialects.realtime_events.models import (
    AssistantMessageItem,
    FunctionCallItem,
    FunctionCallOutputItem,
    Item,
    SystemMessageItem,
    UserMessageItem,
)
from realtime.protocol.errors import InvalidRequestError

#: `previous_item_id` that puts an item first.
ROOT = "root"


def item_object(item: Item) -> dict[str, Any]:
    """The server's form of a client item: an id, `object`, `status` completed."""
    base: dict[str, Any] = {
        "id": item.id or new_item_id(),
        "object": "realtime.item",
        "type": item.type,
        "status": "completed",
    }
    if isinstance(item, UserMessageItem | SystemMessageItem):
        base["role"] = item.role
        base["content"] = [{"type": "input_text", "text": part.text} for part in item.content]
    elif isinstance(item, AssistantMessageItem):
        base["role"] = "assistant"
        base["content"] = [{"type": "output_text", "text": part.text} for part in item.content]
    elif isinstance(item, FunctionCallItem):
        base["call_id"] = item.call_id or new_call_id()
        base["name"] = item.name
        base["arguments"] = item.arguments
    else:
        assert isinstance(item, FunctionCallOutputItem)
        base["call_id"] = item.call_id
        base["output"] = item.output
    return base


def item_chars(item: dict[str, Any]) -> int:
    """The text an item holds, in characters (what the conversation limit counts)."""
    kind = item["type"]
    if kind == "message":
        return sum(len(part.get("text") or "") for part in item["content"])
    if kind == "function_call":
        return len(item["name"]) + len(item["arguments"])
    return len(item["output"])


def item_bytes(item: dict[str, Any]) -> int:
    """What an item counts against the byte limit: its strings in UTF-8, plus a fixed
    cost per item and per content part (`limits.py`)."""
    size = ITEM_OVERHEAD_BYTES + _utf8(item["id"])
    kind = item["type"]
    if kind == "message":
        for part in item["content"]:
            size += PART_OVERHEAD_BYTES + _utf8(part.get("text") or "")
    elif kind == "function_call":
        size += _utf8(item["call_id"]) + _utf8(item["name"]) + _utf8(item["arguments"])
    else:
        size += _utf8(item["call_id"]) + _utf8(item["output"])
    return size


def _utf8(text: str) -> int:
    return len(text) if text.isascii() else len(text.encode())


class Conversation:
    def __init__(self, limits: EventLimits):
        self.limits = limits
        self._order: list[str] = []
        self._items: dict[str, dict[str, Any]] = {}
        #: Characters and bytes of every settled item; one being written counts when it
        #: settles.
        self.chars = 0
        self.bytes = 0
        self._counted: dict[str, tuple[int, int]] = {}

    def __len__(self) -> int:
        return len(self._order)

    def items(self) -> list[dict[str, Any]]:
        return [self._items[item_id] for item_id in self._order]

    def get(self, item_id: str, param: str = "item_id") -> dict[str, Any]:
        item = self._items.get(item_id)
        if item is None:
            raise ItemNotFoundError(f"no item with id {item_id!r} in the conversation", param=param)
        return item

    def snapshot(self, item_id: str) -> dict[str, Any]:
        """The item as it is now, safe to send while its response goes on writing it: a
        complete item itself (never changed again), one being written a copy of its
        dict and parts (a few; not its strings)."""
        item = self.get(item_id)
        if item.get("status") != "in_progress":
            return item
        copied = dict(item)
        if "content" in copied:
            copied["content"] = [dict(part) for part in copied["content"]]
        return copied

    def check_room(self, chars: int, size: int = 0) -> None:
        """Refuse an item that would take the conversation past its limits."""
        if len(self._order) >= self.limits.max_items:
            raise ConversationFullError(
                f"the conversation holds {self.limits.max_items} items, this server's "
                "--realtime-max-items; delete some with conversation.item.delete",
                param="item",
            )
        if self.chars + chars > self.limits.max_conversation_chars:
            raise ConversationFullError(
                f"the conversation would hold more than {self.limits.max_conversation_chars} "
                "characters (this server's --realtime-max-conversation-chars); delete some items",
                param="item",
            )
        if self.bytes + size > self.limits.max_conversation_bytes:
            raise ConversationFullError(
                f"the conversation would hold more than {self.limits.max_conversation_bytes} "
                "bytes (this server's --realtime-max-conversation-bytes, counting each item "
                "and content part); delete some items",
                param="item",
            )

    def add(self, item: dict[str, Any], previous_item_id: str | None = None) -> str | None:
        """Insert `item` after `previous_item_id` (`root`: first; None: last).

        Returns the id of the item now before it (None when it is first)."""
        item_id = item["id"]
        if item_id in self._items:
            raise DuplicateItemIdError(
                f"an item with id {item_id!r} is already in the conversation", param="item.id"
            )
        settled = item.get("status") != "in_progress"
        chars = item_chars(item) if settled else 0
        size = item_bytes(item) if settled else 0
        self.check_room(chars, size)
        if previous_item_id is None:
            position = len(self._order)
        elif previous_item_id == ROOT:
            position = 0
        else:
            if previous_item_id not in self._items:
                raise ItemNotFoundError(
                    f"previous_item_id {previous_item_id!r} is not in the conversation",
                    param="previous_item_id",
                )
            position = self._order.index(previous_item_id) + 1
        self._order.insert(position, item_id)
        self._items[item_id] = item
        self._counted[item_id] = (chars, size)
        self.chars += chars
        self.bytes += size
        return self._order[position - 1] if position > 0 else None

    def settle(self, item_id: str) -> None:
        """An item the model finished writing: count its text now."""
        item = self._items.get(item_id)
        if item is None:
            return
        chars, size = item_chars(item), item_bytes(item)
        old_chars, old_size = self._counted[item_id]
        self.chars += chars - old_chars
        self.bytes += size - old_size
        self._counted[item_id] = (chars, size)

    def delete(self, item_id: str) -> str | None:
        """Remove an item; returns the id of the item before it (None: it was first),
        which now precedes the item that followed it."""
        self.get(item_id)
        position = self._order.index(item_id)
        previous = self._order[position - 1] if position > 0 else None
        self._order.pop(position)
        del self._items[item_id]
        chars, size = self._counted.pop(item_id)
        self.chars -= chars
        self.bytes -= size
        return previous

    def truncate(self, item_id: str, content_index: int) -> NoReturn:
        """Always refused: truncation cuts an assistant message's *audio*, which text mode has not.

        The item is looked up first, so a wrong id gets `item_not_found`."""
        item = self.get(item_id)
        if item["type"] != "message" or item.get("role") != "assistant":
            raise InvalidRequestError(
                "only assistant message items can be truncated", param="item_id"
            )
        if content_index >= len(item["content"]):
            raise InvalidRequestError(
                f"content_index {content_index} is past the item's content", param="content_index"
            )
        raise AudioNotSupportedError(
            "conversation.item.truncate cuts an assistant message's audio; this server has "
            "text only (delete the item, or create a shorter one, instead)",
            param="audio_end_ms",
        )
