"""The machinery every parser shares: state tables that are whole, and the loop that runs them."""

from __future__ import annotations

from enum import IntEnum

import pytest

from realtime.chat.tools.base import Step, ToolParser, ToolSpec, tool_specs
from realtime.chat.tools.registry import tool_parser_class, tool_parser_names
from realtime.protocol.output import ContentDelta, ToolCallArguments, ToolCallStart


@pytest.mark.parametrize("name", tool_parser_names())
def test_every_state_has_a_handler(name: str) -> None:
    cls = tool_parser_class(name)
    state_enum = type(cls.initial)
    assert issubclass(state_enum, IntEnum)
    assert set(cls.states) == set(state_enum), "a state without a handler, or a stray one"
    assert cls.content_state in cls.states
    assert cls.open_states <= set(cls.states)
    assert cls.content_state not in cls.open_states, "content must be a place to rest"
    assert all(callable(h) for h in cls.states.values())


class Toy(IntEnum):
    TEXT = 0
    CALL = 1


class ToyParser(ToolParser):
    """`<NAME>` is a call with no arguments: enough to watch the loop run a table."""

    name = "toy"
    initial = content_state = Toy.TEXT
    open_states = frozenset({Toy.CALL})

    def _setup(self) -> None:
        self.visits: list[tuple[Toy, str, bool]] = []

    def _text(self, buf: str, i: int, final: bool) -> Step:
        self.visits.append((Toy.TEXT, buf[i:], final))
        j, end = self._content_until(buf, i, "<", final=final)
        if j == -1:
            return end, None
        self._raw = ["<"]
        return j + 1, Toy.CALL

    def _call(self, buf: str, i: int, final: bool) -> Step:
        self.visits.append((Toy.CALL, buf[i:], final))
        j = buf.find(">", i)
        if j == -1:
            if final:
                self._raw.append(buf[i:])
                return len(buf), self._fail("the output ended inside a call")
            return i, None  # wait for the name's end; nothing consumed
        self._out.start(buf[i:j], "call_1")
        self._out.arguments("{}")
        self._out.end()
        return j + 1, Toy.TEXT

    states = {Toy.TEXT: _text, Toy.CALL: _call}


def test_a_handler_that_waits_keeps_its_text_for_the_next_piece() -> None:
    parser = ToyParser()
    assert parser.feed("hi <f") == [ContentDelta("hi")]
    assert parser._state == Toy.CALL
    assert parser._buf == "f"  # returned unconsumed, read again with the next piece
    assert parser.feed("n> bye") == [
        ToolCallStart(0, "call_1", "fn"),
        ToolCallArguments(0, "{}"),
        ContentDelta(" bye"),
    ]
    assert parser.finish() == []
    assert (Toy.CALL, "fn> bye", False) in parser.visits


def test_finish_runs_only_open_states_with_no_text_left() -> None:
    resting = ToyParser()
    resting.feed("plain")
    resting.visits.clear()
    resting.finish()
    assert resting.visits == []  # TEXT is not open: nothing to resolve

    open_call = ToyParser()
    open_call.feed("x <f")
    open_call.visits.clear()
    assert open_call.finish() == [ContentDelta(" <f")]
    assert open_call.visits == [(Toy.CALL, "f", True)]  # then TEXT, with nothing left, is not run
    assert open_call._state == Toy.TEXT


def test_a_failed_call_resumes_in_the_content_state(caplog: pytest.LogCaptureFixture) -> None:
    parser = ToyParser()
    parser.feed("<broken")
    assert parser.finish() == [ContentDelta("<broken")]
    assert parser._raw == []
    assert "the output ended inside a call" in caplog.text


def test_tool_specs_reads_openai_tools() -> None:
    tools = [
        {"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}},
        {"type": "function", "function": {}},
    ]
    assert tool_specs(tools) == [ToolSpec("f", {"type": "object"})]
