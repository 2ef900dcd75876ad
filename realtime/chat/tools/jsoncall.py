"""Reads one JSON tool-call object, `{"name": ..., "arguments": {...}}`, as its text arrives.

Shared by every format whose calls are JSON objects (hermes, llama3_json,
mistral's array form, json). The arguments object is passed on as the model
wrote it, byte for byte, so the streamed pieces concatenate to exactly the text a
complete parse returns. Keys may come in any order; unknown keys (`"type"`,
`"id"`, ...) are checked for syntax and skipped.
"""

from __future__ import annotations

import json
from collections.abc import Callable

from realtime.chat.tools.base import ToolOutput
from realtime.chat.tools.jsonscan import JsonScanner

_WS = " \t\n\r"
NAME_KEYS = frozenset({"name"})
ARGUMENT_KEYS = frozenset({"arguments", "parameters"})

_OPEN, _KEY_OR_END, _KEY_NEXT, _KEY, _COLON, _VALUE_START, _VALUE, _AFTER_MEMBER = range(8)
_DONE, _ERROR = range(8, 10)
_OTHER, _NAME, _ARGS_OBJECT, _ARGS_STRING = range(4)


class JsonCallObject:
    """One call object. After each `scan`, check `error`, `name`, `done`, `take_arguments()`.

    `name` is set as soon as the name's string is complete. Arguments written as
    an object are available piece by piece as they are scanned; arguments written
    as a JSON string holding an object (some models do that) are decoded and made
    available at once when the string ends. A call without arguments gets `{}`.
    """

    __slots__ = (
        "_args",
        "_args_seen",
        "_buf",
        "_key",
        "_kind",
        "_scanner",
        "_state",
        "error",
        "name",
    )

    def __init__(self) -> None:
        self._state = _OPEN
        self._scanner: JsonScanner | None = None
        self._buf: list[str] = []
        self._key = ""
        self._kind = _OTHER
        self._args: list[str] = []
        self._args_seen = False
        self.name: str | None = None
        self.error: str | None = None

    @property
    def done(self) -> bool:
        return self._state == _DONE

    @property
    def started(self) -> bool:
        """Whether the opening brace has been seen."""
        return self._state != _OPEN

    def take_arguments(self) -> str:
        """Arguments text scanned since the last call (only ever a valid prefix)."""
        text = "".join(self._args)
        self._args.clear()
        return text

    def scan(self, text: str, pos: int = 0) -> int:
        i, n = pos, len(text)
        while i < n and self._state not in (_DONE, _ERROR):
            state = self._state
            if state == _KEY or state == _VALUE:
                named = self.name is not None
                i = self._scan_value(text, i)
                if not named and self.name is not None:
                    return i  # let the caller start the call before anything after the name
                continue
            c = text[i]
            if c in _WS:
                i += 1
                continue
            if state == _OPEN:
                if c != "{":
                    return self._fail(i, "a tool call must be a JSON object")
                self._state = _KEY_OR_END
            elif state == _KEY_OR_END or state == _KEY_NEXT:
                if c == "}" and state == _KEY_OR_END:
                    return self._close(i + 1)
                if c != '"':
                    return self._fail(i, f"unexpected {c!r} where a key should start")
                self._start_value(_KEY)
                continue  # the quote is the first character of the key's string
            elif state == _COLON:
                if c != ":":
                    return self._fail(i, f"unexpected {c!r} where ':' should be")
                self._state = _VALUE_START
            elif state == _VALUE_START:
                problem = self._classify(c)
                if problem:
                    return self._fail(i, problem)
                self._start_value(_VALUE)
                continue
            else:  # _AFTER_MEMBER
                if c == ",":
                    self._state = _KEY_NEXT
                elif c == "}":
                    return self._close(i + 1)
                else:
                    return self._fail(i, f"unexpected {c!r} after a member of the call object")
            i += 1
        return i

    def _start_value(self, state: int) -> None:
        self._state = state
        self._scanner = JsonScanner()
        self._buf.clear()

    def _classify(self, first: str) -> str | None:
        key = self._key
        if key in NAME_KEYS:
            if self.name is not None:
                return "the call object has two names"
            self._kind = _NAME
        elif key in ARGUMENT_KEYS:
            if self._args_seen:
                return "the call object has two argument members"
            self._args_seen = True
            if first == "{":
                self._kind = _ARGS_OBJECT
            elif first == '"':
                self._kind = _ARGS_STRING
            else:
                return "the arguments must be a JSON object"
        else:
            self._kind = _OTHER
        return None

    def _scan_value(self, text: str, i: int) -> int:
        scanner = self._scanner
        assert scanner is not None
        end = scanner.scan(text, i)
        piece = text[i:end]
        if self._state == _VALUE and self._kind == _ARGS_OBJECT:
            self._args.append(piece)
        elif self._state == _KEY or self._kind in (_NAME, _ARGS_STRING):
            self._buf.append(piece)
        if scanner.error is not None:
            return self._fail(end, scanner.error)
        if not scanner.done:
            return end
        if self._state == _KEY:
            self._key = json.loads("".join(self._buf))
            self._state = _COLON
            return end
        if self._kind == _NAME:
            name = json.loads("".join(self._buf))
            if not isinstance(name, str) or not name.strip():
                return self._fail(end, "the call's name must be a non-empty string")
            self.name = name
        elif self._kind == _ARGS_STRING:
            decoded = json.loads("".join(self._buf))
            if not _is_json_object(decoded):
                return self._fail(end, "the arguments string does not hold a JSON object")
            self._args.append(decoded)
        self._state = _AFTER_MEMBER
        return end

    def _close(self, end: int) -> int:
        if self.name is None:
            return self._fail(end, "the call object has no name")
        if not self._args_seen:
            self._args.append("{}")
        self._state = _DONE
        return end

    def _fail(self, i: int, reason: str) -> int:
        self._state = _ERROR
        self.error = reason
        return i


