"""Limits on what one Realtime session may hold, checked before the work they bound.

They are `realtime serve` flags (`ServerConfig` fields with the same defaults).
A conversation lives as long as its socket, so without a bound it would grow
with every item a client creates; these keep one socket's memory bounded.
"""

from __future__ import annotations

from dataclasses import dataclass

#: Items in one session's conversation (`--realtime-max-items`).
DEFAULT_MAX_ITEMS = 1024
#: Characters of text in all of one conversation's items together
#: (`--realtime-max-conversation-chars`): message text, call arguments, call outputs.
DEFAULT_MAX_CONVERSATION_CHARS = 4 * 1024 * 1024
#: Function tools in a session or response (`--realtime-max-tools`).
DEFAULT_MAX_TOOLS = 128


@dataclass(frozen=True, slots=True)
class EventLimits:
    max_items: int = DEFAULT_MAX_ITEMS
    max_conversation_chars: int = DEFAULT_MAX_CONVERSATION_CHARS
    max_tools: int = DEFAULT_MAX_TOOLS
    #: Responses running at once on one socket (`--max-concurrent`).
    max_active_responses: int = 16


DEFAULT_EVENT_LIMITS = EventLimits()
