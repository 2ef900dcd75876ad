"""JsonValueScanner agrees with json.loads on where a value ends and on validity, at any split."""

from __future__ import annotations

import json

import pytest

from realtime.chat.tools.json_value_scanner import JsonValueScanner
from tests.chat.tools.harness import splits

VALID = [
    "{}",
    "[]",
    '{"a": 1}',
    ' { "a" : [ 1 , 2.5 , -3e-2 , 0 , 0.0e+1 ] , "b" : { } , "c" : "x" } ',
    '{"t": true, "f": false, "n": null, "s": "q\\"\\\\\\/\\b\\f\\n\\r\\t\\u00e9"}',
    '[[[[]]], {"": ""}, "東京 🎉"]',
    '"just a string"',
    "-0",
    "12.5E10",
]
INVALID = [
    "{,}",
    '{"a" 1}',
    '{"a": 1,}',
    "[1,]",
    "[01]",
    "{'a': 1}",
    '{"a": tru}',
    '{"a": "\\x"}',
    '{"a": "\\u12G4"}',
    '{"a": "line\nbreak"}',
    "[1 2]",
    "-",
    "1.",
    "1e",
    '{"a": NaN}',
]


def scan(pieces: list[str]) -> tuple[bool, str | None, int]:
    scanner = JsonValueScanner()
    consumed = 0
    for piece in pieces:
        end = scanner.scan(piece)
        consumed += end
        if scanner.done or scanner.error:
            break
    else:
        scanner.close()
    return scanner.done, scanner.error, consumed


@pytest.mark.parametrize("text", VALID)
def test_valid(text: str) -> None:
    json.loads(text)
    for pieces in splits(text, random_trials=5):
        done, error, consumed = scan(pieces)
        assert done and error is None, pieces
        assert text[:consumed].strip() == text.strip(), pieces


def _strict_loads(text: str) -> object:
    """json.loads without Python's NaN/Infinity extension."""

    def reject(name: str) -> object:
        raise ValueError(name)

    return json.loads(text, parse_constant=reject)


@pytest.mark.parametrize("text", INVALID)
def test_invalid(text: str) -> None:
    with pytest.raises(ValueError):
        _strict_loads(text)
    for pieces in splits(text, random_trials=5):
        done, _, _ = scan(pieces)
        assert not done, pieces


def test_stops_right_after_the_value() -> None:
    scanner = JsonValueScanner()
    assert scanner.scan('{"a": [1]} trailing') == len('{"a": [1]}')
    assert scanner.done


def test_stops_before_the_offending_character() -> None:
    scanner = JsonValueScanner()
    text = '{"a": 1,]'
    assert scanner.scan(text) == text.index("]")
    assert scanner.error is not None


def test_top_level_number_ends_at_a_delimiter_or_close() -> None:
    scanner = JsonValueScanner()
    assert scanner.scan("42") == 2
    assert not scanner.done
    assert scanner.scan(" ") == 0
    assert scanner.done
    other = JsonValueScanner()
    other.scan("42")
    assert other.close()
