"""No redirect is ever built from the Host header: a path with a trailing slash that
the route table does not have is a 404, on every route of the app.

Starlette's router, left to its default, answers `/v1/responses/` with a 307 whose
`Location` is built from the request's `Host` header (`http://evil.example/...`):
an open redirect. The routes are read from the app's own table, so a route added
later is covered without touching this test.
"""

from __future__ import annotations

import re
import socket

import pytest
from starlette.routing import Route, WebSocketRoute

from realtime.config import ServerConfig
from tests.conftest import RunningServer
from tests.http.rawhttp import RawConnection

EVIL = "evil.example"
_PARAM = re.compile(r"{[^}]+}")


def _twin(path_format: str) -> str:
    """The route's path with a sample value in each parameter, its trailing slash
    toggled: the path the router used to redirect from."""
    path = _PARAM.sub("x1", path_format)
    return path[:-1] if path.endswith("/") else path + "/"


def _routes(server: RunningServer) -> list[Route | WebSocketRoute]:
    table = [r for r in server.app.routes if isinstance(r, Route | WebSocketRoute)]
    assert len(table) == len(server.app.routes), "a route kind this test does not know"
    return table


def _request(port: int, method: str, path: str) -> tuple[int, dict[str, str]]:
    connection = RawConnection(port)
    try:
        head = (
            f"{method} {path} HTTP/1.1\r\nHost: {EVIL}\r\n"
            "Content-Length: 0\r\nConnection: close\r\n\r\n"
        )
        connection.send(head.encode())
        response = connection.response()
    finally:
        connection.close()
    return response.status, response.headers


@pytest.fixture
def with_ui(server_factory) -> RunningServer:  # type: ignore[no-untyped-def]
    running: RunningServer = server_factory(ServerConfig(log_level="warning", ui=True))
    return running


def test_no_route_redirects_its_trailing_slash_twin(with_ui: RunningServer) -> None:
    checked = 0
    for route in _routes(with_ui):
        if route.path == "/":
            continue  # the root has no twin: "//" is another path, not a trailing slash
        twin = _twin(route.path_format)
        methods = sorted(route.methods or ()) if isinstance(route, Route) else ["GET"]
        for method in methods:
            status, headers = _request(with_ui.port, method, twin)
            assert "location" not in headers, (method, twin, status, headers)
            assert status == 404, (method, twin, status)
            checked += 1
    assert checked > 20  # every route, every method


def test_the_issue_s_case_has_no_location(with_ui: RunningServer) -> None:
    status, headers = _request(with_ui.port, "GET", "/v1/responses/")
    assert status == 404 and "location" not in headers


def test_socket_routes_do_not_upgrade_on_the_twin(with_ui: RunningServer) -> None:
    for route in _routes(with_ui):
        if not isinstance(route, WebSocketRoute):
            continue
        with socket.create_connection(("127.0.0.1", with_ui.port), timeout=10) as sock:
            sock.sendall(
                (
                    f"GET {_twin(route.path_format)} HTTP/1.1\r\nHost: {EVIL}\r\n"
                    "Upgrade: websocket\r\nConnection: Upgrade\r\n"
                    "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
                    "Sec-WebSocket-Version: 13\r\n\r\n"
                ).encode()
            )
            head = sock.recv(4096).split(b"\r\n\r\n", 1)[0].decode("latin-1")
        status = int(head.split(" ", 2)[1])
        assert status != 101 and not 300 <= status < 400, head
        assert "location:" not in head.lower(), head
