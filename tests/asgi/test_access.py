"""The access guard on a real server: query credentials on every path, and origins by scheme.

A key in the URL is refused everywhere, open paths included, in any spelling a
server would decode. The same-origin default compares scheme, host and port, so
a page served over https (or a `ws:` "origin", which no page has) is not this
plain-HTTP server's origin; behind a TLS proxy the scheme is the one the proxy
reports in `X-Forwarded-Proto`, believed only from `--forwarded-allow-ips`.
"""

from __future__ import annotations

import httpx
import pytest
from websockets.exceptions import InvalidStatus
from websockets.sync.client import connect

from realtime.config import ServerConfig
from tests.conftest import RunningServer

KEY = "sk-guard-0123456789"

QUERY_KEYS = ["api_key", "%61pi_key", "API-KEY", "api%255Fkey", "Token", "access_token"]


@pytest.fixture
def keyed(server_factory) -> RunningServer:
    server: RunningServer = server_factory(ServerConfig(api_keys=(KEY,)))
    return server


@pytest.mark.parametrize("name", QUERY_KEYS)
@pytest.mark.parametrize("path", ["/health", "/ready", "/", "/v1/models"])
def test_a_key_in_the_query_is_refused_on_every_path(keyed, path, name):
    response = httpx.get(f"{keyed.http_url}{path}?{name}={KEY}", timeout=10)
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "credentials_in_query"
    assert KEY not in response.text
    assert httpx.get(keyed.http_url + path, timeout=10).status_code in (200, 401)


@pytest.mark.parametrize("name", QUERY_KEYS)
def test_a_key_in_the_socket_url_is_refused_at_the_handshake(keyed, name):
    auth = {"Authorization": f"Bearer {KEY}"}  # even with the right header
    with pytest.raises(InvalidStatus) as info:
        with connect(f"{keyed.ws_url}?{name}={KEY}", additional_headers=auth):
            pass
    assert info.value.response.status_code == 400
    assert b"credentials_in_query" in (info.value.response.body or b"")


def test_the_query_rule_holds_without_keys_too(server):
    response = httpx.get(f"{server.http_url}/health?%61pi_key=sk-anything", timeout=10)
    assert response.json()["error"]["code"] == "credentials_in_query"


def _origin_status(server: RunningServer, origin: str, **headers: str) -> int:
    response = httpx.get(server.http_url + "/v1/models", headers={"Origin": origin, **headers})
    return response.status_code


def _socket_status(server: RunningServer, origin: str, **headers: str) -> int:
    try:
        with connect(server.ws_url, origin=origin, additional_headers=headers):  # type: ignore[arg-type]
            return 101
    except InvalidStatus as exc:
        return exc.response.status_code


@pytest.mark.parametrize(
    ("scheme", "allowed"), [("http", True), ("https", False), ("ws", False), ("wss", False)]
)
def test_same_origin_compares_the_scheme(server, scheme, allowed):
    origin = f"{scheme}://127.0.0.1:{server.port}"
    assert _origin_status(server, origin) == (200 if allowed else 403)
    assert _socket_status(server, origin) == (101 if allowed else 403)


@pytest.mark.parametrize(("scheme", "allowed"), [("https", True), ("http", False), ("wss", False)])
def test_behind_a_tls_proxy_the_forwarded_scheme_is_the_origin_scheme(server, scheme, allowed):
    # The test client is on 127.0.0.1, which --forwarded-allow-ips trusts by default.
    origin = f"{scheme}://127.0.0.1:{server.port}"
    proxied = {"X-Forwarded-Proto": "https"}
    assert _origin_status(server, origin, **proxied) == (200 if allowed else 403)
    assert _socket_status(server, origin, **proxied) == (101 if allowed else 403)


def test_forwarded_headers_from_an_untrusted_address_are_ignored(server_factory):
    server = server_factory(ServerConfig(forwarded_allow_ips=""))
    origin = f"https://127.0.0.1:{server.port}"
    proxied = {"X-Forwarded-Proto": "https"}
    assert _origin_status(server, origin, **proxied) == 403
    assert _socket_status(server, origin, **proxied) == 403
    assert _origin_status(server, f"http://127.0.0.1:{server.port}", **proxied) == 200
