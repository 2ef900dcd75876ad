"""mistral: `[TOOL_CALLS]` followed by the calls, in either of Mistral's two layouts.

* up to tokenizer v7: a JSON array, `[TOOL_CALLS] [{"name": ..., "arguments": {...}}, ...]`;
* v11 and later: `[TOOL_CALLS]NAME[ARGS]{...}` (optionally `[CALL_ID]ID` before
  `[ARGS]`), the marker repeated before each parallel call.

Call ids are 9 random alphanumerics, not `call_...`: Mistral's templates and
mistral_common reject any other id when the call comes back in the history. An
id the model wrote with `[CALL_ID]` is kept when it has that form; an `"id"`
key in the array layout is skipped (the call has started before it could be
read), so those calls get fresh ids.
"""

from __future__ import annotations

import re
import secrets
import string
from enum import IntEnum

from realtime.chat.tools.base import Step, ToolParser, held_prefix, skip_ws
from realtime.chat.tools.json_call_reader import DONE, MORE, JsonCallReader

TOOL_CALLS, ARGS, CALL_ID = "[TOOL_CALLS]", "[ARGS]", "[CALL_ID]"
_ALNUM = string.ascii_letters + string.digits
_NAME_CHAR = re.compile(r"[A-Za-z0-9_.\-]")
_MISTRAL_ID = re.compile(r"[A-Za-z0-9]{9}")


class State(IntEnum):
    CONTENT = 0  # text, up to `[TOOL_CALLS]`
    AFTER_MARKER = 1  # `[` starts the array layout; anything else is a name
    ARRAY_CALL = 2  # a call object in the array
    ARRAY_NEXT = 3  # `,` and the next call object, or the array's end
    NAME = 4  # the function's name, up to `[CALL_ID]`, `[ARGS]` or `{`
    CALL_ID = 5  # the call's id, up to `[ARGS]` or `{`
    ARGS_START = 6  # whitespace, then the arguments' `{`
    ARGS = 7  # the arguments object


def mistral_call_id() -> str:
    return "".join(secrets.choice(_ALNUM) for _ in range(9))


class MistralToolParser(ToolParser):
    name = "mistral"
    markers = (TOOL_CALLS, ARGS, CALL_ID)
    initial = content_state = State.CONTENT
    open_states = frozenset(State) - {State.CONTENT}

    @staticmethod
    def new_call_id() -> str:
        return mistral_call_id()

    def _setup(self) -> None:
        self._call: JsonCallReader | None = None
        self._fn = ""
        self._id = ""

    def _content(self, buf: str, i: int, final: bool) -> Step:
        j, end = self._content_until(buf, i, TOOL_CALLS, final=final)
        if j == -1:
            return end, None
        self._raw = [TOOL_CALLS]
        return j + len(TOOL_CALLS), State.AFTER_MARKER

    def _after_marker(self, buf: str, i: int, final: bool) -> Step:
        j = skip_ws(buf, i)
        self._raw.append(buf[i:j])
        if j == len(buf):
            return j, self._fail("nothing follows [TOOL_CALLS]") if final else None
        if buf[j] == "[":
            self._raw.append("[")
            return j + 1, self._begin_array_call()
        self._fn, self._id = "", ""
        return j, State.NAME

    def _array_call(self, buf: str, i: int, final: bool) -> Step:
        assert self._call is not None
        i, status = self._call.step(buf, i, final=final)
        if status == MORE:
            return i, None
        self._raw = []
        return i, State.ARRAY_NEXT if status == DONE else State.CONTENT

    def _array_next(self, buf: str, i: int, final: bool) -> Step:
        j = skip_ws(buf, i)
        if j == len(buf) and not final:
            return i, None
        if j < len(buf) and buf[j] == ",":
            self._raw = [buf[i : j + 1]]
            return j + 1, self._begin_array_call()
        if j < len(buf) and buf[j] == "]":
            return j + 1, State.CONTENT
        return i, State.CONTENT  # at the end, a missing `]` is no loss

    def _head(self, buf: str, i: int, final: bool) -> Step:
        """`NAME` then optional `[CALL_ID]ID`, up to `[ARGS]` or the arguments' `{`."""
        n = len(buf)
        in_name = self._state == State.NAME
        while i < n:
            if buf.startswith(ARGS, i) or buf[i] == "{":
                if buf[i] != "{":
                    self._raw.append(ARGS)
                    i += len(ARGS)
                if not self._fn:
                    return i, self._fail("the call has no name")
                return i, State.ARGS_START
            if in_name and buf.startswith(CALL_ID, i):
                self._raw.append(CALL_ID)
                return i + len(CALL_ID), State.CALL_ID
            if buf[i] == "[" and not final and held_prefix(buf, i, (ARGS, CALL_ID)) == n - i:
                return i, None  # maybe the start of a marker
            if not _NAME_CHAR.match(buf[i]):
                return i, self._fail(f"unexpected {buf[i]!r} in the call's name")
            self._raw.append(buf[i])
            if in_name:
                self._fn += buf[i]
            else:
                self._id += buf[i]
            i += 1
        if final:
            return i, self._fail("the output ended inside a tool call")
        return i, None

    def _args_start(self, buf: str, i: int, final: bool) -> Step:
        j = skip_ws(buf, i)
        self._raw.append(buf[i:j])
        if j == len(buf):
            return j, self._fail("the output ended before the arguments") if final else None
        if buf[j] != "{":
            return j, self._fail("the arguments must be a JSON object")
        call_id = self._id if _MISTRAL_ID.fullmatch(self._id) else None
        self._call = JsonCallReader(
            self._out, self.check_name, "".join(self._raw), name=self._fn, call_id=call_id
        )
        self._raw = []
        return j, State.ARGS

    def _args(self, buf: str, i: int, final: bool) -> Step:
        assert self._call is not None
        i, status = self._call.step(buf, i, final=final)
        return i, None if status == MORE else State.CONTENT

    def _begin_array_call(self) -> State:
        self._call = JsonCallReader(self._out, self.check_name, "".join(self._raw))
        return State.ARRAY_CALL

    states = {
        State.CONTENT: _content,
        State.AFTER_MARKER: _after_marker,
        State.ARRAY_CALL: _array_call,
        State.ARRAY_NEXT: _array_next,
        State.NAME: _head,
        State.CALL_ID: _head,
        State.ARGS_START: _args_start,
        State.ARGS: _args,
    }
