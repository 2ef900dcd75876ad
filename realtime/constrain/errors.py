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


#: The grammar engine's limit errors, in the client's terms, with the flag that sets each.
_LIMITS: tuple[tuple[re.Pattern[str], str], ...] = (
    (
        re.compile(r"Too many items \(limit (?P<n>\d+)"),
        "one token needs more than {n} parser items (--grammar-step-items)",
    ),
    (
        re.compile(r"Current row has (?P<have>\d+) items; max is (?P<n>\d+)"),
        "it branches {have} ways at one point; the limit is {n} (--grammar-row-items)",
    ),
    (
        re.compile(
            r"grammar size \(number of symbols\) too big \(limit for this grammar: (?P<n>\d+)"
        ),
        "its grammar has more than {n} symbols (--grammar-max-size)",
    ),
    (
        re.compile(
            r"initial lexer configuration \(grammar\) too big \(limit for this grammar: (?P<n>\d+)"
        ),
        "compiling it needs more than {n} units of lexer work (--grammar-compile-fuel)",
    ),
    (
        re.compile(r"initial_lexer_fuel|fuel exhausted"),
        "compiling it needs more lexer work than --grammar-compile-fuel allows",
    ),
    (
        re.compile(r"too many expressions constructed"),
        "one token needs more lexer work than --grammar-step-fuel allows",
    ),
    (
        re.compile(r"too many states: \d+ >= (?P<n>\d+)"),
        "its lexer needs more than {n} states (--grammar-lexer-states)",
    ),
)


def limit_detail(detail: str) -> str:
    """`detail` (from `engine_detail`) in the client's terms when it is one of the grammar
    engine's limits (their advice is about grammars the client never wrote); else as is."""
    for pattern, message in _LIMITS:
        found = pattern.search(detail)
        if found is not None:
            return message.format(**found.groupdict())
    return detail
