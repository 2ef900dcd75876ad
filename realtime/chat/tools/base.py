"""The one interface every tool-call parser implements, and the machinery they share.

A parser is a state machine over the model's visible text: `feed(piece)` takes
the next piece (any split point, even inside a marker or a multi-character
escape) and returns the events it can already be sure of; `finish()` flushes
at the end of the output. `parse(text)` is the complete form: the same machine
fed the whole text, with calls held until they are known to be well formed.

Two modes, chosen at construction:

* `incremental=True` (streaming): a call's start is emitted as soon as its
  name is known and its arguments as they arrive, each piece a valid prefix of
  the arguments JSON.
* `incremental=False` (complete): a call's events are held until the call has
  ended well formed. A malformed or truncated call therefore never shows up as
  a call at all.

Faults never raise and never lose text. When a call turns out to be malformed
or truncated, its raw text (from its opening marker to the character that broke
it) is emitted as content, parsing resumes as content at that character, and
a warning goes to the `realtime.chat.tools` logger. In streaming mode a call
that already started cannot be taken back: the client keeps the call with the
valid prefix of its arguments it has received, and also gets the raw text as
content. On well-formed output both modes produce exactly the same events,
whatever the split points.

Whitespace around calls is layout, not content: the whitespace right before a
call is dropped; the whitespace after one separates the text before the call
from the text after it (`"A\n\n<call>\n\nB"` gives `"A\n\nB"`), and is dropped
when no text came before (the output began with calls) or none comes after.
Output without calls keeps every character.
"""

from __future__ import annotations

import logging
import secrets
import string
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

from realtime.protocol.output import (
    ContentDelta,
    OutputEvent,
    ParsedOutput,
    ToolCallArguments,
    ToolCallStart,
    ToolEvent,
    fold_events,
    merge_adjacent,
)

logger = logging.getLogger("realtime.chat.tools")

_ALNUM = string.ascii_letters + string.digits
_EXCERPT = 200


def openai_call_id() -> str:
    """`call_` and 24 random alphanumerics, like OpenAI's ids."""
    return "call_" + "".join(secrets.choice(_ALNUM) for _ in range(24))


@dataclass(frozen=True, slots=True)
class ToolSpec:
    """What a parser needs to know about one declared tool."""

    name: str
    parameters: Mapping[str, Any] = field(default_factory=dict)


def tool_specs(tools: Iterable[Mapping[str, Any]] | None) -> list[ToolSpec]:
    """ToolSpecs from OpenAI-shaped tools (`{"type": "function", "function": {...}}`)."""
    specs = []
    for tool in tools or ():
        fn = tool.get("function") or {}
        name = fn.get("name")
        if isinstance(name, str):
            specs.append(ToolSpec(name, fn.get("parameters") or {}))
    return specs


def held_prefix(buf: str, start: int, markers: Sequence[str]) -> int:
    """Length of the longest suffix of `buf[start:]` that could begin one of `markers`."""
    longest = max(len(m) for m in markers) - 1
    for n in range(min(longest, len(buf) - start), 0, -1):
        tail = buf[len(buf) - n :]
        if any(m.startswith(tail) for m in markers):
            return n
    return 0


def find_first(buf: str, start: int, markers: Sequence[str]) -> tuple[int, str]:
    """The earliest occurrence of any marker at or after `start`: (index, marker) or (-1, "")."""
    best, found = -1, ""
    for marker in markers:
        i = buf.find(marker, start)
        if i != -1 and (best == -1 or i < best):
            best, found = i, marker
    return best, found


def skip_ws(buf: str, i: int) -> int:
    """The index of the first non-whitespace character at or after `i` (or `len(buf)`)."""
    n = len(buf)
    while i < n and buf[i].isspace():
        i += 1
    return i


def excerpt(text: str) -> str:
    return repr(text if len(text) <= _EXCERPT else text[:_EXCERPT] + "...")


class ToolOutput:
    """Collects a parser's events: call bookkeeping, hold mode, and the whitespace rule."""

    def __init__(
        self, parser: str, *, incremental: bool, gate: bool, id_factory: Callable[[], str]
    ) -> None:
        self._parser = parser
        self._incremental = incremental
        self._gate = gate
        self._id_factory = id_factory
        self._events: list[ToolEvent] = []
        self._held: list[ToolEvent] = []
        self._ws = ""  # whitespace after the last content or call, not yet emitted
        self._content_sent = False
        self._next_index = 0
        self.current: int | None = None

    def take(self) -> list[ToolEvent]:
        events, self._events = self._events, []
        if len(events) < 2:
            return events  # nothing to merge, and no event recorded here is empty
        return merge_adjacent(events)  # type: ignore[arg-type, return-value]

    def content(self, text: str) -> None:
        if not text:
            return
        if not self._gate:
            self._events.append(ContentDelta(text))
            return
        body = text.rstrip()
        if not body:
            self._ws += text
            return
        piece = self._ws + body
        if not self._content_sent and self._next_index:
            piece = piece.lstrip()  # the output began with calls
        self._ws = text[len(body) :]
        self._events.append(ContentDelta(piece))
        self._content_sent = True

    def start(self, name: str, call_id: str | None = None) -> None:
        index = self._next_index
        self._next_index += 1
        self.current = index
        event = ToolCallStart(index, call_id or self._id_factory(), name)
        if self._incremental:
            self._ws = ""
            self._events.append(event)
        else:
            self._held = [event]

    def arguments(self, text: str) -> None:
        if not text or self.current is None:
            return
        event = ToolCallArguments(self.current, text)
        (self._events if self._incremental else self._held).append(event)

    def end(self) -> None:
        if not self._incremental:
            self._ws = ""
            self._events.extend(self._held)
            self._held = []
        self.current = None

    def fail(self, raw: str, reason: str, *, quiet: bool = False) -> None:
        """A call (or what looked like one) is malformed: its raw text becomes content."""
        log = logger.debug if quiet else logger.warning
        log(
            "%s tool parser: %s; returning the text as content: %s",
            self._parser,
            reason,
            excerpt(raw),
        )
        if self.current is not None:
            if not self._incremental:
                self._next_index -= 1
                self._held = []
            self.current = None
        self.content(raw)

    def close(self) -> None:
        if self._ws and self._next_index == 0:
            self._events.append(ContentDelta(self._ws))
        self._ws = ""


