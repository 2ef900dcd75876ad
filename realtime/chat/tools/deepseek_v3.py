"""deepseek_v3: DeepSeek V3 / R1 calls, written with DeepSeek's special tokens.

Written here with `|` for U+FF5C (fullwidth vertical line) and `_` for U+2581
(lower one eighth block), which is what the real markers contain:

    <|tool_calls_begin|><|tool_call_begin|>function<|tool_sep|>NAME
    ```json
    {"arg": 1}
    ```<|tool_call_end|><|tool_call_begin|>...<|tool_call_end|><|tool_calls_end|>

DeepSeek V3.1 writes `NAME<|tool_sep|>{...}` inside the same markers (no type,
no code fence); a `{` right after the separator selects that layout, so both
are read. The arguments stream as they arrive; the call ends when the JSON
object closes, and the fence and end markers that follow are layout.
"""

from __future__ import annotations

from enum import IntEnum

from realtime.chat.tools.base import Step, ToolParser, held_prefix
from realtime.chat.tools.json_call_reader import DONE, MORE, JsonCallReader

_BAR, _LOW = "\uff5c", "\u2581"


def _marker(words: str) -> str:
    return "<" + _BAR + words.replace(" ", _LOW) + _BAR + ">"


CALLS_BEGIN = _marker("tool calls begin")
CALL_BEGIN = _marker("tool call begin")
SEP = _marker("tool sep")
CALL_END = _marker("tool call end")
CALLS_END = _marker("tool calls end")
_MARKER_OPEN = "<" + _BAR
FENCE = "```"
_LAYOUT = (CALL_END, FENCE, CALL_BEGIN, CALLS_END)


class State(IntEnum):
    CONTENT = 0  # text, up to tool_calls_begin
    SECTION = 1  # layout, then the first tool_call_begin
    HEAD = 2  # the call's head, up to tool_sep
    AFTER_SEP = 3  # `{` (V3.1: the head was the name) or the name's line
    NAME = 4  # the function's name, up to a line break
    FENCE = 5  # an optional "```json" before the arguments
    ARGS_START = 6  # whitespace, then the arguments' `{`
    ARGS = 7  # the arguments object
    TAIL = 8  # after a call: layout, then the next call or the end of the section


