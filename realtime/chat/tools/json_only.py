"""json: the whole output is a JSON call object, or a JSON array of them.

For models prompted to answer with `{"name": ..., "arguments": {...}}` (or
`"parameters"`) and nothing else. Leading whitespace is allowed; text after the
JSON is content. Output that does not start with `{` or `[` is plain content.
"""

from __future__ import annotations

from enum import IntEnum

from realtime.chat.tools.base import Step, ToolParser, skip_ws
from realtime.chat.tools.json_call_reader import DONE, MORE, JsonCallReader


class State(IntEnum):
    START = 0  # leading whitespace, then `{`, `[` or content
    CONTENT = 1  # the rest of the output
    CALL = 2  # a call's JSON object
    ARRAY_NEXT = 3  # `,` and the next call, or the array's end


class JsonToolParser(ToolParser):
    name = "json"
    initial, content_state = State.START, State.CONTENT
    open_states = frozenset({State.CALL})

    def _setup(self) -> None:
        self._in_array = False
        self._call: JsonCallReader | None = None

    def _start(self, buf: str, i: int, final: bool) -> Step:
        j = skip_ws(buf, i)
        if j == len(buf) and not final:
            return i, None
        self._out.content(buf[i:j])
        if j < len(buf) and buf[j] == "{":
            return j, self._begin("")
        if j < len(buf) and buf[j] == "[":
            self._in_array = True
            return j + 1, self._begin("[")
        return j, State.CONTENT

    def _content(self, buf: str, i: int, final: bool) -> Step:
        self._out.content(buf[i:])
        return len(buf), None

    def _in_call(self, buf: str, i: int, final: bool) -> Step:
        assert self._call is not None
        i, status = self._call.step(buf, i, final=final)
        if status == MORE:
            return i, None
        return i, State.ARRAY_NEXT if status == DONE and self._in_array else State.CONTENT

    def _array_next(self, buf: str, i: int, final: bool) -> Step:
        j = skip_ws(buf, i)
        if j == len(buf) and not final:
            return i, None
        if j < len(buf) and buf[j] == ",":
            return j + 1, self._begin(buf[i : j + 1])
        if j < len(buf) and buf[j] == "]":
            return j + 1, State.CONTENT
        return i, State.CONTENT

    def _begin(self, raw_prefix: str) -> State:
        self._call = JsonCallReader(self._out, self.check_name, raw_prefix)
        return State.CALL

    states = {
        State.START: _start,
        State.CONTENT: _content,
        State.CALL: _in_call,
        State.ARRAY_NEXT: _array_next,
    }
