"""The pure half of the HTTP request limits: declared lengths and refusal bytes."""

from __future__ import annotations

import json

import pytest

from realtime.http.request_limits import (
    InvalidContentLength,
    declared_body_length,
    has_body,
    refusal_bytes,
)
from realtime.protocol.errors import RequestTooLargeError


def test_declared_body_length():
    assert declared_body_length([(b"host", b"x"), (b"content-length", b" 42 ")]) == 42
    assert declared_body_length([(b"Content-Length", b"0")]) == 0
    assert declared_body_length([(b"transfer-encoding", b"chunked")]) is None
    with pytest.raises(InvalidContentLength):
        declared_body_length([(b"content-length", b"-1")])


@pytest.mark.parametrize(
    ("headers", "length", "expected"),
    [([], None, False), ([], 0, False), ([], 5, True),
     ([(b"transfer-encoding", b"chunked")], None, True)],
)  # fmt: skip
def test_has_body(headers, length, expected):
    assert has_body(headers, length) is expected


def test_refusal_bytes_are_a_complete_closing_response_with_the_error_body():
    error = RequestTooLargeError("too big")
    raw = refusal_bytes(error, [(b"server", b"uvicorn")])
    head, body = raw.split(b"\r\n\r\n", 1)
    lines = head.decode().split("\r\n")
    assert lines[0].startswith("HTTP/1.1 413 ")
    assert "server: uvicorn" in lines and "connection: close" in lines
    assert f"content-length: {len(body)}" in lines
    assert json.loads(body) == {
        "error": {
            "message": "too big",
            "type": "invalid_request_error",
            "param": None,
            "code": "request_too_large",
        }
    }
