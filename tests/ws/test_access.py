"""API keys, the Origin policy and the connection limit, over real sockets.

Every refusal happens at the handshake, before the upgrade: the client gets an
HTTP status and an OpenAI error body, never an open socket that then closes.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from typing import Any

import httpx
import openai
import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import InvalidStatus

from realtime.config import ServerConfig
from tests.conftest import async_wait_until
from tests.ws.wsclient import chat, collect_until_terminal, text_of

pytestmark = pytest.mark.anyio

KEY = "sk-test-0123456789abcdef"
OTHER = "sk-other-key"


@pytest.fixture
def keyed(server_factory):
    return server_factory(ServerConfig(api_keys=(KEY, OTHER), log_level="info"))


@dataclass
class Refusal:
    status_code: int
    headers: dict[str, str]
    text: str

    def json(self) -> Any:
        return json.loads(self.text)


async def _refused(url: str, **kwargs: Any) -> Refusal:
    """The HTTP response that refused the handshake (the socket never opened)."""
    with pytest.raises(InvalidStatus) as info:
        async with connect(url, **kwargs):
            pass
    response = info.value.response
    headers = {k.lower(): v for k, v in response.headers.raw_items()}
    return Refusal(response.status_code, headers, (response.body or b"").decode())


async def test_socket_with_the_key_in_the_authorization_header_opens(keyed):
    async with connect(keyed.ws_url, additional_headers={"Authorization": f"Bearer {KEY}"}) as ws:
        await ws.send(chat("let me in"))
        assert text_of(await collect_until_terminal(ws)) == "let me in"
        assert ws.subprotocol is None


async def test_every_configured_key_is_accepted(keyed):
    async with connect(keyed.ws_url, additional_headers={"Authorization": f"Bearer {OTHER}"}) as ws:
        await ws.send(chat("second key"))
        assert text_of(await collect_until_terminal(ws)) == "second key"


async def test_socket_without_a_key_is_refused_with_401_before_the_upgrade(keyed):
    response = await _refused(keyed.ws_url)
    assert response.status_code == 401
    assert response.headers["www-authenticate"].startswith("Bearer")
    error = response.json()["error"]
    assert error["code"] == "missing_api_key" and error["type"] == "invalid_request_error"


async def test_socket_with_a_wrong_key_is_refused_with_401_and_the_key_is_not_echoed(keyed):
    wrong = "sk-wrong-key-that-must-not-echo"
    response = await _refused(keyed.ws_url, additional_headers={"Authorization": f"Bearer {wrong}"})
    assert response.status_code == 401
    assert response.json()["error"]["code"] == "invalid_api_key"
    assert wrong not in response.text


async def test_browser_subprotocol_key_opens_and_only_realtime_is_selected(keyed):
    offered = ["realtime", f"realtime-key.{KEY}"]
    async with connect(keyed.ws_url, subprotocols=offered) as ws:
        assert ws.subprotocol == "realtime"
        assert KEY not in ws.response.headers.get("Sec-WebSocket-Protocol", "")
        await ws.send(chat("from a browser"))
        assert text_of(await collect_until_terminal(ws)) == "from a browser"


@pytest.mark.parametrize("path", ["", "?model=echo"])
async def test_openais_browser_key_carrier_opens_and_realtime_is_selected(keyed, path):
    """`OpenAIRealtimeWebSocket` offers `realtime` and `openai-insecure-api-key.<key>`, and
    fails a handshake that selects none of them."""
    offered = ["realtime", f"openai-insecure-api-key.{KEY}", "openai-project.p1"]
    async with connect(keyed.ws_url + path, subprotocols=offered) as ws:
        assert ws.subprotocol == "realtime"
        assert KEY not in ws.response.headers.get("Sec-WebSocket-Protocol", "")
        if path:  # the Realtime events: the server speaks first
            assert json.loads(await ws.recv())["type"] == "session.created"
        else:
            await ws.send(chat("from a browser"))
            assert text_of(await collect_until_terminal(ws)) == "from a browser"


async def test_the_realtime_events_select_realtime_when_offered_without_keys(server):
    async with connect(server.ws_url + "?model=echo", subprotocols=["realtime"]) as ws:
        assert ws.subprotocol == "realtime"
        assert json.loads(await ws.recv())["type"] == "session.created"
    async with connect(server.ws_url + "?model=echo") as ws:  # the Python SDK offers none
        assert ws.subprotocol is None


async def test_a_wrong_openai_key_carrier_is_refused_with_401(keyed):
    offered = ["realtime", "openai-insecure-api-key.sk-nope"]
    response = await _refused(keyed.ws_url + "?model=echo", subprotocols=offered)
    assert response.status_code == 401
    assert "sk-nope" not in response.text


async def test_wrong_subprotocol_key_is_refused_with_401(keyed):
    response = await _refused(keyed.ws_url, subprotocols=["realtime", "realtime-key.sk-nope"])
    assert response.status_code == 401
    assert "sk-nope" not in response.text


async def test_key_in_the_query_string_is_refused_with_400_even_when_correct(keyed):
    response = await _refused(f"{keyed.ws_url}?api_key={KEY}")
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "credentials_in_query"
    assert KEY not in response.text


async def test_keys_never_reach_the_logs(keyed, caplog):
    caplog.set_level(logging.DEBUG)
    await _refused(f"{keyed.ws_url}?api_key={KEY}")
    await _refused(keyed.ws_url, additional_headers={"Authorization": "Bearer sk-leaky"})
    async with httpx.AsyncClient(base_url=keyed.http_url) as client:
        await client.get(f"/v1/models?token={KEY}")
        await client.get("/v1/models", headers={"Authorization": f"Bearer {KEY}"})
    server_records = [r for r in caplog.records if r.name.startswith(("realtime", "uvicorn"))]
    text = "\n".join(record.getMessage() for record in server_records)
    assert "access.refused" in text or "401" in text
    assert KEY not in text and "sk-leaky" not in text


async def test_the_subprotocol_is_selected_without_keys_too(server):
    async with connect(server.ws_url, subprotocols=["realtime"]) as ws:
        assert ws.subprotocol == "realtime"


# --- Origin -------------------------------------------------------------------


async def test_foreign_origin_is_refused_with_403(server):
    response = await _refused(server.ws_url, origin="https://evil.example")
    assert response.status_code == 403
    assert response.json()["error"]["code"] == "origin_not_allowed"


async def test_same_origin_and_no_origin_are_allowed_by_default(server):
    async with connect(server.ws_url, origin=f"http://127.0.0.1:{server.port}") as ws:
        await ws.send(chat("same origin"))
        assert text_of(await collect_until_terminal(ws)) == "same origin"
    async with connect(server.ws_url) as ws:  # non-browser clients send no Origin
        await ws.send(chat("no origin"))
        assert text_of(await collect_until_terminal(ws)) == "no origin"


async def test_null_origin_is_refused(server):
    response = await _refused(server.ws_url, additional_headers={"Origin": "null"})
    assert response.status_code == 403


async def test_allowed_origin_list_replaces_the_same_origin_default(server_factory):
    server = server_factory(ServerConfig(allowed_origins=("https://app.example",)))
    async with connect(server.ws_url, origin="https://app.example") as ws:
        await ws.send(chat("listed"))
        assert text_of(await collect_until_terminal(ws)) == "listed"
    response = await _refused(server.ws_url, origin=f"http://127.0.0.1:{server.port}")
    assert response.status_code == 403


async def test_star_allows_every_origin(server_factory):
    server = server_factory(ServerConfig(allowed_origins=("*",)))
    async with connect(server.ws_url, origin="https://anywhere.example") as ws:
        await ws.send(chat("anywhere"))
        assert text_of(await collect_until_terminal(ws)) == "anywhere"


async def test_origin_is_checked_before_the_key(server_factory):
    server = server_factory(ServerConfig(api_keys=(KEY,)))
    headers = {"Authorization": f"Bearer {KEY}"}
    response = await _refused(
        server.ws_url, origin="https://evil.example", additional_headers=headers
    )
    assert response.status_code == 403


# --- connection limit -------------------------------------------------------------


async def test_connections_over_the_limit_get_503_at_the_handshake(server_factory):
    server = server_factory(ServerConfig(max_connections=2))
    async with connect(server.ws_url), connect(server.ws_url) as second:
        response = await _refused(server.ws_url)
        assert response.status_code == 503
        assert response.headers["retry-after"] == "1"
        assert response.json()["error"]["code"] == "too_many_connections"
        await second.close()
        await async_wait_until(lambda: len(server.sessions()) == 1)  # the closed one is gone
        async with connect(server.ws_url) as third:  # a place is free again
            await third.send(chat("room again"))
            assert text_of(await collect_until_terminal(third)) == "room again"


# --- HTTP ---------------------------------------------------------------------


def test_http_routes_need_the_key_except_health_and_ready(keyed):
    with httpx.Client(base_url=keyed.http_url, timeout=10) as client:
        for path in ("/health", "/ready"):
            assert client.get(path).status_code == 200, path
        for path in ("/v1/models", "/v1/models/echo", "/metrics"):
            response = client.get(path)
            assert response.status_code == 401, path
            assert response.json()["error"]["code"] == "missing_api_key"
        chat_body = {"model": "echo", "messages": [{"role": "user", "content": "hi"}]}
        response = client.post("/v1/chat/completions", json=chat_body)
        assert response.status_code == 401
        wrong = client.get("/v1/models", headers={"Authorization": "Bearer sk-wrong"})
        assert wrong.status_code == 401 and wrong.json()["error"]["code"] == "invalid_api_key"
        basic = client.get("/v1/models", headers={"Authorization": f"Basic {KEY}"})
        assert basic.status_code == 401
        good = {"Authorization": f"Bearer {KEY}"}
        assert client.get("/v1/models", headers=good).status_code == 200
        assert client.get("/metrics", headers=good).status_code == 200
        assert client.post("/v1/chat/completions", json=chat_body, headers=good).status_code == 200


def test_openai_sdk_with_the_right_key_works_and_a_wrong_key_is_an_authentication_error(keyed):
    url = keyed.http_url + "/v1"
    with openai.OpenAI(base_url=url, api_key=KEY, max_retries=0) as sdk:
        reply = sdk.chat.completions.create(
            model="echo", messages=[{"role": "user", "content": "sdk with key"}]
        )
        assert reply.choices[0].message.content == "sdk with key"
    with openai.OpenAI(base_url=url, api_key="sk-bad", max_retries=0) as sdk:
        with pytest.raises(openai.AuthenticationError):
            sdk.models.list()


def test_http_foreign_origin_is_refused_with_403(server):
    with httpx.Client(base_url=server.http_url, timeout=10) as client:
        response = client.get("/v1/models", headers={"Origin": "https://evil.example"})
        assert response.status_code == 403
        assert client.get("/health", headers={"Origin": "https://evil.example"}).status_code == 200


def test_paths_added_to_open_paths_need_no_key(keyed):
    from starlette.responses import PlainTextResponse
    from starlette.routing import Route

    async def page(request):
        return PlainTextResponse("a static page that asks for the key")

    keyed.app.router.routes.append(Route("/page", page))
    with httpx.Client(base_url=keyed.http_url, timeout=10) as client:
        assert client.get("/page").status_code == 401
        keyed.app.state.open_paths.add("/page")
        assert client.get("/page").status_code == 200
