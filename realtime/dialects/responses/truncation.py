"""`truncation: "auto"`: a conversation too long for the context loses its oldest turns.

OpenAI's rule: when the input exceeds the model's context window, items are dropped
from the beginning of the conversation until it fits. Here a conversation is cut
only where a turn starts, at a user message, so no tool output is left without
the call it answers and no assistant message without the question before it; the
system and developer messages at its head are always kept, and so is the last
user turn (if that alone does not fit, the request is refused as without
truncation: `context_length_exceeded`).

Which cut is the first that fits is found by bisection over the turns: the prompt
only shrinks as turns go, so `log2(turns)` renders of the chat template suffice,
each one the pipeline's own `prepare` (the exact tokens the engine will see, not
an estimate). The stored input items are not touched: truncation changes what the
model reads for this response, never what the conversation holds.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TypeVar

from realtime.protocol.conversation import Item, Message
from realtime.protocol.errors import PromptTooLongError

T = TypeVar("T")

#: Messages of these roles at a conversation's head are instructions, always kept.
_INSTRUCTION_ROLES = frozenset({"system", "developer"})


def turn_starts(conversation: tuple[Item, ...]) -> tuple[int, list[int]]:
    """The length of the instructions at the head, and the index of every user message
    after them (where a truncated conversation may start), oldest first."""
    roles = [item.role if isinstance(item, Message) else None for item in conversation]
    head = 0
    while head < len(roles) and roles[head] in _INSTRUCTION_ROLES:
        head += 1
    starts = [index for index in range(head, len(roles)) if roles[index] == "user"]
    return head, starts


async def fit_by_dropping_turns(
    conversation: tuple[Item, ...],
    attempt: Callable[[tuple[Item, ...]], Awaitable[T]],
    too_long: PromptTooLongError,
) -> tuple[T, int]:
    """`attempt(shorter)` for the longest tail of `conversation` (cut at a turn) that fits;
    returns its result and how many items were dropped. `attempt` raises
    PromptTooLongError when its conversation does not fit; `too_long` (the full
    conversation's error) is raised when not even the last turn does."""
    head, starts = turn_starts(conversation)
    cuts = [start for start in starts if start > head]  # cutting at `head` drops nothing
    best: tuple[T, int] | None = None
    low, high = 0, len(cuts) - 1
    while low <= high:
        middle = (low + high) // 2
        cut = cuts[middle]
        try:
            result = await attempt(conversation[:head] + conversation[cut:])
        except PromptTooLongError:
            low = middle + 1  # still too long: drop more
        else:
            best = (result, cut - head)
            high = middle - 1  # fits: try keeping more
    if best is None:
        raise too_long
    return best
