"""JsonValueScanner: an incremental syntax checker for one JSON value.

Streaming a tool call's arguments means forwarding raw JSON text before the
whole value has arrived. This scanner consumes text piece by piece and says,
for one JSON value, where it ends or at which character it stops being JSON, so
a parser only ever forwards a valid prefix and learns about a fault at the exact
character that caused it, whatever the split points were.
"""

from __future__ import annotations

import re

_WS = " \t\n\r"
_PLAIN = re.compile(r'[^"\\\x00-\x1f]*')
_HEX = frozenset("0123456789abcdefABCDEF")
_DIGITS = frozenset("0123456789")

# states
_VALUE, _OBJ_FIRST, _OBJ_KEY, _COLON, _ARR_FIRST, _AFTER, _STRING, _ESC, _UHEX = range(9)
_NUMBER, _LITERAL, _DONE, _ERROR = range(9, 13)

# number sub-states: which ones may end the number
_N_MINUS, _N_ZERO, _N_INT, _N_DOT, _N_FRAC, _N_E, _N_ESIGN, _N_EXP = range(8)
_N_ACCEPT = frozenset({_N_ZERO, _N_INT, _N_FRAC, _N_EXP})


class JsonValueScanner:
    """Validates one JSON value as its text arrives.

    `scan(text, pos)` consumes `text[pos:]` and returns the index after the last
    character it consumed. It stops right after the value ends (`done`), or
    before the first character that cannot continue it (`error` says why); in
    both cases the rest of `text` is not consumed.
    """

    __slots__ = ("_hex", "_key", "_lit", "_num", "_stack", "_state", "error")

    def __init__(self) -> None:
        self._stack: list[str] = []
        self._state = _VALUE
        self._key = False
        self._lit = ""
        self._hex = 0
        self._num = 0
        self.error: str | None = None

    @property
    def done(self) -> bool:
        return self._state == _DONE

    def close(self) -> bool:
        """End of input: a top-level number may end here. Returns `done`."""
        if self._state == _NUMBER and not self._stack and self._num in _N_ACCEPT:
            self._state = _DONE
        return self._state == _DONE

    def scan(self, text: str, pos: int = 0) -> int:
        i, n = pos, len(text)
        while i < n:
            state = self._state
            if state == _DONE or state == _ERROR:
                return i
            if state == _STRING:
                i = _PLAIN.match(text, i).end()  # type: ignore[union-attr]
                if i == n:
                    return i
                c = text[i]
                if c == '"':
                    i += 1
                    if self._key:
                        self._key = False
                        self._state = _COLON
                    else:
                        self._end_value()
                elif c == "\\":
                    i += 1
                    self._state = _ESC
                else:
                    return self._fail(i, "control character in a string")
                continue
            c = text[i]
            if state == _ESC:
                if c == "u":
                    self._state, self._hex = _UHEX, 0
                elif c in '"\\/bfnrt':
                    self._state = _STRING
                else:
                    return self._fail(i, "invalid escape in a string")
                i += 1
            elif state == _UHEX:
                if c not in _HEX:
                    return self._fail(i, "invalid \\u escape")
                self._hex += 1
                if self._hex == 4:
                    self._state = _STRING
                i += 1
            elif state == _NUMBER:
                if not self._number_char(c):
                    if self._num not in _N_ACCEPT:
                        return self._fail(i, "malformed number")
                    self._end_value()
                    continue  # the character belongs to what follows the number
                i += 1
            elif state == _LITERAL:
                if c != self._lit[0]:
                    return self._fail(i, "malformed literal")
                self._lit = self._lit[1:]
                i += 1
                if not self._lit:
                    self._end_value()
            elif c in _WS:
                i += 1
            elif state == _VALUE or state == _ARR_FIRST:
                if state == _ARR_FIRST and c == "]":
                    self._stack.pop()
                    self._end_value()
                elif c == "{":
                    self._stack.append("{")
                    self._state = _OBJ_FIRST
                elif c == "[":
                    self._stack.append("[")
                    self._state = _ARR_FIRST
                elif c == '"':
                    self._state = _STRING
                elif c == "-":
                    self._state, self._num = _NUMBER, _N_MINUS
                elif c in _DIGITS:
                    self._state, self._num = _NUMBER, (_N_ZERO if c == "0" else _N_INT)
                elif c in "tfn":
                    self._state = _LITERAL
                    self._lit = {"t": "rue", "f": "alse", "n": "ull"}[c]
                else:
                    return self._fail(i, f"unexpected {c!r} where a value should start")
                i += 1
            elif state == _OBJ_FIRST or state == _OBJ_KEY:
                if c == '"':
                    self._state, self._key = _STRING, True
                elif c == "}" and state == _OBJ_FIRST:
                    self._stack.pop()
                    self._end_value()
                else:
                    return self._fail(i, f"unexpected {c!r} where a key should start")
                i += 1
            elif state == _COLON:
                if c != ":":
                    return self._fail(i, f"unexpected {c!r} where ':' should be")
                self._state = _VALUE
                i += 1
            else:  # _AFTER
                top = self._stack[-1]
                if c == ",":
                    self._state = _OBJ_KEY if top == "{" else _VALUE
                elif (c == "}" and top == "{") or (c == "]" and top == "["):
                    self._stack.pop()
                    self._end_value()
                else:
                    return self._fail(i, f"unexpected {c!r} after a value")
                i += 1
        return i

    def _end_value(self) -> None:
        self._state = _AFTER if self._stack else _DONE

    def _fail(self, i: int, reason: str) -> int:
        self._state = _ERROR
        self.error = reason
        return i

    def _number_char(self, c: str) -> bool:
        """Advance the number grammar by `c`; False if `c` cannot continue the number."""
        num = self._num
        digit = c in _DIGITS
        if num == _N_MINUS:
            if not digit:
                return False
            self._num = _N_ZERO if c == "0" else _N_INT
        elif num in (_N_ZERO, _N_INT, _N_FRAC):
            if digit and num != _N_ZERO:
                pass
            elif c == "." and num != _N_FRAC:
                self._num = _N_DOT
            elif c in "eE":
                self._num = _N_E
            else:
                return False
        elif num == _N_DOT:
            if not digit:
                return False
            self._num = _N_FRAC
        elif num == _N_E:
            if c in "+-":
                self._num = _N_ESIGN
            elif digit:
                self._num = _N_EXP
            else:
                return False
        elif num == _N_ESIGN:
            if not digit:
                return False
            self._num = _N_EXP
        else:  # _N_EXP
            return digit
        return True
