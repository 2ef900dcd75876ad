"""HTTP request limits on a real server: head size, header count, timeouts, body size.

Each bad request gets its specific status and OpenAI error body and loses its
own connection only: `/health` answers on another connection meanwhile, and
the server logs no ERROR line and no traceback.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Iterator

import httpx
import pytest

from realtime.config import ServerConfig
from tests.conftest import RunningServer, scrape_metrics, wait_until
from tests.http.rawhttp import RawConnection, head

HEAD_BYTES = 4096
HEADERS = 20
BODY_BYTES = 64 * 1024
LIMITS = {
    "max_header_bytes": HEAD_BYTES,
    "max_header_count": HEADERS,
    "header_timeout_seconds": 1.0,
    "max_body_bytes": BODY_BYTES,
    "body_timeout_seconds": 1.0,
}
CHAT = {"model": "echo", "messages": [{"role": "user", "content": "hello"}]}


@pytest.fixture
def limited(server_factory, caplog) -> RunningServer:
    caplog.set_level(logging.INFO)
    server: RunningServer = server_factory(ServerConfig(log_level="info", **LIMITS))
    return server


def assert_quiet(caplog: pytest.LogCaptureFixture) -> None:
    """No ERROR line and no traceback in the server's log."""
    loud = [r for r in caplog.records if r.levelno >= logging.ERROR or r.exc_info]
    assert not loud, [r.getMessage() for r in loud]
    assert "Traceback" not in caplog.text


def health_ok(server: RunningServer) -> bool:
    return httpx.get(server.http_url + "/health", timeout=10).status_code == 200


def refused(server: RunningServer, status: int) -> float:
    key = f'realtime_http_responses_total{{route="unparsed",status="{status}"}}'
    return scrape_metrics(server.http_url).get(key, 0)


# --- the request head ---


def test_a_head_over_the_byte_limit_is_431_while_it_is_still_arriving(limited, caplog):
    with RawConnection(limited.port) as conn:
        # The head never ends: the answer comes from counting, not from a complete head.
        conn.send(b"GET /health HTTP/1.1\r\nHost: x\r\nX-Pad: " + b"a" * (HEAD_BYTES + 10))
        response = conn.response()
        assert response.status == 431 and response.closed
        assert response.error_code == "request_headers_too_large"
        assert "--max-header-bytes" in response.json()["error"]["message"]
        assert conn.closed_by_server()
    assert health_ok(limited)
    assert refused(limited, 431) == 1
    assert "http.refused" in caplog.text
    assert_quiet(caplog)


@pytest.mark.parametrize("size", [HEAD_BYTES, HEAD_BYTES + 1])
def test_the_byte_limit_is_exact(limited, size):
    base = head("GET", "/health", [("Connection", "close"), ("X-Pad", "")])
    request = head("GET", "/health", [("Connection", "close"), ("X-Pad", "a" * (size - len(base)))])
    assert len(request) == size
    with RawConnection(limited.port) as conn:
        conn.send(request)
        assert conn.response().status == (200 if size <= HEAD_BYTES else 431)


@pytest.mark.parametrize("count", [HEADERS, HEADERS + 1, 10_000])
def test_header_lines_over_the_count_are_431(limited, caplog, count):
    # head() adds Host: `count` lines in all.
    lines = [(f"X-{i}", "v") for i in range(count - 1)]
    with RawConnection(limited.port) as conn:
        conn.send(head("GET", "/health", lines))
        response = conn.response()
    if count <= HEADERS:
        assert response.status == 200
        return
    assert response.status == 431 and response.closed
    assert response.error_code == "request_headers_too_large"
    assert "--max-headers" in response.json()["error"]["message"]
    assert health_ok(limited)
    assert_quiet(caplog)


def test_slowloris_connections_get_408_and_are_closed(limited, caplog):
    conns = [RawConnection(limited.port) for _ in range(30)]
    stop = threading.Event()

    def trickle() -> None:  # a byte per connection every 100 ms, never a complete head
        for conn in conns:
            conn.send(b"GET /health HTTP/1.1\r\nHost: x\r\n")
        while not stop.is_set():
            for conn in conns:
                try:
                    conn.send(b"X")
                except OSError:
                    pass
            time.sleep(0.1)

    sender = threading.Thread(target=trickle, daemon=True)
    sender.start()
    try:
        assert health_ok(limited)  # while 30 heads trickle in
        for conn in conns:
            response = conn.response()
            assert response.status == 408 and response.error_code == "request_timeout"
            assert "--header-timeout" in response.json()["error"]["message"]
            assert conn.closed_by_server()
    finally:
        stop.set()
        sender.join()
        for conn in conns:
            conn.close()
    assert health_ok(limited)
    assert_quiet(caplog)


