"""Limits on what one Realtime session may hold, checked before the work they bound.

They are `realtime serve` flags (`ServerConfig` fields with the same defaults).
A conversation lives as long as its socket, so without a bound it would grow
with every item a client creates; these keep one socket's memory bounded, in
items, characters, content parts and bytes (characters alone would let an item
of many empty parts cost far more than its text).
"""

from __future__ import annotations

from dataclasses import dataclass

#: Items in one session's conversation (`--realtime-max-items`).
DEFAULT_MAX_ITEMS = 1024
#: Characters of text in all of one conversation's items together
#: (`--realtime-max-conversation-chars`): message text, call arguments, call outputs.
DEFAULT_MAX_CONVERSATION_CHARS = 4 * 1024 * 1024
#: Bytes one session's conversation holds (`--realtime-max-conversation-bytes`): each
#: item's strings in UTF-8, plus `ITEM_OVERHEAD_BYTES` per item and
#: `PART_OVERHEAD_BYTES` per content part (what the server keeps for each beyond its
#: text), so an item of many empty parts costs what it occupies.
DEFAULT_MAX_CONVERSATION_BYTES = 16 * 1024 * 1024
#: Content parts in one item (`--realtime-max-item-parts`), checked before the item is
#: validated.
DEFAULT_MAX_ITEM_PARTS = 64
#: What one item and one content part are counted as, beyond their strings' bytes: at
#: least what CPython keeps for them (a dict and its slots, a list entry, the id).
ITEM_OVERHEAD_BYTES = 1024
PART_OVERHEAD_BYTES = 256
#: Function tools in a session or response (`--realtime-max-tools`).
DEFAULT_MAX_TOOLS = 128


@dataclass(frozen=True, slots=True)
class EventLimits:
    max_items: int = DEFAULT_MAX_ITEMS
    max_conversation_chars: int = DEFAULT_MAX_CONVERSATION_CHARS
    max_conversation_bytes: int = DEFAULT_MAX_CONVERSATION_BYTES
    max_item_parts: int = DEFAULT_MAX_ITEM_PARTS
    max_tools: int = DEFAULT_MAX_TOOLS
    #: Responses running at once on one socket (`--max-concurrent`).
    max_active_responses: int = 16


DEFAULT_EVENT_LIMITS = EventLimits()
