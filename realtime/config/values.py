"""The values a flag accepts: each parses a flag's text and checks its range.

They are argparse `type`s, so a bad value is a usage error naming the flag
(`argument --queue-size: must be at least 1, got 0`), and they describe
themselves for the generated flag reference (`describe`), so the range a flag
checks and the range its documentation states are one.
"""

from __future__ import annotations

import argparse
import json
import re
from dataclasses import dataclass
from typing import Any

from realtime.asgi.auth import validate_key
from realtime.store.dsn import is_postgres_url


@dataclass(frozen=True)
class Integer:
    """A whole number from `minimum` up to `maximum` (no upper bound when None)."""

    minimum: int
    maximum: int | None = None

    #: argparse names the type in its message for text that is no number at all.
    __name__ = "int"

    def __call__(self, text: str) -> int:
        value = int(text)
        if value < self.minimum:
            at_least = "0 or more" if self.minimum == 0 else f"at least {self.minimum}"
            raise argparse.ArgumentTypeError(f"must be {at_least}, got {value}")
        if self.maximum is not None and value > self.maximum:
            raise argparse.ArgumentTypeError(f"must be at most {self.maximum}, got {value}")
        return value

    def describe(self) -> str:
        if self.maximum is not None:
            return f"integer, {self.minimum} to {self.maximum}"
        return f"integer, {self.minimum} or more"


@dataclass(frozen=True)
class Number:
    """A number (fractions allowed) of at least `minimum`, or above it when not `inclusive`."""

    minimum: float = 0.0
    inclusive: bool = True

    __name__ = "float"

    def __call__(self, text: str) -> float:
        value = float(text)
        if self.inclusive and not value >= self.minimum:  # `not >=` refuses nan too
            raise argparse.ArgumentTypeError(f"must be {self.minimum:g} or more, got {text}")
        if not self.inclusive and not value > self.minimum:
            raise argparse.ArgumentTypeError(f"must be greater than {self.minimum:g}, got {text}")
        return value

    def describe(self) -> str:
        bound = f"{self.minimum:g} or more" if self.inclusive else f"more than {self.minimum:g}"
        return f"number, {bound}"


#: 1, 2, 3 ...
POSITIVE = Integer(1)
#: 0, 1, 2 ...
COUNT = Integer(0)
#: Seconds (or another quantity) greater than 0.
POSITIVE_NUMBER = Number(0.0, inclusive=False)
#: Seconds (or another quantity), 0 allowed.
NON_NEGATIVE_NUMBER = Number(0.0)


def api_key(text: str) -> str:
    """An API key that also works as a WebSocket subprotocol token (`asgi.auth`'s rule)."""
    try:
        return validate_key(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


#: The longest `--runner-id`.
MAX_RUNNER_ID_CHARS = 128


def runner_id(text: str) -> str:
    """A runner id: 1 to 128 printable ASCII characters, no spaces."""
    if not 0 < len(text) <= MAX_RUNNER_ID_CHARS or not all(33 <= ord(c) < 127 for c in text):
        raise argparse.ArgumentTypeError(
            f"expected 1 to {MAX_RUNNER_ID_CHARS} printable ASCII characters without spaces"
        )
    return text


def gpu_split(text: str) -> list[float]:
    """GB of memory per GPU, comma-separated: `20,24`."""
    try:
        split = [float(part) for part in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected GB per GPU like 20,24, got {text!r}") from None
    if not split or any(gb <= 0 for gb in split):
        raise argparse.ArgumentTypeError(f"every GPU needs a positive number of GB, got {text!r}")
    return split


def engine_option(text: str) -> tuple[str, Any]:
    """`KEY=VALUE` for the engine's factory: VALUE as JSON when it parses (numbers, true,
    lists), else the text itself."""
    key, sep, raw = text.partition("=")
    if not sep or not key.isidentifier():
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE with KEY a name, got {text!r}")
    try:
        return key, json.loads(raw)
    except ValueError:
        return key, raw


#: A URL's start: a scheme (RFC 3986's characters) and `://`.
_URL_START = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*)://")


def store_url_refusal(text: str) -> str | None:
    """Why `text` is no response store: a URL of another scheme than PostgreSQL's
    (`redis://cache`), which would otherwise become `./redis:/cache`. Only the scheme
    is quoted: the rest of a URL may hold a password. None: a directory, or a
    `postgresql://` (`postgres://`) URL."""
    match = _URL_START.match(text)
    if match is None or is_postgres_url(text):
        return None
    return (
        f"{match[1]}:// URLs are not supported: give a postgresql:// URL (a shared store),"
        " a directory (stored responses are kept in SQLite there) or leave the flag out"
        " (kept in memory)"
    )


def store_location(text: str) -> str:
    """`--response-store`: a directory or a postgresql:// URL; any other URL is a usage
    error, never a relative path."""
    refusal = store_url_refusal(text)
    if refusal is not None:
        raise argparse.ArgumentTypeError(refusal)
    return text
