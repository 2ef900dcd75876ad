"""Agent session headers select the cache scope on every HTTP API, per API key.

A real server whose echo engine records each engine request's `session_id` and
`cache_salt`: the same header value sent to chat completions, completions, the
Responses API and the Messages API is one session to the engine; another key's
request with the same value is another session and another salt; a request without
a header has no session. A bad header is a 400 naming it. The scope shows in the
access log (`cache_scope`), never as a metric label.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncGenerator
from typing import Any

import httpx
import pytest

from realtime.config import ServerConfig
from realtime.engine.base import EngineOutput, EngineRequest
from realtime.engine.echo import EchoEngine
from realtime.http.cache_scope import MAX_SESSION_CHARS, SESSION_HEADERS
from tests.conftest import RunningServer

KEYS = ("alice-key", "bob-key")

#: One request per generation route, each a small valid body.
ROUTES: dict[str, dict[str, Any]] = {
    "/v1/chat/completions": {"model": "echo", "messages": [{"role": "user", "content": "hi"}]},
    "/v1/completions": {"model": "echo", "prompt": "hi"},
    "/v1/responses": {"model": "echo", "input": "hi"},
    "/v1/messages": {
        "model": "echo",
        "max_tokens": 8,
        "messages": [{"role": "user", "content": "hi"}],
    },
}


class RecordingEcho(EchoEngine):
    """The echo engine, keeping what each request's cache scope was."""

    def __init__(self) -> None:
        super().__init__()
        self.scopes: list[tuple[str | None, str | None]] = []

    async def generate(self, request: EngineRequest) -> AsyncGenerator[EngineOutput, None]:
        self.scopes.append((request.session_id, request.cache_salt))
        async for output in super().generate(request):
            yield output


@pytest.fixture
def keyed(server_factory: Any) -> RunningServer:
    server: RunningServer = server_factory(
        ServerConfig(api_keys=KEYS, log_level="info"), engine=RecordingEcho()
    )
    return server


def post(server: RunningServer, path: str, key: str, **headers: str) -> httpx.Response:
    return httpx.post(
        server.http_url + path,
        json=ROUTES[path],
        headers={"authorization": f"Bearer {key}", **headers},
        timeout=30,
    )


def test_one_header_value_is_one_session_on_every_http_api(keyed: RunningServer) -> None:
    engine: RecordingEcho = keyed.engine
    for path in ROUTES:
        response = post(keyed, path, KEYS[0], **{"x-session-id": "agent-run-1"})
        assert response.status_code == 200, (path, response.text)
    sessions = {session for session, _ in engine.scopes}
    salts = {salt for _, salt in engine.scopes}
    assert len(engine.scopes) == len(ROUTES)
    assert len(sessions) == 1 and None not in sessions
    assert len(salts) == 1 and None not in salts


@pytest.mark.parametrize("name", [header.decode() for header in SESSION_HEADERS])
@pytest.mark.parametrize("path", list(ROUTES))
def test_every_agent_header_is_read(keyed: RunningServer, name: str, path: str) -> None:
    engine: RecordingEcho = keyed.engine
    assert post(keyed, path, KEYS[0], **{name: "s-42"}).status_code == 200
    assert post(keyed, path, KEYS[0], **{"x-session-id": "s-42"}).status_code == 200
    assert post(keyed, path, KEYS[0]).status_code == 200
    [(named, _), (same, _), (none, salt)] = engine.scopes
    assert named is not None and named == same
    assert none is None and salt is not None  # no header: no session, still the key's salt


@pytest.mark.parametrize("path", list(ROUTES))
def test_the_scope_is_per_api_key(keyed: RunningServer, path: str) -> None:
    engine: RecordingEcho = keyed.engine
    for key in KEYS:
        assert post(keyed, path, key, **{"session-id": "shared-name"}).status_code == 200
    [(alice, alice_salt), (bob, bob_salt)] = engine.scopes
    assert alice != bob and alice_salt != bob_salt
    for value in (alice, bob, alice_salt, bob_salt):
        assert value is not None and "shared-name" not in value and "key" not in value


def test_a_clients_own_cache_salt_stays_inside_its_keys_scope(keyed: RunningServer) -> None:
    engine: RecordingEcho = keyed.engine
    body = {**ROUTES["/v1/chat/completions"], "cache_salt": "tenant-a"}
    for key in KEYS:
        response = httpx.post(
            keyed.http_url + "/v1/chat/completions",
            json=body,
            headers={"authorization": f"Bearer {key}"},
            timeout=30,
        )
        assert response.status_code == 200
    [(_, alice_salt), (_, bob_salt)] = engine.scopes
    assert alice_salt != bob_salt
    assert alice_salt is not None and alice_salt.endswith(":tenant-a")


@pytest.mark.parametrize("path", list(ROUTES))
@pytest.mark.parametrize("value", ["a" * (MAX_SESSION_CHARS + 1), "two words"])
def test_a_bad_header_is_400_naming_it(keyed: RunningServer, path: str, value: str) -> None:
    response = post(keyed, path, KEYS[0], **{"x-session-affinity": value})
    assert response.status_code == 400, response.text
    assert "x-session-affinity" in response.text
    assert value not in response.text
    assert keyed.engine.scopes == []


def test_the_access_log_shows_the_scope_and_no_metric_label_does(
    keyed: RunningServer, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.INFO, logger="realtime.http"):
        for path in ROUTES:
            response = post(keyed, path, KEYS[0], **{"x-dynamo-session-id": "run-77"})
            assert response.status_code == 200
    ends = [r for r in caplog.records if r.getMessage() == "request.end"]
    assert len(ends) == len(ROUTES)
    assert all(r.fields["cache_scope"] == "run-77" for r in ends)  # type: ignore[attr-defined]
    metrics = httpx.get(
        keyed.http_url + "/metrics", headers={"authorization": f"Bearer {KEYS[0]}"}, timeout=30
    ).text
    assert "run-77" not in metrics