def _is_json_object(text: str) -> bool:
    try:
        return isinstance(json.loads(text), dict)
    except (ValueError, RecursionError):  # a model can nest deeper than Python recurses
        return False


MORE, DONE, FAILED = range(3)


class JsonCallReader:
    """Drives one `JsonCallObject` for a parser: starts the call once its name is
    known and accepted, forwards argument pieces, ends or fails the call.

    `raw` is the call's text so far (opening marker included), which becomes
    content if the call fails.
    """

    __slots__ = ("_call_id", "_check", "_obj", "_out", "_raw", "_started")

    def __init__(
        self,
        out: ToolOutput,
        check_name: Callable[[str], str | None],
        raw_prefix: str = "",
        call_id: Callable[[], str] | None = None,
    ) -> None:
        self._out = out
        self._check = check_name
        self._call_id = call_id
        self._obj = JsonCallObject()
        self._raw = [raw_prefix]
        self._started = False

    @property
    def raw(self) -> str:
        return "".join(self._raw)

    @property
    def opened(self) -> bool:
        return self._obj.started

    def step(self, buf: str, i: int, *, final: bool) -> tuple[int, int]:
        """Scan from `i`; return (next index, MORE | DONE | FAILED).

        The call starts at the last character of its name, whatever follows in the
        same piece, so where the text was split never changes the outcome.
        """
        obj = self._obj
        while True:
            j = obj.scan(buf, i)
            self._raw.append(buf[i:j])
            i = j
            if obj.error is None and obj.name is not None and not self._started:
                problem = self._check(obj.name)
                if problem:
                    obj.error = problem
                else:
                    self._out.start(obj.name, self._call_id() if self._call_id else None)
                    self._started = True
            if self._started:
                # Before a fault too: the valid prefix is what a stream has already shown.
                self._out.arguments(obj.take_arguments())
            if obj.error is not None:
                self._out.fail(self.raw, obj.error)
                return i, FAILED
            if obj.done:
                self._out.end()
                return i, DONE
            if i == len(buf):
                break
        if final:
            self._out.fail(self.raw, "the output ended inside a tool call")
            return i, FAILED
        return i, MORE
