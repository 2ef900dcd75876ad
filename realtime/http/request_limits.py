"""Limits on the HTTP/1.1 request itself (head, body, time), and the raw refusals they send.

These are enforced by the connection protocol (`realtime.http.protocol`), before
the request reaches the app and before its body is buffered, so a hostile request
costs only its own connection. This module holds the pure parts: the limits,
the declared body length, and the bytes of a refusal.
"""

from __future__ import annotations

import http
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from realtime.protocol.errors import RealtimeError


@dataclass(frozen=True)
class HttpLimits:
    #: Bytes of request line plus headers; more is 431 and the connection closes.
    max_header_bytes: int = 32 * 1024
    #: Header lines per request; more is 431 and the connection closes.
    max_header_count: int = 100
    #: Seconds from a request's first byte (or from the connection) to the end of its
    #: headers; then 408 (or, before any byte, a silent close). 0 = no limit.
    header_timeout: float = 10.0
    #: Bytes of request body; a larger Content-Length is 413 before any of it is read,
    #: a chunked body is 413 as soon as it passes the limit.
    max_body_bytes: int = 8 * 1024 * 1024
    #: Seconds a request body may stall (no bytes arriving while the server reads); then
    #: 408. 0 = no limit.
    body_timeout: float = 30.0


class InvalidContentLength(ValueError):
    pass


def declared_body_length(headers: Iterable[tuple[bytes, bytes]]) -> int | None:
    """The Content-Length of a parsed request head, None if it has none (chunked or empty)."""
    for name, value in headers:
        if name.lower() == b"content-length":
            text = value.strip()
            if not text.isdigit():  # the parser has refused these already; stay safe
                raise InvalidContentLength(value[:32].decode("latin-1"))
            return int(text)
    return None


def has_body(headers: Iterable[tuple[bytes, bytes]], length: int | None) -> bool:
    """Whether a request with this head has a body to wait for (Content-Length or chunked)."""
    if length is not None:
        return length > 0
    return any(name.lower() == b"transfer-encoding" for name, _ in headers)


def _status_line(status: int) -> bytes:
    try:
        phrase = http.HTTPStatus(status).phrase
    except ValueError:
        phrase = ""
    return f"HTTP/1.1 {status} {phrase}\r\n".encode("ascii")


def refusal_bytes(
    error: RealtimeError,
    default_headers: Sequence[tuple[bytes, bytes]] = (),
    body_of: Callable[[RealtimeError], dict[str, Any]] | None = None,
) -> bytes:
    """A complete HTTP/1.1 response with the error body that closes the connection: OpenAI's,
    or the one `body_of` makes (the Messages API's, for its paths)."""
    body = orjson.dumps(body_of(error) if body_of is not None else error.to_body())
    parts = [_status_line(error.status)]
    for name, value in default_headers:
        parts += [name, b": ", value, b"\r\n"]
    parts += [
        b"content-type: application/json\r\n",
        b"content-length: ",
        str(len(body)).encode("ascii"),
        b"\r\n",
        b"connection: close\r\n",
        b"\r\n",
        body,
    ]
    return b"".join(parts)
