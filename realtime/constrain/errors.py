"""The one error a constraint can raise while it is being built or checked."""

from __future__ import annotations

import re

#: The request fields a constraint comes from; an error names the one at fault.
RESPONSE_FORMAT = "response_format"
TOOLS = "tools"
TOOL_CHOICE = "tool_choice"

_MAX_DETAIL = 300


class ConstraintError(ValueError):
    """A schema or tool choice that cannot be enforced: the pipeline answers 400
    (an `error` frame on the socket) with `param` set to the field at fault.

    Raised for invalid schemas, for schema features the grammar engine cannot
    enforce (never silently ignored), and for limits (size, depth).
    """

    def __init__(self, message: str, *, param: str) -> None:
        super().__init__(message)
        self.message = message
        self.param = param


_SOURCE_LINE = re.compile(r"^\s*\d+ \|")
_POSITION = re.compile(r"^at \d+\(\d+\): ")


def engine_detail(text: str) -> str:
    """The grammar engine's message on one line, short enough for an error body.

    Listings of the generated grammar and positions in it mean nothing to the
    client (they wrote a schema, not our grammar), so they are left out.
    """
    kept = []
    for line in text.splitlines():
        if _SOURCE_LINE.match(line):
            break
        kept.append(line)
    detail = _POSITION.sub("", " ".join(" ".join(kept).split()))
    return detail if len(detail) <= _MAX_DETAIL else detail[: _MAX_DETAIL - 3] + "..."
