"""pythonic: calls written as a Python list, `[get_weather(city="Paris"), get_time()]`.

Used by Llama 3.2/4 and others. The list must be the start of the output (after
whitespace, optionally after `<|python_start|>`); anything after it is content.
Arguments must be keyword arguments with literal values (strings, numbers,
booleans, None, lists, tuples, dicts; JSON's `true`/`false`/`null` are accepted
too). They are read with `ast`, never evaluated, and re-written as JSON with
`json.dumps` spacing. Each argument is emitted as soon as it is complete, so the
pieces concatenate to `json.dumps(arguments, ensure_ascii=False)`.

A leading `[` that turns out not to be a call list (`[1, 2]`, a Markdown link)
is ordinary text and logged only at debug level.
"""

from __future__ import annotations

import ast
import json
import math
import re
from enum import IntEnum
from typing import Any

from realtime.chat.tools.base import Step, ToolParser, skip_ws

PYTHON_START, PYTHON_END = "<|python_start|>", "<|python_end|>"
_IDENT_START = re.compile(r"[A-Za-z_]")
_IDENT = re.compile(r"[A-Za-z0-9_.]*")
_CONSTANT_NAMES: dict[str, Any] = {
    "True": True,
    "False": False,
    "None": None,
    "true": True,
    "false": False,
    "null": None,
}


class State(IntEnum):
    START = 0  # whitespace, then `<|python_start|>`, `[` or content
    OPEN = 1  # after `<|python_start|>`: the list's `[`
    CONTENT = 2  # text, up to `<|python_start|>`
    LIST = 3  # a call's name starts (after `[` or `,`)
    NAME = 4  # the function's name, up to `(`
    ARGS = 5  # the keyword arguments, up to `)`
    AFTER_CALL = 6  # `,` and the next call, or the list's `]`
    END_LIST = 7  # an optional `<|python_end|>`


class PythonicToolParser(ToolParser):
    name = "pythonic"
    markers = (PYTHON_START, PYTHON_END)
    initial, content_state = State.START, State.CONTENT
    open_states = frozenset({State.OPEN, State.LIST, State.NAME, State.ARGS})

    def _setup(self) -> None:
        self._fn = ""
        self._calls_in_list = 0
        # argument scanning
        self._depth = 0
        self._quote = ""
        self._escape = False
        self._segment: list[str] = []
        self._keys: set[str] = set()

    def _start(self, buf: str, i: int, final: bool) -> Step:
        j = skip_ws(buf, i)
        if not final and PYTHON_START.startswith(buf[j:]):
            return i, None  # only whitespace, or maybe the marker
        self._out.content(buf[i:j])
        self._raw, self._calls_in_list = [], 0
        if buf.startswith(PYTHON_START, j):
            self._raw.append(PYTHON_START)
            return j + len(PYTHON_START), State.OPEN
        if j < len(buf) and buf[j] == "[":
            self._raw.append("[")
            return j + 1, State.LIST
        return j, State.CONTENT

    def _open(self, buf: str, i: int, final: bool) -> Step:
        j = skip_ws(buf, i)
        self._raw.append(buf[i:j])
        if j == len(buf) and not final:
            return j, None
        if j < len(buf) and buf[j] == "[":
            self._raw.append("[")
            return j + 1, State.LIST
        return j, self._fail("no call list after <|python_start|>", quiet=True)

    def _content(self, buf: str, i: int, final: bool) -> Step:
        j, end = self._content_until(buf, i, PYTHON_START, final=final)
        if j == -1:
            return end, None
        return j, State.START

    def _list(self, buf: str, i: int, final: bool) -> Step:
        j = skip_ws(buf, i)
        self._raw.append(buf[i:j])
        if j == len(buf):
            return j, self._fail("the output ended inside the call list") if final else None
        if not _IDENT_START.match(buf[j]):
            return j, self._fail("not a call list", quiet=self._calls_in_list == 0)
        self._fn = ""
        return j, State.NAME

    def _name(self, buf: str, i: int, final: bool) -> Step:
        j = _IDENT.match(buf, i).end()  # type: ignore[union-attr]
        self._fn += buf[i:j]
        self._raw.append(buf[i:j])
        if j == len(buf):
            return j, self._fail("the output ended inside the call list") if final else None
        if buf[j] != "(":
            return j, self._fail("not a call list", quiet=self._calls_in_list == 0)
        self._raw.append("(")
        problem = self.check_name(self._fn)
        if problem:
            return j + 1, self._fail(problem)
        self._out.start(self._fn)
        self._calls_in_list += 1
        self._depth, self._quote, self._escape = 0, "", False
        self._segment, self._keys = [], set()
        return j + 1, State.ARGS

    def _args(self, buf: str, i: int, final: bool) -> Step:
        """Split the call's arguments at top-level commas; emit each as it completes."""
        n = len(buf)
        start = i
        while i < n:
            c = buf[i]
            if self._quote:
                if self._escape:
                    self._escape = False
                elif c == "\\":
                    self._escape = True
                elif len(self._quote) == 1:
                    if c == self._quote:
                        self._quote = ""
                elif buf.startswith(self._quote, i):
                    self._quote = ""
                    i += 2
                elif c == self._quote[0] and not final and self._quote.startswith(buf[i:]):
                    break  # maybe the closing triple quote
                i += 1
                continue
            if c in "'\"":
                if buf.startswith(c * 3, i):
                    self._quote = c * 3
                    i += 3
                    continue
                if not final and (c * 3).startswith(buf[i:]):
                    break  # one or two quotes so far: maybe a triple quote
                self._quote = c
            elif c in "([{":
                self._depth += 1
            elif c in ")]}":
                if self._depth == 0 and c == ")":
                    self._segment.append(buf[start:i])
                    self._raw.append(buf[start : i + 1])
                    return i + 1, self._end_argument(closing=True)
                self._depth -= 1
            elif c == "," and self._depth == 0:
                self._segment.append(buf[start:i])
                self._raw.append(buf[start : i + 1])
                state = self._end_argument(closing=False)
                if state != State.ARGS:
                    return i + 1, state
                start = i + 1
            i += 1
        self._segment.append(buf[start:i])
        self._raw.append(buf[start:i])
        if final:
            return i, self._fail("the output ended inside a tool call")
        return i, None

    def _end_argument(self, *, closing: bool) -> int:
        """One argument is complete; emit it. Returns the state to go on in."""
        text = "".join(self._segment).strip()
        self._segment = []
        if text:
            try:
                key, value = _keyword(text)
            except ValueError as exc:
                return self._fail(str(exc))
            if key in self._keys:
                return self._fail(f"argument {key!r} given twice")
            prefix = ", " if self._keys else "{"
            self._keys.add(key)
            self._out.arguments(prefix + json.dumps(key) + ": " + value)
        elif not closing:
            return self._fail("empty argument")
        if not closing:
            return State.ARGS
        self._out.arguments("}" if self._keys else "{}")
        self._out.end()
        self._raw = []
        return State.AFTER_CALL

    def _after_call(self, buf: str, i: int, final: bool) -> Step:
        j = skip_ws(buf, i)
        if j == len(buf) and not final:
            return i, None
        if j < len(buf) and buf[j] == ",":
            self._raw = [buf[i : j + 1]]
            return j + 1, State.LIST
        if j < len(buf) and buf[j] == "]":
            return j + 1, State.END_LIST
        return i, State.CONTENT

    def _end_list(self, buf: str, i: int, final: bool) -> Step:
        j = skip_ws(buf, i)
        if not final and PYTHON_END.startswith(buf[j:]):
            return i, None
        if buf.startswith(PYTHON_END, j):
            return j + len(PYTHON_END), State.CONTENT
        return i, State.CONTENT

    states = {
        State.START: _start,
        State.OPEN: _open,
        State.CONTENT: _content,
        State.LIST: _list,
        State.NAME: _name,
        State.ARGS: _args,
        State.AFTER_CALL: _after_call,
        State.END_LIST: _end_list,
    }


