"""hermes: Hermes 2 Pro / Qwen2.5 / Qwen3 calls in `<tool_call>` blocks.

    <tool_call>
    {"name": "get_weather", "arguments": {"city": "Paris"}}
    </tool_call>

Blocks may appear anywhere and repeat (parallel calls); text around them is
content. A call is complete when its JSON object closes; the closing tag is
expected but a model that stops right after the object (EOS instead of the tag)
still made its call.
"""

from __future__ import annotations

from enum import IntEnum

from realtime.chat.tools.base import Step, ToolParser, skip_ws
from realtime.chat.tools.json_call_reader import DONE, MORE, JsonCallReader

START, END = "<tool_call>", "</tool_call>"


class State(IntEnum):
    CONTENT = 0  # text, up to `<tool_call>`
    CALL = 1  # the call's JSON object
    AFTER = 2  # whitespace, then the closing tag (else the text is content)


class HermesToolParser(ToolParser):
    name = "hermes"
    markers = (START, END)
    initial = content_state = State.CONTENT
    open_states = frozenset({State.CALL})

    def _setup(self) -> None:
        self._call: JsonCallReader | None = None

    def _content(self, buf: str, i: int, final: bool) -> Step:
        j, end = self._content_until(buf, i, START, final=final)
        if j == -1:
            return end, None
        self._call = JsonCallReader(self._out, self.check_name, START)
        return j + len(START), State.CALL

    def _in_call(self, buf: str, i: int, final: bool) -> Step:
        assert self._call is not None
        i, status = self._call.step(buf, i, final=final)
        if status == MORE:
            return i, None
        return i, State.AFTER if status == DONE else State.CONTENT

    def _after(self, buf: str, i: int, final: bool) -> Step:
        j = skip_ws(buf, i)
        if buf.startswith(END, j):
            return j + len(END), State.CONTENT
        if not final and END.startswith(buf[j:]):
            return i, None
        return i, State.CONTENT

    states = {State.CONTENT: _content, State.CALL: _in_call, State.AFTER: _after}
