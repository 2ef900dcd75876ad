"""JsonCallReader, the one reader of JSON calls: a call object, or the arguments of a named call.

Driven directly against a real ToolOutput, at every split of the text: what it
emits, where it stops, and what status it reports.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

import pytest

from realtime.chat.tools.base import ToolOutput
from realtime.chat.tools.json_call_reader import (
    DONE,
    FAILED,
    MORE,
    CallObjectScanner,
    JsonCallReader,
    ReadStatus,
)
from realtime.protocol.output import (
    ContentDelta,
    OutputEvent,
    ParsedOutput,
    ToolCallArguments,
    ToolCallStart,
    fold_events,
)
from tests.chat.tools.harness import splits


def refuse_unknown(name: str) -> str | None:
    return None if name in ("f", "get_time") else f"{name!r} is not a tool"


def read(
    pieces: Sequence[str],
    *,
    name: str | None = None,
    call_id: str | None = None,
    raw_prefix: str = "",
    incremental: bool = True,
    final: bool = True,
) -> tuple[list[OutputEvent], ReadStatus, str]:
    """Feed `pieces` to one reader as a parser would: (events, last status, text left over)."""
    out = ToolOutput("test", incremental=incremental, gate=False, id_factory=lambda: "call_x")
    reader = JsonCallReader(out, refuse_unknown, raw_prefix, name=name, call_id=call_id)
    events: list[OutputEvent] = []
    status, rest = MORE, ""
    for k, piece in enumerate(pieces):
        last = k == len(pieces) - 1
        i, status = reader.step(piece, 0, final=final and last)
        events += out.take()
        if status != MORE:
            rest = piece[i:] + "".join(pieces[k + 1 :])
            break
        assert i == len(piece), "MORE means the whole piece was read"
    return events, status, rest


def folded(events: list[OutputEvent]) -> ParsedOutput:
    return fold_events(events)


WELL_FORMED = [
    ('{"name": "f", "arguments": {"a": 1, "b": [true, null]}}', "f", '{"a": 1, "b": [true, null]}'),
    ('{"arguments": {"x": "é"}, "name": "get_time"}', "get_time", '{"x": "é"}'),
    ('{"type": "function", "name": "f", "parameters": {}, "id": [1, {"k": 2}]}', "f", "{}"),
    ('{"name": "f"}', "f", "{}"),
    ('{"name": "f", "arguments": "{\\"a\\": 1}"}', "f", '{"a": 1}'),
    (' {\n "name" : "f" ,\n "arguments" : { } \n}', "f", "{ }"),
]


@pytest.mark.parametrize(("text", "name", "arguments"), WELL_FORMED)
def test_a_call_object_at_any_split(text: str, name: str, arguments: str) -> None:
    for pieces in splits(text + " trailing", random_trials=10):
        events, status, rest = read(pieces)
        assert status == DONE, pieces
        assert rest == " trailing", pieces
        parsed = folded(events)
        assert [(c.id, c.name, c.arguments) for c in parsed.tool_calls] == [
            ("call_x", name, arguments)
        ], pieces
        assert parsed.content == ""


def test_the_call_starts_when_its_name_is_complete() -> None:
    out = ToolOutput("test", incremental=True, gate=False, id_factory=lambda: "call_x")
    reader = JsonCallReader(out, refuse_unknown)
    assert reader.step('{"name": "f', 0, final=False) == (len('{"name": "f'), MORE)
    assert out.take() == []
    assert reader.step('"', 0, final=False) == (1, MORE)
    assert out.take() == [ToolCallStart(0, "call_x", "f")]
    text = ', "arguments": {"a": [1, '
    assert reader.step(text, 0, final=False) == (len(text), MORE)
    assert out.take() == [ToolCallArguments(0, '{"a": [1, ')]
    assert reader.step("2]}}", 0, final=False) == (4, DONE)
    assert out.take() == [ToolCallArguments(0, "2]}")]


def test_arguments_before_the_name_are_sent_with_the_start() -> None:
    events, status, _ = read(['{"arguments": {"a": 1}, ', '"name": "f"}'])
    assert status == DONE
    assert events == [ToolCallStart(0, "call_x", "f"), ToolCallArguments(0, '{"a": 1}')]


MALFORMED = [
    ("[1]", "a tool call must be a JSON object", 0),
    ("{1: 2}", "where a key should start", 1),
    ('{"name" "f"}', "where ':' should be", 8),
    ('{"name": "f" "x"}', "after a member of the call object", 13),
    ('{"name": 3}', "the call's name must be a non-empty string", 10),
    ('{"name": " "}', "the call's name must be a non-empty string", 12),
    ('{"name": "f", "name": "f"}', "the call object has two names", 22),
    ('{"name": "f", "arguments": {}, "parameters": {}}', "two argument members", 45),
    ('{"name": "f", "arguments": [1]}', "the arguments must be a JSON object", 27),
    ('{"name": "f", "arguments": "[1]"}', "does not hold a JSON object", 32),
    ('{"arguments": {}}', "the call object has no name", 17),
    ('{"name": "f", "arguments": {"a": tru}}', "malformed literal", 36),
    ('{"name": "shutdown", "arguments": {}}', "'shutdown' is not a tool", 19),
]


@pytest.mark.parametrize(("text", "reason", "stop"), MALFORMED)
def test_a_malformed_call_object_fails_at_the_offending_character(
    text: str, reason: str, stop: int, caplog: pytest.LogCaptureFixture
) -> None:
    for pieces in splits(text, random_trials=10):
        caplog.clear()
        events, status, rest = read(pieces, raw_prefix="<call>", incremental=False)
        assert status == FAILED, pieces
        assert rest == text[stop:], pieces
        # Held (complete) form: no call, and the raw text up to the fault is content.
        assert events == [ContentDelta("<call>" + text[:stop])], pieces
        assert reason in caplog.text, pieces


def test_a_streamed_call_keeps_its_valid_prefix_when_it_breaks() -> None:
    text = '{"name": "f", "arguments": {"a": 1, "b": ]}'
    events, status, rest = read([text])
    assert status == FAILED
    assert rest == "]}"
    assert events == [
        ToolCallStart(0, "call_x", "f"),
        ToolCallArguments(0, '{"a": 1, "b": '),
        ContentDelta(text[: text.index("]")]),
    ]


def test_the_end_of_the_output_inside_a_call_fails_it() -> None:
    events, status, rest = read(['{"name": "f", "argu'], incremental=False)
    assert (status, rest) == (FAILED, "")
    assert events == [ContentDelta('{"name": "f", "argu')]
    _, status, _ = read(['{"name": "f", "argu'], final=False)
    assert status == MORE


def test_holding_mode_sends_nothing_until_the_call_ends() -> None:
    out = ToolOutput("test", incremental=False, gate=False, id_factory=lambda: "call_x")
    reader = JsonCallReader(out, refuse_unknown)
    assert reader.step('{"name": "f", "arguments": {"a": ', 0, final=False)[1] == MORE
    assert out.take() == []
    assert reader.step("1}}", 0, final=False)[1] == DONE
    assert fold_events(out.take()).tool_calls[0].arguments == '{"a": 1}'


# The arguments of a call whose name the format's markup gave (mistral v11, deepseek_v3).


def test_a_named_call_starts_before_any_text_and_streams_its_arguments() -> None:
    text = '{"a": {"b": [1, 2]}, "c": "x"}'
    for pieces in splits(text + "```", random_trials=10):
        events, status, rest = read(pieces, name="f", call_id="abcdefghi")
        assert status == DONE, pieces
        assert rest == "```", pieces
        assert events[0] == ToolCallStart(0, "abcdefghi", "f"), pieces
        assert fold_events(events).tool_calls[0].arguments == text, pieces
        assert json.loads(fold_events(events).tool_calls[0].arguments) == json.loads(text)


def test_a_named_call_gets_a_fresh_id_without_one() -> None:
    events, _, _ = read(["{}"], name="f")
    assert events == [ToolCallStart(0, "call_x", "f"), ToolCallArguments(0, "{}")]


def test_a_refused_name_fails_before_reading_anything(caplog: pytest.LogCaptureFixture) -> None:
    out = ToolOutput("test", incremental=True, gate=False, id_factory=lambda: "call_x")
    reader = JsonCallReader(out, refuse_unknown, "NAME[ARGS]", name="rm")
    assert reader.step('{"path": "/"}', 0, final=False) == (0, FAILED)
    assert out.take() == [ContentDelta("NAME[ARGS]")]
    assert "'rm' is not a tool" in caplog.text


def test_named_arguments_that_break_or_end_early_fail() -> None:
    events, status, rest = read(['{"a": 1,', "}"], name="f", raw_prefix="f[ARGS]")
    assert (status, rest) == (FAILED, "}")
    assert fold_events(events).content == 'f[ARGS]{"a": 1,'
    events, status, _ = read(['{"a": '], name="f", raw_prefix="f[ARGS]", incremental=False)
    assert status == FAILED
    assert events == [ContentDelta('f[ARGS]{"a": ')]


def test_the_call_object_table_has_a_handler_for_every_structural_state() -> None:
    from realtime.chat.tools.json_call_reader import _Object

    scanned = {_Object.KEY, _Object.VALUE}  # handed to the value scanner
    final = {_Object.DONE, _Object.ERROR}
    assert set(CallObjectScanner._handlers) == set(_Object) - scanned - final