def test_a_connection_that_sends_nothing_is_closed_without_an_answer(limited, caplog):
    with RawConnection(limited.port) as conn:
        assert conn.sock.recv(100) == b""  # EOF, after --header-timeout
    assert health_ok(limited)
    assert_quiet(caplog)


def test_keep_alive_and_pipelined_requests_are_unaffected(limited):
    with RawConnection(limited.port) as conn:
        conn.send(head("GET", "/health") + head("GET", "/ready"))
        first, second = conn.response(), conn.response()
        assert (first.status, second.status) == (200, 200)
        assert second.json()["status"] == "ready"
        time.sleep(1.5)  # idle between requests is not a slow head
        conn.send(head("GET", "/health", [("Connection", "close")]))
        assert conn.response().status == 200


def test_a_head_begun_after_a_body_in_the_same_read_is_timed_too(limited, caplog):
    body = json.dumps(CHAT).encode()
    first = head("POST", "/v1/chat/completions", [("Content-Length", str(len(body)))]) + body
    with RawConnection(limited.port) as conn:
        conn.send(first + b"GET /health HTTP/1.1\r\nHost: x\r\n")  # and then nothing
        assert conn.response().status == 200
        second = conn.response()
        assert second.status == 408 and second.error_code == "request_timeout"
    assert_quiet(caplog)


# --- the request body ---


def test_a_content_length_over_the_limit_is_413_before_any_body_is_sent(limited, caplog):
    declared = 32 * 1024 * 1024
    with RawConnection(limited.port) as conn:
        conn.send(head("POST", "/v1/chat/completions", [("Content-Length", str(declared))]))
        response = conn.response()  # not one byte of the body was sent
        assert response.status == 413 and response.closed
        assert response.error_code == "request_too_large"
        assert f"is {declared} bytes" in response.json()["error"]["message"]
    assert limited.engine.stats.requests_started == 0
    assert refused(limited, 413) == 1
    assert_quiet(caplog)


def test_a_large_upload_reads_its_413_and_health_answers_meanwhile(limited, caplog):
    body = json.dumps({**CHAT, "pad": "x" * (32 * 1024 * 1024)}).encode()
    result: dict[str, httpx.Response] = {}
    upload = threading.Thread(
        target=lambda: result.update(
            r=httpx.post(limited.http_url + "/v1/chat/completions", content=body, timeout=60)
        )
    )
    upload.start()
    health = [health_ok(limited) for _ in range(5)]
    upload.join()
    assert all(health)
    # The server answered early and read the rest only to drop it: the client, still
    # uploading, gets the answer instead of a reset.
    assert result["r"].status_code == 413
    assert result["r"].json()["error"]["code"] == "request_too_large"
    assert limited.engine.stats.requests_started == 0
    assert_quiet(caplog)


def _chunks(total: int, size: int = 8192) -> Iterator[bytes]:
    sent = 0
    while sent < total:
        yield b" " * min(size, total - sent)
        sent += size


def test_a_chunked_body_is_refused_as_it_passes_the_limit(limited, caplog):
    def body() -> Iterator[bytes]:
        yield json.dumps(CHAT).encode()
        yield from _chunks(10 * BODY_BYTES)

    response = httpx.post(limited.http_url + "/v1/chat/completions", content=body(), timeout=30)
    assert response.status_code == 413
    assert response.json()["error"]["code"] == "request_too_large"
    assert limited.engine.stats.requests_started == 0
    assert health_ok(limited)
    assert_quiet(caplog)


def test_a_chunked_body_under_the_limit_is_served(limited):
    def body() -> Iterator[bytes]:
        text = json.dumps(CHAT).encode()
        yield text[:10]
        yield text[10:]

    response = httpx.post(limited.http_url + "/v1/chat/completions", content=body(), timeout=30)
    assert response.status_code == 200
    assert response.json()["choices"][0]["message"]["content"] == "hello"


def test_a_stalled_body_is_408(limited, caplog):
    with RawConnection(limited.port) as conn:
        conn.send(head("POST", "/v1/chat/completions", [("Content-Length", "1000")]) + b'{"mo')
        response = conn.response()
        assert response.status == 408 and response.error_code == "request_timeout"
        assert "--body-timeout" in response.json()["error"]["message"]
    assert limited.engine.stats.requests_started == 0
    assert health_ok(limited)
    assert_quiet(caplog)


def test_a_client_that_hangs_up_during_the_upload_leaves_no_error(limited, caplog):
    with RawConnection(limited.port) as conn:
        conn.send(head("POST", "/v1/chat/completions", [("Content-Length", "50000")]))
        conn.send(b'{"model": "echo", "messages": [' + b" " * 20000)
    cancelled = 'realtime_requests_total{status="cancelled",transport="http"}'
    wait_until(lambda: scrape_metrics(limited.http_url).get(cancelled) == 1)
    assert limited.engine.stats.requests_started == 0
    assert health_ok(limited)
    assert_quiet(caplog)