class DeepSeekV3ToolParser(ToolParser):
    name = "deepseek_v3"
    markers = (CALLS_BEGIN, CALL_BEGIN, SEP, CALL_END, CALLS_END)
    initial = content_state = State.CONTENT
    open_states = frozenset(State) - {State.CONTENT, State.TAIL}

    def _setup(self) -> None:
        self._call: JsonCallReader | None = None
        self._head = ""
        self._fn = ""

    def _content(self, buf: str, i: int, final: bool) -> Step:
        j, end = self._content_until(buf, i, CALLS_BEGIN, final=final)
        if j == -1:
            return end, None
        self._raw = [CALLS_BEGIN]
        return j + len(CALLS_BEGIN), State.SECTION

    def _layout(self, buf: str, i: int, final: bool) -> Step:
        """Between calls: whitespace, fences and end markers, then the next call or
        the end of the section (or, after a complete call, ordinary text)."""
        n = len(buf)
        in_section = self._state == State.SECTION
        start = i  # whitespace is consumed only together with layout that follows it
        while i < n:
            if buf[i].isspace():
                i += 1
                continue
            token = CALL_END if buf.startswith(CALL_END, i) else FENCE
            if buf.startswith(token, i):
                self._raw.append(buf[start:i] + token)
                i += len(token)
                start = i
                continue
            if buf.startswith(CALL_BEGIN, i):
                self._raw.append(buf[start:i] + CALL_BEGIN)
                return i + len(CALL_BEGIN), State.HEAD
            if buf.startswith(CALLS_END, i):
                if in_section:
                    self._raw.append(buf[start:i] + CALLS_END)
                    self._fail("a tool-call section without calls")
                self._raw = []
                return i + len(CALLS_END), State.CONTENT
            if not final and held_prefix(buf, i, _LAYOUT) == n - i:
                return start, None  # maybe the start of a marker
            if in_section:
                self._raw.append(buf[start:i])
                return i, self._fail("expected the tool_call_begin marker")
            self._raw = []  # after a complete call: the rest is ordinary text
            return start, State.CONTENT
        if final and in_section:
            self._raw.append(buf[start:i])
            return i, self._fail("the output ended inside the tool-call section")
        return start, None

    def _head_until_sep(self, buf: str, i: int, final: bool) -> Step:
        """The head ends at the separator and never holds a line break or another
        marker; the same rule whether or not the separator is here yet."""
        j = buf.find(SEP, i)
        bad = _first_of(buf, i, ("\n", _MARKER_OPEN), skip=SEP)
        if (bad != -1 and (j == -1 or bad < j)) or (j == -1 and final):
            stop = len(buf) if bad == -1 else bad
            self._raw.append(buf[i:stop])
            return stop, self._fail("no tool_sep marker after tool_call_begin")
        if j == -1:
            return i, None
        self._head = buf[i:j].strip()
        self._raw.append(buf[i : j + len(SEP)])
        return j + len(SEP), State.AFTER_SEP

    def _after_sep(self, buf: str, i: int, final: bool) -> Step:
        j = i
        while j < len(buf) and buf[j] in " \t":
            j += 1
        if j == len(buf) and not final:
            return i, None
        if j < len(buf) and buf[j] == "{":  # V3.1: the head was the name
            self._raw.append(buf[i:j])
            return j, self._begin_arguments(self._head)
        return i, State.NAME

    def _name(self, buf: str, i: int, final: bool) -> Step:
        """The name ends at a line break and never holds a marker or a brace."""
        j = buf.find("\n", i)
        bad = _first_of(buf, i, (_MARKER_OPEN, "{"))
        if (bad != -1 and (j == -1 or bad < j)) or (j == -1 and final):
            stop = len(buf) if bad == -1 else bad
            self._raw.append(buf[i:stop])
            return stop, self._fail("the function name is not followed by a newline")
        if j == -1:
            return i, None
        self._fn = buf[i:j].strip()
        self._raw.append(buf[i : j + 1])
        return j + 1, State.FENCE

    def _fence(self, buf: str, i: int, final: bool) -> Step:
        """A "```json" fence and a newline before the arguments; tolerated when absent."""
        j = i
        while j < len(buf) and buf[j].isspace():
            j += 1
        rest = buf[j : j + len(FENCE) + 4]
        if not final and j + len(FENCE) + 4 > len(buf) and (FENCE + "json").startswith(rest):
            return i, None
        if buf.startswith(FENCE, j):
            j += len(FENCE)
            if buf.startswith("json", j):
                j += 4
        self._raw.append(buf[i:j])
        return j, State.ARGS_START

    def _args_start(self, buf: str, i: int, final: bool) -> Step:
        j = i
        while j < len(buf) and buf[j].isspace():
            j += 1
        self._raw.append(buf[i:j])
        if j == len(buf):
            return j, self._fail("the output ended before the arguments") if final else None
        if buf[j] != "{":
            return j, self._fail("the arguments must be a JSON object")
        return j, self._begin_arguments(self._fn)

    def _args(self, buf: str, i: int, final: bool) -> Step:
        assert self._call is not None
        i, status = self._call.step(buf, i, final=final)
        if status == MORE:
            return i, None
        return i, State.TAIL if status == DONE else State.CONTENT

    def _begin_arguments(self, name: str) -> State:
        self._call = JsonCallReader(self._out, self.check_name, "".join(self._raw), name=name)
        self._raw = []
        return State.ARGS

    states = {
        State.CONTENT: _content,
        State.SECTION: _layout,
        State.TAIL: _layout,
        State.HEAD: _head_until_sep,
        State.AFTER_SEP: _after_sep,
        State.NAME: _name,
        State.FENCE: _fence,
        State.ARGS_START: _args_start,
        State.ARGS: _args,
    }


def _first_of(buf: str, start: int, needles: tuple[str, ...], skip: str = "") -> int:
    """Earliest index of any needle (ignoring occurrences that begin `skip`), or -1."""
    best = -1
    for needle in needles:
        i = buf.find(needle, start)
        while i != -1 and skip and buf.startswith(skip[: len(buf) - i], i):
            i = buf.find(needle, i + 1)
        if i != -1 and (best == -1 or i < best):
            best = i
    return best
