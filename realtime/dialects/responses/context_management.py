"""`context_management` on `responses.create`: when to compact the context automatically.

The SDK's entry is `{"type": "compaction", "compact_threshold": N}`: compact the
context (`compaction.py`) when its prompt passes N tokens. One entry at most (the
only type there is); N from 1 to 10,000,000; left out, 80% of the model's context.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, ValidationError

from realtime.dialects.responses.validation import client_error
from realtime.protocol.errors import InvalidRequestError

#: `context_management` entries one request may carry (only `compaction` exists).
MAX_CONTEXT_MANAGEMENT_ENTRIES = 1
#: `compact_threshold`'s bounds, in tokens.
MIN_COMPACT_THRESHOLD = 1
MAX_COMPACT_THRESHOLD = 10_000_000
#: The threshold when the entry gives none: this share of the model's context.
DEFAULT_THRESHOLD_SHARE = 0.8


class ContextManagement(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    type: Literal["compaction"]
    compact_threshold: int | None = None


def parse_context_management(raw: list[Any] | None) -> int | None:
    """`context_management`'s compaction threshold in tokens (None: no compaction; 0:
    the entry gave none, and the caller takes `DEFAULT_THRESHOLD_SHARE` of the context)."""
    if raw is None:
        return None
    if len(raw) > MAX_CONTEXT_MANAGEMENT_ENTRIES:
        raise InvalidRequestError(
            f"context_management: at most {MAX_CONTEXT_MANAGEMENT_ENTRIES} entry, got {len(raw)}",
            param="context_management",
        )
    if not raw:
        return None
    try:
        entry = ContextManagement.model_validate(raw[0])
    except ValidationError as exc:
        raise client_error(exc, "context_management.0") from None
    threshold = entry.compact_threshold
    if threshold is not None and not MIN_COMPACT_THRESHOLD <= threshold <= MAX_COMPACT_THRESHOLD:
        raise InvalidRequestError(
            f"Invalid value for 'context_management.0.compact_threshold': {threshold}; expected"
            f" {MIN_COMPACT_THRESHOLD} to {MAX_COMPACT_THRESHOLD} tokens",
            param="context_management.0.compact_threshold",
            code="invalid_value",
        )
    return threshold if threshold is not None else 0
