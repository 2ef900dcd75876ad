"""Reads one JSON tool call as its text arrives, streaming the arguments as they come.

Shared by every format whose calls are written in JSON, in one of two shapes:

* a call object, `{"name": ..., "arguments": {...}}` (hermes, llama3_json, json,
  mistral's array layout): `JsonCallReader(out, check_name, raw_prefix)`;
* only the arguments object, for a call whose name the format's own markup gave
  (mistral's `NAME[ARGS]{...}`, deepseek_v3): `JsonCallReader(..., name=NAME)`.

The arguments object is passed on as the model wrote it, byte for byte, so the
streamed pieces concatenate to exactly the text a complete parse returns. In a
call object, keys may come in any order; unknown keys (`"type"`, `"id"`, ...) are
checked for syntax and skipped.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from enum import IntEnum
from typing import ClassVar, Protocol

from realtime.chat.tools.base import ToolOutput
from realtime.chat.tools.json_value_scanner import JsonValueScanner

_WS = " \t\n\r"
NAME_KEYS = frozenset({"name"})
ARGUMENT_KEYS = frozenset({"arguments", "parameters"})


class ReadStatus(IntEnum):
    """Where a call stands after `JsonCallReader.step`."""

    MORE = 0  # the call goes on in the next piece
    DONE = 1  # the call ended well formed
    FAILED = 2  # the call was malformed or truncated; its raw text went out as content


MORE, DONE, FAILED = ReadStatus.MORE, ReadStatus.DONE, ReadStatus.FAILED


class CallScanner(Protocol):
    """What `JsonCallReader` drives: after each `scan`, `error`, `name`, `done` and
    `take_arguments()` say what the text so far amounts to."""

    name: str | None
    error: str | None

    @property
    def done(self) -> bool: ...

    def scan(self, text: str, pos: int) -> int: ...

    def take_arguments(self) -> str: ...


class _Object(IntEnum):
    """The states of a call object. KEY and VALUE hand each string, or each value,
    to a `JsonValueScanner`; the others read one structural character."""

    OPEN = 0  # before `{`
    KEY_OR_END = 1  # after `{`: a key or `}`
    KEY_NEXT = 2  # after `,`: a key
    KEY = 3  # inside a key's string
    COLON = 4
    VALUE_START = 5  # the value's first character decides what it is
    VALUE = 6  # inside a value
    AFTER_MEMBER = 7  # `,` or `}`
    DONE = 8
    ERROR = 9


class _Member(IntEnum):
    """What the value being read is, for the call."""

    OTHER = 0  # skipped once it is known to be valid JSON
    NAME = 1
    ARGS_OBJECT = 2  # streamed piece by piece
    ARGS_STRING = 3  # a JSON string holding the arguments object, decoded at its end


# The hot loop reads module globals: an enum member looked up on its class costs
# several times as much on the Python versions this supports.
_KEY, _VALUE, _DONE = _Object.KEY, _Object.VALUE, _Object.DONE
_NAME, _ARGS_OBJECT, _ARGS_STRING = _Member.NAME, _Member.ARGS_OBJECT, _Member.ARGS_STRING

_ObjectHandler = Callable[["CallObjectScanner", str, int], int]


class CallObjectScanner:
    """One call object, `{"name": ..., "arguments": {...}}`.

    `name` is set as soon as the name's string is complete, and `scan` returns
    right there, so the caller can start the call before anything after the name.
    Arguments written as an object are available piece by piece as they are
    scanned; arguments written as a JSON string holding an object (some models do
    that) are decoded and made available at once when the string ends. A call
    without arguments gets `{}`.
    """

    __slots__ = (
        "_args",
        "_args_seen",
        "_buf",
        "_key",
        "_member",
        "_scanner",
        "_state",
        "error",
        "name",
    )

    def __init__(self) -> None:
        self._state = _Object.OPEN
        self._scanner = JsonValueScanner()
        self._buf: list[str] = []
        self._key = ""
        self._member = _Member.OTHER
        self._args: list[str] = []
        self._args_seen = False
        self.name: str | None = None
        self.error: str | None = None

    @property
    def done(self) -> bool:
        return self._state == _DONE

    def take_arguments(self) -> str:
        """Arguments text scanned since the last call (only ever a valid prefix)."""
        text = "".join(self._args)
        self._args.clear()
        return text

    def scan(self, text: str, pos: int = 0) -> int:
        """Consume `text[pos:]` up to the end of the object, a fault, or the end of the name."""
        i, n = pos, len(text)
        handlers = self._handlers
        while i < n and self._state < _DONE:
            state = self._state
            if state == _KEY or state == _VALUE:
                named = self.name is not None
                i = self._in_value(text, i)
                if not named and self.name is not None:
                    return i  # let the caller start the call before anything after the name
            elif text[i] in _WS:
                i += 1
            else:
                i = handlers[state](self, text, i)
        return i

    # Structural states: `text[i]` is a character other than whitespace; each
    # handler consumes what it accepts and sets the next state.

    def _at_open(self, text: str, i: int) -> int:
        if text[i] != "{":
            return self._fail(i, "a tool call must be a JSON object")
        self._state = _Object.KEY_OR_END
        return i + 1

    def _at_key(self, text: str, i: int) -> int:
        c = text[i]
        if c == "}" and self._state == _Object.KEY_OR_END:
            return self._close(i + 1)
        if c != '"':
            return self._fail(i, f"unexpected {c!r} where a key should start")
        self._start_value(_Object.KEY)
        return i  # the quote is the first character of the key's string

    def _at_colon(self, text: str, i: int) -> int:
        c = text[i]
        if c != ":":
            return self._fail(i, f"unexpected {c!r} where ':' should be")
        self._state = _Object.VALUE_START
        return i + 1

    def _at_value_start(self, text: str, i: int) -> int:
        problem = self._classify(text[i])
        if problem:
            return self._fail(i, problem)
        self._start_value(_Object.VALUE)
        return i

    def _after_member(self, text: str, i: int) -> int:
        c = text[i]
        if c == ",":
            self._state = _Object.KEY_NEXT
            return i + 1
        if c == "}":
            return self._close(i + 1)
        return self._fail(i, f"unexpected {c!r} after a member of the call object")

    _handlers: ClassVar[Mapping[int, _ObjectHandler]] = {
        _Object.OPEN: _at_open,
        _Object.KEY_OR_END: _at_key,
        _Object.KEY_NEXT: _at_key,
        _Object.COLON: _at_colon,
        _Object.VALUE_START: _at_value_start,
        _Object.AFTER_MEMBER: _after_member,
    }

    def _in_value(self, text: str, i: int) -> int:
        """A key's string or a member's value, through the value scanner."""
        scanner = self._scanner
        end = scanner.scan(text, i)
        piece = text[i:end]
        in_key = self._state == _KEY
        member = self._member
        if not in_key and member == _ARGS_OBJECT:
            self._args.append(piece)
        elif in_key or member == _NAME or member == _ARGS_STRING:
            self._buf.append(piece)
        if scanner.error is not None:
            return self._fail(end, scanner.error)
        if not scanner.done:
            return end
        if in_key:
            self._key = json.loads("".join(self._buf))
            self._state = _Object.COLON
            return end
        if member == _NAME:
            name = json.loads("".join(self._buf))
            if not isinstance(name, str) or not name.strip():
                return self._fail(end, "the call's name must be a non-empty string")
            self.name = name
        elif member == _ARGS_STRING:
            decoded = json.loads("".join(self._buf))
            if not _is_json_object(decoded):
                return self._fail(end, "the arguments string does not hold a JSON object")
            self._args.append(decoded)
        self._state = _Object.AFTER_MEMBER
        return end

    def _start_value(self, state: _Object) -> None:
        self._state = state
        self._scanner = JsonValueScanner()
        self._buf.clear()

    def _classify(self, first: str) -> str | None:
        """Decide what the value after the current key is; why it cannot be, or None."""
        key = self._key
        if key in NAME_KEYS:
            if self.name is not None:
                return "the call object has two names"
            self._member = _Member.NAME
        elif key in ARGUMENT_KEYS:
            if self._args_seen:
                return "the call object has two argument members"
            self._args_seen = True
            if first == "{":
                self._member = _Member.ARGS_OBJECT
            elif first == '"':
                self._member = _Member.ARGS_STRING
            else:
                return "the arguments must be a JSON object"
        else:
            self._member = _Member.OTHER
        return None

    def _close(self, end: int) -> int:
        if self.name is None:
            return self._fail(end, "the call object has no name")
        if not self._args_seen:
            self._args.append("{}")
        self._state = _Object.DONE
        return end

    def _fail(self, i: int, reason: str) -> int:
        self._state = _Object.ERROR
        self.error = reason
        return i


def _is_json_object(text: str) -> bool:
    try:
        return isinstance(json.loads(text), dict)
    except (ValueError, RecursionError):  # a model can nest deeper than Python recurses
        return False


class ArgumentsScanner:
    """The arguments object of a call whose name is already known.

    The text handed to the first `scan` must start at the object's `{`: the
    format checks that before it commits to a call.
    """

    __slots__ = ("_args", "_scanner", "error", "name")

    def __init__(self, name: str) -> None:
        self.name: str | None = name
        self.error: str | None = None
        self._scanner = JsonValueScanner()
        self._args: list[str] = []

    @property
    def done(self) -> bool:
        return self._scanner.done

    def scan(self, text: str, pos: int = 0) -> int:
        end = self._scanner.scan(text, pos)
        self._args.append(text[pos:end])
        self.error = self._scanner.error
        return end

    def take_arguments(self) -> str:
        text = "".join(self._args)
        self._args.clear()
        return text


class JsonCallReader:
    """Reads one call for a parser: starts it once its name is known and accepted,
    forwards the argument pieces, and ends or fails it.

    `raw_prefix` is the call's text before what the reader reads (its opening
    marker, say); with what the reader has read, it becomes content if the call
    fails. Given `name`, the reader reads only the arguments object, and starts
    the call (with `call_id`, when the model wrote a usable one) before reading it.
    """

    __slots__ = ("_call_id", "_check", "_out", "_raw", "_scanner", "_started")

    def __init__(
        self,
        out: ToolOutput,
        check_name: Callable[[str], str | None],
        raw_prefix: str = "",
        *,
        name: str | None = None,
        call_id: str | None = None,
    ) -> None:
        self._out = out
        self._check = check_name
        self._call_id = call_id
        self._scanner: CallScanner = CallObjectScanner() if name is None else ArgumentsScanner(name)
        self._raw = [raw_prefix]
        self._started = False

    @property
    def raw(self) -> str:
        return "".join(self._raw)

    def step(self, buf: str, i: int, *, final: bool) -> tuple[int, ReadStatus]:
        """Read from `i`; return (next index, MORE | DONE | FAILED).

        The call starts as soon as its name is complete, whatever follows in the
        same piece, so where the text was split never changes the outcome.
        """
        scanner, out = self._scanner, self._out
        n = len(buf)
        if not self._started:
            self._start_if_named()  # a name the markup gave is checked before any text
        while scanner.error is None and i < n:
            j = scanner.scan(buf, i)
            self._raw.append(buf[i:j])
            i = j
            if not self._started:
                self._start_if_named()
            if self._started:
                # Before a fault too: the valid prefix is what a stream has already shown.
                out.arguments(scanner.take_arguments())
            if scanner.done:
                out.end()
                return i, DONE
        if scanner.error is not None:
            out.fail(self.raw, scanner.error)
            return i, FAILED
        if final:
            out.fail(self.raw, "the output ended inside a tool call")
            return i, FAILED
        return i, MORE

    def _start_if_named(self) -> None:
        """Start the call once its name is known, or refuse the name (an error)."""
        scanner = self._scanner
        if scanner.error is None and scanner.name is not None:
            problem = self._check(scanner.name)
            if problem:
                scanner.error = problem
            else:
                self._out.start(scanner.name, self._call_id)
                self._started = True
