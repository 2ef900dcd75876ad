"""qwen3_coder: Qwen3-Coder's XML-style calls.

    <tool_call>
    <function=get_weather>
    <parameter=city>
    Paris
    </parameter>
    <parameter=days>
    3
    </parameter>
    </function>
    </tool_call>

Values are raw text (one newline after the opening tag and one before the
closing tag are layout). They are typed by the tool's JSON schema when the
request declared one: `integer`/`number`/`boolean`/`null`/`object`/`array`
values are converted, and a value that does not convert stays a string (logged
at debug). Parameters the schema does not describe are strings. Each parameter
is emitted as soon as its closing tag arrives; the pieces concatenate to the
arguments as `json.dumps` writes them. A value whose `</parameter>` is missing
ends at the next `<parameter=` or `</function>`.
"""

from __future__ import annotations

import ast
import json
import logging
from collections.abc import Mapping
from enum import IntEnum
from typing import Any

from realtime.chat.tools.base import Step, ToolParser, find_first, held_prefix, skip_ws

TOOL_CALL, TOOL_CALL_END = "<tool_call>", "</tool_call>"
FUNCTION, FUNCTION_END = "<function=", "</function>"
PARAMETER, PARAMETER_END = "<parameter=", "</parameter>"
_VALUE_ENDS = (PARAMETER_END, PARAMETER, FUNCTION_END)

logger = logging.getLogger("realtime.chat.tools")


class State(IntEnum):
    CONTENT = 0  # text, up to `<tool_call>`
    HEAD = 1  # whitespace, then `<function=`
    FN_NAME = 2  # the function's name, up to `>`
    BODY = 3  # whitespace, then `<parameter=` or `</function>`
    P_NAME = 4  # a parameter's name, up to `>`
    VALUE = 5  # a parameter's value, up to `</parameter>` (or the next tag)
    AFTER = 6  # whitespace, then `</tool_call>` (else the text is content)