#: What a state's handler returns: the position it read up to, and the state to
#: go on in, or None to stop there until more text arrives.
Step = tuple[int, int | None]
#: A state's handler: `(parser, buf, i, final) -> Step`. It reads what it can of
#: `buf` from `i`; with `final` (nothing more will come) it must not stop in a state
#: the parser lists in `open_states`.
Handler = Callable[[Any, str, int, bool], Step]


class ToolParser:
    """Base of every tool-call parser; see the module docstring for the contract.

    A format is a state machine kept as data, in the manner of h11: `states` maps
    each state (a member of the format's `IntEnum`) to the method that handles it,
    and `_consume` runs the table over the text. Handlers read as much as they can
    be sure of and name the next state, so each one is small and is read alone.
    """

    #: Registry name.
    name: ClassVar[str]
    #: Marker strings this format needs to see in the decoded text. Several are
    #: special tokens, so the detokenizer must not skip them.
    markers: ClassVar[tuple[str, ...]] = ()
    #: Whether whitespace around calls is formatting (see the module docstring).
    _gate: ClassVar[bool] = True
    #: The format's machine: state -> handler.
    states: ClassVar[Mapping[int, Handler]]
    #: The state the output starts in.
    initial: ClassVar[int]
    #: The state that reads text as content; a failed call resumes there.
    content_state: ClassVar[int]
    #: States inside a call (or what may be one): at the end of the output their
    #: handler runs even with no text left, to resolve them.
    open_states: ClassVar[frozenset[int]] = frozenset()

    def __init__(
        self,
        tools: Sequence[ToolSpec] | None = None,
        *,
        incremental: bool = True,
        id_factory: Callable[[], str] | None = None,
    ) -> None:
        self.tools: dict[str, ToolSpec] = {t.name: t for t in tools or ()}
        self._out = ToolOutput(
            self.name,
            incremental=incremental,
            gate=self._gate,
            id_factory=id_factory or self.new_call_id,
        )
        self._buf = ""
        self._finished = False
        self._state = self.initial
        #: The raw text of the call being read, which becomes content if it fails.
        self._raw: list[str] = []
        self._setup()

    def _setup(self) -> None:
        """The format's own fields, besides the state."""

    @staticmethod
    def new_call_id() -> str:
        return openai_call_id()

    def feed(self, text: str) -> list[ToolEvent]:
        """Take the next piece of output; return the events that are now certain."""
        if self._finished:
            raise RuntimeError("feed() after finish()")
        if text:
            self._buf += text
            self._buf = self._buf[self._consume(self._buf, final=False) :]
        return self._out.take()

    def finish(self) -> list[ToolEvent]:
        """The output ended: resolve what is still open (truncated calls become content)."""
        if not self._finished:
            self._finished = True
            rest = self._buf[self._consume(self._buf, final=True) :]
            self._buf = ""
            self._out.content(rest)
            self._out.close()
        return self._out.take()

    @classmethod
    def parse(
        cls,
        text: str,
        tools: Sequence[ToolSpec] | None = None,
        *,
        id_factory: Callable[[], str] | None = None,
    ) -> ParsedOutput:
        """The complete form: the whole output at once (calls only when well formed)."""
        parser = cls(tools, incremental=False, id_factory=id_factory)
        events: list[OutputEvent] = [*parser.feed(text), *parser.finish()]
        return fold_events(events)

    def check_name(self, name: str) -> str | None:
        """Why `name` cannot be a call here, or None. Unknown names are refused when
        the request declared tools: the text then stays content instead of
        becoming a call the client never offered."""
        if not name:
            return "empty function name"
        if self.tools and name not in self.tools:
            return f"the model called {name!r}, which is not among the request's tools"
        return None

    def _consume(self, buf: str, *, final: bool) -> int:
        """Run the state table over `buf` (everything not consumed so far); return
        how much was consumed.

        With `final=True` nothing more will come: every open state is resolved,
        and whatever is returned unconsumed is emitted as content.
        """
        i, n = 0, len(buf)
        states = self.states
        while i < n or (final and self._state in self.open_states):
            i, state = states[self._state](self, buf, i, final)
            if state is None:
                return i
            self._state = state
        return i

    def _content_until(self, buf: str, i: int, marker: str, *, final: bool) -> tuple[int, int]:
        """Emit the content from `i` up to `marker`: (the marker's index, -1) when found.

        Otherwise (-1, end): everything before `end` went out as content, and a tail
        that could be the start of `marker` is held back for the next piece (unless
        the output is `final`, when nothing more can complete it).
        """
        j = buf.find(marker, i)
        if j == -1:
            end = len(buf) - (0 if final else held_prefix(buf, i, (marker,)))
            self._out.content(buf[i:end])
            return -1, end
        self._out.content(buf[i:j])
        return j, -1

    def _fail(self, reason: str, *, quiet: bool = False) -> int:
        """The call being read is malformed: its raw text becomes content, and the
        text goes on being read as content (the returned state)."""
        self._out.fail("".join(self._raw), reason, quiet=quiet)
        self._raw = []
        return self.content_state