def _keyword(text: str) -> tuple[str, str]:
    """`name=literal` -> (name, the literal as JSON text)."""
    try:
        tree = ast.parse(f"_({text})", mode="eval")
    except SyntaxError as exc:
        raise ValueError(f"argument {text[:40]!r} is not valid Python: {exc.msg}") from None
    call = tree.body
    if not isinstance(call, ast.Call) or call.args or len(call.keywords) != 1:
        raise ValueError(f"argument {text[:40]!r} is not a keyword argument")
    keyword = call.keywords[0]
    if keyword.arg is None:
        raise ValueError("**kwargs are not supported")
    try:
        return keyword.arg, json.dumps(_literal(keyword.value), ensure_ascii=False, allow_nan=False)
    except (ValueError, TypeError) as exc:
        raise ValueError(f"argument {keyword.arg!r}: {exc}") from None


def _literal(node: ast.expr) -> Any:
    """A JSON value from a literal expression; anything else is refused, nothing runs."""
    if isinstance(node, ast.Constant):
        constant = node.value
        if isinstance(constant, float) and not math.isfinite(constant):
            raise ValueError("non-finite number")
        if constant is None or isinstance(constant, str | int | float | bool):
            return constant
        raise ValueError(f"unsupported literal {type(constant).__name__}")
    if isinstance(node, ast.Name) and node.id in _CONSTANT_NAMES:
        return _CONSTANT_NAMES[node.id]
    if isinstance(node, ast.List | ast.Tuple):
        return [_literal(e) for e in node.elts]
    if isinstance(node, ast.Dict):
        out: dict[str, Any] = {}
        for key, item in zip(node.keys, node.values, strict=True):
            if not isinstance(key, ast.Constant) or not isinstance(key.value, str):
                raise ValueError("dict keys must be strings")
            out[key.value] = _literal(item)
        return out
    if (
        isinstance(node, ast.UnaryOp)
        and isinstance(node.op, ast.USub | ast.UAdd)
        and isinstance(node.operand, ast.Constant)
        and isinstance(node.operand.value, int | float)
        and not isinstance(node.operand.value, bool)
    ):
        value = node.operand.value
        return -value if isinstance(node.op, ast.USub) else value
    raise ValueError(f"{type(node).__name__} is not a literal")