class Qwen3CoderToolParser(ToolParser):
    name = "qwen3_coder"
    markers = (TOOL_CALL, TOOL_CALL_END)
    initial = content_state = State.CONTENT
    open_states = frozenset(State) - {State.CONTENT, State.AFTER}

    def _setup(self) -> None:
        self._fn = ""
        self._param = ""
        self._value: list[str] = []
        self._keys: set[str] = set()

    def _content(self, buf: str, i: int, final: bool) -> Step:
        j, end = self._content_until(buf, i, TOOL_CALL, final=final)
        if j == -1:
            return end, None
        self._raw = [TOOL_CALL]
        return j + len(TOOL_CALL), State.HEAD

    def _tag(self, buf: str, i: int, final: bool) -> Step:
        """Whitespace, then the tag(s) this state expects."""
        j = skip_ws(buf, i)
        self._raw.append(buf[i:j])
        expected = (FUNCTION,) if self._state == State.HEAD else (PARAMETER, FUNCTION_END)
        tag = next((t for t in expected if buf.startswith(t, j)), None)
        if tag is None:
            if not final and held_prefix(buf, j, expected) == len(buf) - j:
                return j, None
            return j, self._fail(f"expected {' or '.join(expected)}")
        self._raw.append(tag)
        j += len(tag)
        if tag == FUNCTION_END:
            self._out.arguments("}" if self._keys else "{}")
            self._out.end()
            self._raw = []
            return j, State.AFTER
        self._param = ""
        if tag == FUNCTION:
            self._fn = ""
            return j, State.FN_NAME
        return j, State.P_NAME

    def _tag_name(self, buf: str, i: int, final: bool) -> Step:
        """The name in `<function=NAME>` or `<parameter=NAME>`."""
        j = buf.find(">", i)
        stop = _first_newline_or_tag(buf, i, len(buf) if j == -1 else j)
        if stop != -1 or (j == -1 and final):
            stop = len(buf) if stop == -1 else stop
            self._raw.append(buf[i:stop])
            return stop, self._fail("a tag's name is not closed with '>'")
        if j == -1:
            return i, None
        name = buf[i:j].strip()
        self._raw.append(buf[i : j + 1])
        if self._state == State.FN_NAME:
            problem = self.check_name(name)
            if problem:
                return j + 1, self._fail(problem)
            self._fn = name
            self._keys = set()
            self._out.start(name)
            return j + 1, State.BODY
        if not name or name in self._keys:
            return j + 1, self._fail(f"parameter {name!r} is empty or repeated")
        self._param = name
        self._value = []
        return j + 1, State.VALUE

    def _value_text(self, buf: str, i: int, final: bool) -> Step:
        j, tag = find_first(buf, i, _VALUE_ENDS)
        if j == -1:
            end = len(buf) - (0 if final else held_prefix(buf, i, _VALUE_ENDS))
            self._value.append(buf[i:end])
            self._raw.append(buf[i:end])
            if final:
                return end, self._fail("the output ended inside a parameter value")
            return end, None
        self._value.append(buf[i:j])
        self._raw.append(buf[i:j])
        if tag == PARAMETER_END:
            self._raw.append(tag)
            j += len(tag)
        self._emit_parameter()
        return j, State.BODY

    def _after(self, buf: str, i: int, final: bool) -> Step:
        j = skip_ws(buf, i)
        if buf.startswith(TOOL_CALL_END, j):
            return j + len(TOOL_CALL_END), State.CONTENT
        if not final and TOOL_CALL_END.startswith(buf[j:]):
            return i, None
        return i, State.CONTENT

    states = {
        State.CONTENT: _content,
        State.HEAD: _tag,
        State.BODY: _tag,
        State.FN_NAME: _tag_name,
        State.P_NAME: _tag_name,
        State.VALUE: _value_text,
        State.AFTER: _after,
    }

    def _emit_parameter(self) -> None:
        text = "".join(self._value)
        if text.startswith("\n"):
            text = text[1:]
        if text.endswith("\n"):
            text = text[:-1]
        value = typed_value(text, self._schema(self._param))
        prefix = ", " if self._keys else "{"
        self._keys.add(self._param)
        self._out.arguments(
            prefix + json.dumps(self._param) + ": " + json.dumps(value, ensure_ascii=False)
        )

    def _schema(self, param: str) -> Mapping[str, Any]:
        spec = self.tools.get(self._fn)
        if spec is None:
            return {}
        properties = spec.parameters.get("properties") or {}
        schema = properties.get(param)
        return schema if isinstance(schema, Mapping) else {}


def _first_newline_or_tag(buf: str, start: int, end: int) -> int:
    """A tag name never spans a line or holds another tag: where it went wrong, or -1."""
    for needle in ("\n", "<"):
        k = buf.find(needle, start, end)
        if k != -1:
            return k
    return -1


def typed_value(text: str, schema: Mapping[str, Any]) -> Any:
    """`text` converted to the type(s) the schema names; the string itself otherwise."""
    kinds = schema.get("type")
    if isinstance(kinds, str):
        kinds = [kinds]
    if not kinds:
        kinds = [k.get("type") for k in schema.get("anyOf") or () if isinstance(k, Mapping)]
    for kind in kinds or ():
        try:
            return _convert(text, kind)
        except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
            continue
    if kinds and "string" not in kinds:
        logger.debug("qwen3_coder tool parser: %r is not %s; kept as a string", text[:80], kinds)
    return text


def _convert(text: str, kind: Any) -> Any:
    stripped = text.strip()
    if kind == "string":
        return text
    if kind == "integer":
        return int(stripped)
    if kind == "number":
        number = float(stripped)
        if number != number or number in (float("inf"), float("-inf")):
            raise ValueError("not finite")
        return int(stripped) if stripped.lstrip("-").isdigit() else number
    if kind == "boolean":
        lowered = stripped.lower()
        if lowered in ("true", "false"):
            return lowered == "true"
        raise ValueError("not a boolean")
    if kind == "null":
        if stripped.lower() in ("null", "none"):
            return None
        raise ValueError("not null")
    if kind in ("object", "array"):
        try:
            value = json.loads(stripped)
        except ValueError:
            value = ast.literal_eval(stripped)
        if isinstance(value, dict if kind == "object" else list):
            json.dumps(value, allow_nan=False)
            return value
        raise ValueError(f"not an {kind}")
    raise ValueError(f"unknown type {kind!r}")
