"""API keys, the origin policy and log redaction, without sockets."""

from __future__ import annotations

import logging

import pytest

from realtime.asgi.auth import (
    ApiKeys,
    OriginPolicy,
    bearer_token,
    is_loopback,
    load_key_file,
    subprotocol_key,
    validate_key,
)
from realtime.observability.logs import RedactSecrets, redact


def test_keys_match_exactly_and_only_configured_ones():
    keys = ApiKeys(["sk-one", "sk-two"])
    assert keys.enabled
    assert keys.matches(b"sk-one") and keys.matches(b"sk-two")
    for wrong in (b"sk-on", b"sk-one ", b"SK-ONE", b"", None):
        assert not keys.matches(wrong)
    assert not ApiKeys().enabled


@pytest.mark.parametrize("bad", ["", "   ", "has space", 'quote"', "comma,key", "é-key"])
def test_keys_must_be_http_tokens(bad):
    with pytest.raises(ValueError):
        validate_key(bad)


def test_key_file_skips_blanks_and_comments(tmp_path):
    path = tmp_path / "keys"
    path.write_text("# team keys\nsk-a\n\n  sk-b  \n")
    assert load_key_file(path) == ["sk-a", "sk-b"]
    path.write_text("# nothing here\n")
    with pytest.raises(ValueError):
        load_key_file(path)


def test_bearer_header_parsing():
    assert bearer_token([(b"authorization", b"Bearer sk-x")]) == b"sk-x"
    assert bearer_token([(b"Authorization", b"bearer   sk-x ")]) == b"sk-x"
    assert bearer_token([(b"authorization", b"Basic sk-x")]) is None
    assert bearer_token([(b"authorization", b"Bearer ")]) is None
    assert bearer_token([]) is None


def test_subprotocol_key():
    assert subprotocol_key(["realtime", "realtime-key.sk-x"]) == b"sk-x"
    # OpenAI's browser class (`OpenAIRealtimeWebSocket`) sends its key this way
    assert subprotocol_key(["realtime", "openai-insecure-api-key.sk-o"]) == b"sk-o"
    assert subprotocol_key(["realtime", "openai-project.p1"]) is None
    assert subprotocol_key(["realtime"]) is None


@pytest.mark.parametrize(
    ("host", "loopback"),
    [("127.0.0.1", True), ("::1", True), ("localhost", True), ("0.0.0.0", False),
     ("192.168.1.5", False), ("example.com", False)],
)  # fmt: skip
def test_loopback_hosts(host, loopback):
    assert is_loopback(host) is loopback


def test_default_origin_policy_allows_no_origin_and_same_origin_only():
    policy = OriginPolicy()
    host = b"127.0.0.1:8000"
    assert policy.allows(None, host)
    assert policy.allows(b"http://127.0.0.1:8000", host)
    assert policy.allows(b"http://LOCALHOST:8000", b"localhost:8000")
    assert policy.allows(b"https://example.com", b"example.com", "https")  # default port 443
    assert policy.allows(b"https://example.com", b"example.com", "wss")
    assert policy.allows(b"http://[::1]:8000", b"[::1]:8000")
    assert not policy.allows(b"http://127.0.0.1:9000", host)
    assert not policy.allows(b"https://evil.example", host)
    assert not policy.allows(b"null", host)
    assert not policy.allows(b"http://127.0.0.1:8000", None)
    assert not policy.allows(b"not a url", host)


@pytest.mark.parametrize(
    ("origin", "scheme", "allowed"),
    [
        (b"http://127.0.0.1:8000", "http", True),
        (b"http://127.0.0.1:8000", "ws", True),
        (b"https://127.0.0.1:8000", "http", False),  # same host:port, another scheme
        (b"https://127.0.0.1:8000", "ws", False),
        (b"ws://127.0.0.1:8000", "http", False),  # no page has a ws: origin
        (b"ws://127.0.0.1:8000", "ws", False),
        (b"wss://127.0.0.1:8000", "wss", False),
        (b"HTTPS://127.0.0.1:8000", "https", True),  # behind a TLS proxy
        (b"https://127.0.0.1:8000", "wss", True),
        (b"http://127.0.0.1:8000", "https", False),
        (b"http://127.0.0.1:8000", "wss", False),
    ],
)
def test_same_origin_means_the_same_scheme_too(origin, scheme, allowed):
    assert OriginPolicy().allows(origin, b"127.0.0.1:8000", scheme) is allowed


def test_allowed_origin_list_and_star():
    listed = OriginPolicy(["https://app.example/", "http://localhost:3000"])
    assert listed.allows(b"https://app.example", b"anything")
    assert listed.allows(b"http://localhost:3000", b"127.0.0.1:8000")
    assert not listed.allows(b"https://app.example:444", b"app.example:444")
    assert not listed.allows(b"https://other.example", b"other.example")
    assert OriginPolicy(["*"]).allows(b"https://anything.example", b"x")


def test_redaction_of_query_keys_bearer_tokens_subprotocols_and_literal_keys():
    line = (
        'GET /v1/models?api_key=sk-secret&x=1 "Authorization: Bearer sk-tok"'
        " realtime, realtime-key.sk-sub and sk-literal, openai-insecure-api-key.sk-oai"
    )
    cleaned = redact(line, ["sk-literal"])
    for secret in ("sk-secret", "sk-tok", "sk-sub", "sk-literal", "sk-oai"):
        assert secret not in cleaned
    assert "x=1" in cleaned and "[redacted]" in cleaned


def test_redact_filter_rewrites_records():
    args = ("1.2.3.4", "GET", "/v1/models?token=abc")
    record = logging.LogRecord(
        "uvicorn.access", logging.INFO, __file__, 1, '%s - "%s %s"', args, None
    )
    RedactSecrets().filter(record)
    assert "abc" not in record.getMessage()


@pytest.mark.parametrize(
    "line",
    [
        '"GET /v1/models?%61pi_key=sk-canary HTTP/1.1" 400',
        '"GET /health?x=1&API-KEY=sk-canary HTTP/1.1" 400',
        '"GET /v1/realtime?api%255Fkey=sk-canary HTTP/1.1" 400',
        "< authorization: sk-canary",
        "< Authorization: Basic sk-canary",
        "< x-api-key: sk-canary",
        "< sec-websocket-protocol: realtime, realtime-key.sk-canary,, ;x",
    ],
)
def test_redaction_decodes_names_and_covers_credential_headers(line):
    cleaned = redact(line)
    assert "sk-canary" not in cleaned and "[redacted]" in cleaned


def test_redaction_leaves_other_query_parameters_alone():
    assert redact("GET /v1/models?monkey=1&q=api_key") == "GET /v1/models?monkey=1&q=api_key"


def _record_with_exception(message: str) -> logging.LogRecord:
    try:
        raise ValueError(f"invalid Sec-WebSocket-Protocol header: {message}")
    except ValueError:
        import sys

        exc_info = sys.exc_info()
    record = logging.LogRecord("uvicorn.error", logging.DEBUG, __file__, 1, "! bad", (), exc_info)
    record.fields = {"path": "/v1/models?token=sk-canary", "status": 400}  # type: ignore[attr-defined]
    return record


def test_redact_filter_cleans_tracebacks_and_fields_for_every_formatter():
    from realtime.observability.logs import JsonFormatter, TextFormatter

    record = _record_with_exception("realtime, realtime-key.sk-canary,,")
    RedactSecrets(["sk-literal"]).filter(record)
    for formatter in (JsonFormatter(), TextFormatter(), logging.Formatter()):
        text = formatter.format(record)
        assert "sk-canary" not in text
        assert "Traceback" in text or "exception" in text
