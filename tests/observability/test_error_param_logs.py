"""A refused request's log line names the field at fault (the error's `param`), never its value.

Finding which field a client's request was refused for used to take a proxy in
front of the server. Now the `request.end` (HTTP) and `request.refused` /
`request.end` (WebSocket) lines carry `error_param`; the value the client sent is in
no log line, and a hostile field name is shown bounded and printable.
"""

from __future__ import annotations

import json
import logging
from typing import Any

import httpx
import pytest
from websockets.asyncio.client import connect

from realtime.config import ServerConfig
from realtime.observability.logs import MAX_LOGGED_NAME_CHARS, field_name
from tests.conftest import RunningServer
from tests.ws.wsclient import collect_until_terminal

SECRET_VALUE = "do-not-log-this-value-7f3a"
CHAT = {"model": "echo", "messages": [{"role": "user", "content": "hi"}]}


def logged(caplog: pytest.LogCaptureFixture) -> list[dict[str, Any]]:
    return [
        getattr(record, "fields", {})
        for record in caplog.records
        if record.getMessage() in ("request.end", "request.refused")
    ]


def all_text(caplog: pytest.LogCaptureFixture) -> str:
    return "\n".join(
        f"{record.getMessage()} {getattr(record, 'fields', '')}" for record in caplog.records
    )


@pytest.fixture
def server(server_factory: Any) -> RunningServer:
    running: RunningServer = server_factory(ServerConfig(log_level="info"))
    return running


RESPONSES = {"model": "echo", "input": "hi"}
META = {"client_metadata": {"x": SECRET_VALUE}}


@pytest.mark.parametrize(
    ("path", "body", "param"),
    [
        ("/v1/chat/completions", {**CHAT, **META}, "client_metadata"),
        ("/v1/chat/completions", {**CHAT, "temperature": SECRET_VALUE}, "temperature"),
        ("/v1/responses", {**RESPONSES, "text": {"verbosity": SECRET_VALUE}}, "text.verbosity"),
        ("/v1/completions", {"model": "echo", "prompt": "hi", "suffix": SECRET_VALUE}, "suffix"),
    ],
)  # fmt: skip
def test_an_http_refusal_logs_the_param_not_the_value(
    server: RunningServer,
    caplog: pytest.LogCaptureFixture,
    path: str,
    body: dict[str, Any],
    param: str,
) -> None:
    with caplog.at_level(logging.INFO):
        response = httpx.post(server.http_url + path, json=body, timeout=30)
    assert response.status_code == 400
    assert response.json()["error"]["param"] == param
    [line] = logged(caplog)
    assert line["status"] == "error" and line["error_param"] == param
    assert SECRET_VALUE not in all_text(caplog)


@pytest.mark.anyio
async def test_a_socket_refusal_logs_the_param_not_the_value(
    server: RunningServer, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.INFO):
        async with connect(server.ws_url) as ws:
            await ws.send(json.dumps({**CHAT, "request_id": "r1", "top_p": SECRET_VALUE}))
            frames = await collect_until_terminal(ws)
    assert frames[0]["error"]["param"] == "top_p"
    lines = logged(caplog)
    assert [line["error_param"] for line in lines] == ["top_p"], lines
    assert SECRET_VALUE not in all_text(caplog)


def test_a_hostile_field_name_is_bounded_and_printable(
    server: RunningServer, caplog: pytest.LogCaptureFixture
) -> None:
    name = "evil\nINFO forged: line" + "x" * 1000
    with caplog.at_level(logging.INFO):
        response = httpx.post(
            server.http_url + "/v1/chat/completions", json={**CHAT, name: 1}, timeout=30
        )
    assert response.status_code == 400
    [line] = logged(caplog)
    shown = line["error_param"]
    assert shown.startswith("evil?INFO?forged:?line") and "\n" not in shown
    assert len(shown) == MAX_LOGGED_NAME_CHARS + len("...")


def test_field_name() -> None:
    assert field_name(None) is None
    assert field_name("tools.4.type") == "tools.4.type"
    assert field_name("a" * MAX_LOGGED_NAME_CHARS) == "a" * MAX_LOGGED_NAME_CHARS
    assert field_name("é\t") == "??"
