"""A canary key through every error path: it appears in no log line, body or close reason.

`realtime serve` runs as it would in production (its own log formatting, which
redacts), at debug level, where uvicorn and websockets print every header they
read. Two canaries: the server's own key, and a wrong key a client presents
(the server cannot redact that one by value; it must never print it at all).
The log must also hold no ERROR line, and (at info level) no traceback.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

import httpx
import pytest
from websockets.exceptions import ConnectionClosed, InvalidStatus
from websockets.sync.client import connect

from tests.conftest import ServerProcess
from tests.http.rawhttp import RawConnection, exchange, head

CANARY = "sk-canary-7f3a9c1e5b"
WRONG = "sk-wrongcanary-4d2e8a"
SECRETS = (CANARY, WRONG)
#: The server's --reasoning-key: used by the Responses paths, never printed.
REASONING_KEY = "rk-canary-0b9d5e7a31"
FLAGS = (
    "--api-key", CANARY, "--reasoning-key", REASONING_KEY,
    "--header-timeout", "0.5", "--body-timeout", "0.5",
    "--max-body-bytes", "65536", "--max-header-bytes", "8192", "--max-headers", "50",
)  # fmt: skip
CHAT = {"model": "echo", "messages": [{"role": "user", "content": "hi"}]}


def _ws_head(path: str, headers: list[tuple[str, str]]) -> bytes:
    upgrade = [
        ("Upgrade", "websocket"),
        ("Connection", "Upgrade"),
        ("Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ=="),
        ("Sec-WebSocket-Version", "13"),
    ]
    return head("GET", path, upgrade + headers)


def _http_paths(server: ServerProcess, seen: list[str]) -> None:
    port, url = server.port, server.http_url
    bearer = [("Authorization", f"Bearer {CANARY}")]
    # keys in headers: right, wrong, without a scheme, another scheme
    for value in (f"Bearer {CANARY}", f"Bearer {WRONG}", CANARY, f"Basic {WRONG}"):
        seen.append(httpx.get(url + "/v1/models", headers={"Authorization": value}).text)
    # keys in the query string, every spelling, open paths too
    for name in ("api_key", "%61pi_key", "API-KEY", "token"):
        for path in ("/health", "/v1/models", "/v1/chat/completions"):
            for key in SECRETS:
                seen.append(httpx.get(f"{url}{path}?{name}={key}").text)
    # oversize and malformed heads that carry the key
    requests = [
        head("GET", "/v1/models", [*bearer, ("X-Pad", "a" * 9000)]),
        head("GET", "/v1/models", [*bearer, *[(f"X-{i}", "v") for i in range(60)]]),
        head("GET", "/v1/models", [("X-Bad", f"\x01{CANARY}")]),
        b"GET /v1/models HTTP/1.1\r\nAuthorization Bearer " + CANARY.encode() + b"\r\n\r\n",
        f"GET /v1/models?api_key={WRONG} HTTP/9.9\r\n\r\n".encode(),
        head("POST", "/v1/chat/completions", [*bearer, ("Content-Length", str(1 << 25))]),
        head("GET", "/v1/models", [("Authorization", f"Bearer {WRONG}"), ("Origin", "https://x")]),
    ]
    seen += [exchange(port, request).body.decode("latin-1") for request in requests]
    # bodies that carry the key
    for body in (
        json.dumps({**CHAT, "api_key": WRONG}),
        f'{{"model": "echo", "messages": "{WRONG}',
    ):
        response = httpx.post(url + "/v1/chat/completions", content=body, headers=dict(bearer))
        seen.append(response.text)
    # slow head, stalled body, a client gone mid-upload
    with RawConnection(port) as conn:
        conn.send(b"GET /v1/models HTTP/1.1\r\nAuthorization: Bearer " + CANARY.encode())
        seen.append(conn.response().body.decode())
    with RawConnection(port) as conn:
        conn.send(head("POST", "/v1/chat/completions", [*bearer, ("Content-Length", "900")]))
        conn.send(f'{{"api_key": "{WRONG}"'.encode())
        seen.append(conn.response().body.decode())
    with RawConnection(port) as conn:
        conn.send(head("POST", "/v1/chat/completions", [*bearer, ("Content-Length", "900")]))
        conn.send(f'{{"api_key": "{WRONG}"'.encode())


def _refusal(url: str, **kwargs: Any) -> str:
    with pytest.raises(InvalidStatus) as info:
        with connect(url, **kwargs):
            pass
    return (info.value.response.body or b"").decode("latin-1")


def _closed_by(ws: Any, send: Callable[[], None]) -> str:
    send()
    frames = []
    try:
        while True:
            frames.append(ws.recv(timeout=10))
    except ConnectionClosed as exc:
        return " ".join(frames) + (exc.rcvd.reason if exc.rcvd else "")
    except TimeoutError:
        return " ".join(frames)


def _reasoning_paths(server: ServerProcess, seen: list[str]) -> None:
    """Reasoning sealed, read back, and refused when altered (the key in use)."""
    bearer = {"Authorization": f"Bearer {CANARY}"}
    reasoning = {"type": "reasoning", "summary": [], "encrypted_content": "gAAAAAB" + "x" * 60}
    body = {
        "model": "echo",
        "include": ["reasoning.encrypted_content"],
        "input": [reasoning, {"role": "user", "content": "hi"}],
    }
    refused = httpx.post(server.http_url + "/v1/responses", json=body, headers=bearer)
    assert refused.status_code == 400
    seen.append(refused.text)


def _socket_paths(server: ServerProcess, seen: list[str]) -> None:
    url, port = server.ws_url, server.port
    for subprotocols in (
        ["realtime", f"realtime-key.{WRONG}"],
        [f"realtime-key.{CANARY}", "realtime"],  # right key, refused origin below
    ):
        seen.append(_refusal(url, subprotocols=subprotocols, origin="https://evil.example"))
    seen.append(_refusal(url, subprotocols=["realtime", f"realtime-key.{WRONG}"]))
    # OpenAI's browser class's key carrier, on the Realtime events' URL
    insecure = ["realtime", f"openai-insecure-api-key.{WRONG}"]
    seen.append(_refusal(url + "?model=echo", subprotocols=insecure))
    insecure = ["realtime", f"openai-insecure-api-key.{CANARY}"]
    seen.append(_refusal(url + "?model=echo", subprotocols=insecure, origin="https://evil.example"))
    seen.append(_refusal(url, additional_headers={"Authorization": WRONG}))
    seen.append(_refusal(f"{url}?%61pi_key={CANARY}"))
    protocol = "Sec-WebSocket-Protocol"
    raw = [
        _ws_head("/v1/realtime", [(protocol, f"realtime, realtime-key.{CANARY},, ;x")]),
        _ws_head("/v1/realtime", [(protocol, f"realtime-key.{WRONG}\x7f")]),
        _ws_head("/v1/realtime?model=x", [(protocol, f"openai-insecure-api-key.{CANARY},, ;x")]),
        _ws_head("/v1/realtime", [(protocol, f"realtime-key.{CANARY}"), ("X-Pad", "p" * 9000)]),
        _ws_head("/v1/realtime", [("Authorization", f"Bearer {WRONG}"),
                                   ("Sec-WebSocket-Version", "99")]),
    ]  # fmt: skip
    seen += [exchange(port, request).body.decode("latin-1") for request in raw]
    # Inside an open socket: close reasons and error frames. Debug logs quote frame
    # payloads (elided, so no pattern finds a key there): only the server's own key,
    # redacted by value, goes into frames.
    keyed = {"subprotocols": ["realtime", f"realtime-key.{CANARY}"]}
    with connect(url, **keyed) as ws:  # type: ignore[arg-type]
        seen.append(_closed_by(ws, lambda: ws.send(f'{{"api_key": "{CANARY}", "x": {CANARY}')))
    with connect(url, **keyed) as ws:  # type: ignore[arg-type]
        ws.send(json.dumps({**CHAT, "api_key": CANARY}))
        seen.append(ws.recv(timeout=10))  # an error frame: the socket stays open
        seen.append(_closed_by(ws, lambda: ws.send(f"\xff{CANARY}".encode())))


@pytest.mark.parametrize(("fmt", "level"), [("json", "debug"), ("text", "info")])
def test_the_canary_appears_nowhere(serve_process, fmt, level):
    server = serve_process(*FLAGS, "--log-format", fmt, "--log-level", level)
    seen: list[str] = []
    _http_paths(server, seen)
    _reasoning_paths(server, seen)
    _socket_paths(server, seen)
    time.sleep(1.0)  # let the 408s and the gone client's request finish
    assert server.stop() == 0
    log = server.stderr()

    assert len(seen) > 40 and all(isinstance(text, str) for text in seen)
    for text in seen:
        for secret in SECRETS:
            assert secret not in text, text
    for secret in (*SECRETS, REASONING_KEY):
        assert secret not in log
    assert all(REASONING_KEY not in text for text in seen)
    assert "[redacted]" in log  # the paths above did reach the log
    lines = log.splitlines()
    if fmt == "json":
        records = [json.loads(line) for line in lines]
        assert not [r for r in records if r["level"] in ("error", "critical")]
        assert {r["level"] for r in records if "exception" in r} <= {"debug"}
        assert any(r.get("event") == "http.refused" for r in records)
    else:
        assert not [line for line in lines if line.startswith(("ERROR", "CRITICAL"))]
        assert "Traceback" not in log
