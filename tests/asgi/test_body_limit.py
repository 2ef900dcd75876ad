"""BodyLimit: the body limits an app from `realtime.create_app` enforces itself (pure ASGI)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from realtime.asgi.body_limit import BodyLimit

pytestmark = pytest.mark.anyio


class Recorder:
    """An app that reads the whole body, as the routes do, and answers 200."""

    def __init__(self) -> None:
        self.bodies: list[bytes] = []
        self.after: list[dict[str, Any]] = []

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        self.bodies.append(body)
        self.after.append(await receive())
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})


def scope(headers: list[tuple[bytes, bytes]]) -> dict[str, Any]:
    return {"type": "http", "method": "POST", "path": "/v1/completions", "headers": headers}


async def call(
    app: Any, headers: list[tuple[bytes, bytes]], messages: list[dict[str, Any]]
) -> tuple[int, dict[str, Any] | None]:
    incoming = [*messages]
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        if incoming:
            return incoming.pop(0)
        await asyncio.sleep(3600)  # a client that sends nothing more
        return {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    await app(scope(headers), receive, send)
    body = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    return sent[0]["status"], json.loads(body) if sent[0]["status"] != 200 else None


def piece(body: bytes, more: bool) -> dict[str, Any]:
    return {"type": "http.request", "body": body, "more_body": more}


async def test_a_body_within_the_limit_reaches_the_app_whole() -> None:
    inner = Recorder()
    app = BodyLimit(inner, max_body_bytes=10, body_timeout=5)
    messages = [piece(b"12345", True), piece(b"67890", False), {"type": "http.disconnect"}]
    status, _ = await call(app, [(b"transfer-encoding", b"chunked")], messages)
    assert status == 200 and inner.bodies == [b"1234567890"]
    assert inner.after == [{"type": "http.disconnect"}]  # later messages are the server's


async def test_a_declared_length_over_the_limit_is_413_before_reading() -> None:
    inner = Recorder()
    app = BodyLimit(inner, max_body_bytes=10, body_timeout=5)
    status, body = await call(app, [(b"content-length", b"11")], [])
    assert status == 413 and inner.bodies == []
    assert body is not None and body["error"]["code"] == "request_too_large"
    assert body["error"]["message"] == (
        "the request body is 11 bytes; the limit is 10 bytes (--max-body-bytes)"
    )


async def test_a_body_growing_past_the_limit_is_413_at_once() -> None:
    inner = Recorder()
    app = BodyLimit(inner, max_body_bytes=10, body_timeout=5)
    status, body = await call(app, [], [piece(b"123456", True), piece(b"78901", True)])
    assert status == 413 and inner.bodies == [] and body is not None
    assert body["error"]["message"] == "the request body is larger than 10 bytes (--max-body-bytes)"


async def test_a_stalled_body_is_408() -> None:
    inner = Recorder()
    app = BodyLimit(inner, max_body_bytes=10, body_timeout=0.05)
    status, body = await call(app, [(b"content-length", b"8")], [piece(b"1234", True)])
    assert status == 408 and inner.bodies == [] and body is not None
    assert body["error"]["code"] == "request_timeout"


async def test_a_bad_content_length_is_400() -> None:
    status, body = await call(
        BodyLimit(Recorder(), max_body_bytes=10, body_timeout=5), [(b"content-length", b"x")], []
    )
    assert (
        status == 400 and body is not None and body["error"]["message"] == "invalid Content-Length"
    )
