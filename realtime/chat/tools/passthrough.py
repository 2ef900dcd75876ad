"""passthrough: no tool calls; every character is content, exactly as generated."""

from __future__ import annotations

from enum import IntEnum

from realtime.chat.tools.base import Step, ToolParser


class State(IntEnum):
    CONTENT = 0


class PassthroughToolParser(ToolParser):
    name = "passthrough"
    _gate = False
    initial = content_state = State.CONTENT

    def _content(self, buf: str, i: int, final: bool) -> Step:
        self._out.content(buf[i:])
        return len(buf), None

    states = {State.CONTENT: _content}
