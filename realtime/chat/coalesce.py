"""Folding one streamed chunk into the one before it, when the reader is behind.

A WebSocket whose client reads slower than the engine produces holds chunks that
have not been sent yet. Sending them one by one costs a frame (and a system call)
each and makes the backlog longer; folding consecutive text deltas of one request
into one chunk costs nothing the client can see: OpenAI chunk boundaries carry no
meaning, and concatenating the deltas gives the same text, the same logprobs in
the same order and the same final usage.

Only plain text deltas fold (`content`, or `reasoning_content`): a chunk with a
finish reason, a tool call, a role change, usage of its own, or anything unusual
stays a frame of its own, so every event a client may act on keeps its place.
"""

from __future__ import annotations

from typing import Any

_TEXT_KEYS = ("content", "reasoning_content")


def fold_chunk(earlier: dict[str, Any], later: dict[str, Any]) -> bool:
    """Append `later`'s text to `earlier` (in place) if both are plain text deltas of
    the same completion; True when folded, False (nothing changed) otherwise."""
    if earlier.keys() != later.keys() or earlier.get("id") != later.get("id"):
        return False
    if later.get("object") != "chat.completion.chunk":
        return False
    earlier_choices, later_choices = earlier.get("choices"), later.get("choices")
    if not (
        isinstance(earlier_choices, list)
        and isinstance(later_choices, list)
        and len(earlier_choices) == 1
        and len(later_choices) == 1
    ):
        return False
    first, second = earlier_choices[0], later_choices[0]
    if first.get("finish_reason") is not None or second.get("finish_reason") is not None:
        return False
    if first.keys() != second.keys() or first.get("index") != second.get("index"):
        return False
    key = _text_key(second.get("delta"))
    if key is None or not _extendable(first.get("delta"), key):
        return False
    logprobs = _folded_logprobs(first.get("logprobs"), second.get("logprobs"))
    if logprobs is False:
        return False
    usage = later.get("usage")
    if "usage" in later and (usage is None) != (earlier.get("usage") is None):
        return False
    first["delta"][key] += second["delta"][key]
    if logprobs is not None:
        first["logprobs"] = logprobs
    if usage is not None:
        earlier["usage"] = usage  # continuous usage: the later, cumulative figure
    return True


def _text_key(delta: Any) -> str | None:
    """The delta's text field if the delta is that field alone, as a string."""
    if not isinstance(delta, dict) or len(delta) != 1:
        return None
    key = next(iter(delta))
    return key if key in _TEXT_KEYS and isinstance(delta[key], str) else None


def _extendable(delta: Any, key: str) -> bool:
    """True if `delta` carries `key` as text, next to at most the role (the first
    chunk's `role`, and `content: null` beside reasoning)."""
    if not isinstance(delta, dict) or not isinstance(delta.get(key), str):
        return False
    for other, value in delta.items():
        if other == key or other == "role":
            continue
        if other == "content" and value is None:
            continue
        return False
    return True


def _folded_logprobs(first: Any, second: Any) -> dict[str, Any] | bool | None:
    """The combined `logprobs` (None when neither has any), or False when they do not fold."""
    if first is None and second is None:
        return None
    if not (isinstance(first, dict) and isinstance(second, dict)):
        return False
    if first.keys() != second.keys() or first.get("refusal") is not None:
        return False
    if second.get("refusal") is not None:
        return False
    a, b = first.get("content"), second.get("content")
    if a is None and b is None:
        return dict(first)
    if isinstance(a, list) and isinstance(b, list):
        return {**first, "content": a + b}
    return False
