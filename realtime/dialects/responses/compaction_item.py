"""The `compaction` item's content: this server's summary of a context, as an opaque string.

OpenAI's compaction item carries `encrypted_content`. This server's is not
encrypted, only encoded: `rtc1.` and the base64url of a JSON object
`{"summary": text, "kept": [items]}` - the summary the served model wrote of the
compacted part of a conversation, and the items it kept verbatim (the last turn).
A client can read it; it holds nothing but the client's own conversation, so a
hand-made one is no more than the messages it could have sent. Content another
server made (OpenAI's encrypted blobs) is refused by name, not rendered as noise.
"""

from __future__ import annotations

import base64
import binascii
from dataclasses import dataclass
from typing import Any

import orjson

PREFIX = "rtc1."
#: Characters of one item's `encrypted_content` (the body's size bounds it too).
MAX_CONTENT_CHARS = 1 << 20


class CompactionContentError(ValueError):
    """The content is not a compaction this server made (the message says why)."""


@dataclass(frozen=True, slots=True)
class Compaction:
    summary: str
    #: the items kept verbatim, in normal form (`items.normalize_input`)
    kept: list[dict[str, Any]]


def encode(compaction: Compaction) -> str:
    data = orjson.dumps({"summary": compaction.summary, "kept": compaction.kept})
    return PREFIX + base64.urlsafe_b64encode(data).decode("ascii")


def decode(content: str) -> tuple[str, list[Any]]:
    """The summary and the kept items as sent (the caller validates the items)."""
    if len(content) > MAX_CONTENT_CHARS:
        raise CompactionContentError(f"it has more than {MAX_CONTENT_CHARS} characters")
    if not content.startswith(PREFIX):
        raise CompactionContentError(
            "it was not made by this server (its compaction items start with 'rtc1.')"
        )
    try:
        data = orjson.loads(base64.urlsafe_b64decode(content[len(PREFIX) :].encode("ascii")))
    except (binascii.Error, ValueError, UnicodeEncodeError):
        raise CompactionContentError("it is not valid base64url of a JSON object") from None
    if not isinstance(data, dict) or set(data) != {"summary", "kept"}:
        raise CompactionContentError("it must hold exactly 'summary' and 'kept'")
    summary, kept = data["summary"], data["kept"]
    if not isinstance(summary, str) or not isinstance(kept, list):
        raise CompactionContentError("'summary' must be a string and 'kept' a list of items")
    return summary, kept
