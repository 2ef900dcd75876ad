"""llama3_json: Llama 3.1/3.2 JSON calls, `{"name": ..., "parameters": {...}}`.

The output either starts with the JSON object (only leading whitespace before
it) or the calls follow a `<|python_tag|>` marker; several calls are separated
by `;`. `"arguments"` is accepted for `"parameters"`. A `{` anywhere else is
just text: answers may legitimately contain JSON.
"""

from __future__ import annotations

from enum import IntEnum

from realtime.chat.tools.base import Step, ToolParser, skip_ws
from realtime.chat.tools.json_call_reader import DONE, MORE, JsonCallReader

PYTHON_TAG = "<|python_tag|>"


class State(IntEnum):
    START = 0  # leading whitespace, then a call object or content
    CONTENT = 1  # text, up to `<|python_tag|>`
    CALL = 2  # a call's JSON object
    BETWEEN = 3  # `;` and the next call, or the end of the calls


class Llama3JsonToolParser(ToolParser):
    name = "llama3_json"
    markers = (PYTHON_TAG,)
    initial, content_state = State.START, State.CONTENT
    open_states = frozenset({State.CALL})

    def _setup(self) -> None:
        self._call: JsonCallReader | None = None

    def _start(self, buf: str, i: int, final: bool) -> Step:
        j = skip_ws(buf, i)
        if j == len(buf) and not final:
            return i, None  # only whitespace so far: undecided
        self._out.content(buf[i:j])
        if j < len(buf) and buf[j] == "{":
            return j, self._begin("")
        return j, State.CONTENT

    def _content(self, buf: str, i: int, final: bool) -> Step:
        j, end = self._content_until(buf, i, PYTHON_TAG, final=final)
        if j == -1:
            return end, None
        return j + len(PYTHON_TAG), self._begin(PYTHON_TAG)

    def _in_call(self, buf: str, i: int, final: bool) -> Step:
        assert self._call is not None
        i, status = self._call.step(buf, i, final=final)
        if status == MORE:
            return i, None
        return i, State.BETWEEN if status == DONE else State.CONTENT

    def _between(self, buf: str, i: int, final: bool) -> Step:
        j = skip_ws(buf, i)
        if j == len(buf) and not final:
            return i, None
        if j < len(buf) and buf[j] == ";":
            return j + 1, self._begin(";")
        return i, State.CONTENT

    def _begin(self, raw_prefix: str) -> State:
        self._call = JsonCallReader(self._out, self.check_name, raw_prefix)
        return State.CALL

    states = {
        State.START: _start,
        State.CONTENT: _content,
        State.CALL: _in_call,
        State.BETWEEN: _between,
    }
