"""GET /v1/models, GET /v1/models/{id} and GET /health against a real server over TCP."""

from __future__ import annotations

import httpx
import openai
import pytest

ERROR_KEYS = {"message", "type", "param", "code"}


@pytest.fixture
def http(server):
    with httpx.Client(base_url=server.http_url, timeout=10) as client:
        yield client


@pytest.fixture
def sdk(server):
    with openai.OpenAI(base_url=server.http_url + "/v1", api_key="x", max_retries=0) as client:
        yield client


def test_list_models_returns_the_served_model_card(http, server):
    response = http.get("/v1/models")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("application/json")
    body = response.json()
    assert body["object"] == "list"
    assert len(body["data"]) == 1
    card = body["data"][0]
    assert card["id"] == "echo"
    assert card["object"] == "model"
    assert card["owned_by"] == "realtime"
    assert isinstance(card["created"], int)
    assert card["max_model_len"] == server.engine.info.context_length == 32768


def test_get_model_by_id_returns_the_same_card(http):
    listed = http.get("/v1/models").json()["data"][0]
    response = http.get("/v1/models/echo")
    assert response.status_code == 200
    assert response.json() == listed


def test_get_unknown_model_is_an_openai_404(http):
    response = http.get("/v1/models/no-such-model")
    assert response.status_code == 404
    body = response.json()
    assert set(body) == {"error"}
    assert set(body["error"]) == ERROR_KEYS
    assert body["error"]["code"] == "model_not_found"
    assert body["error"]["param"] == "model"
    assert body["error"]["type"] == "invalid_request_error"
    assert "no-such-model" in body["error"]["message"]


def test_model_ids_with_slashes_reach_the_lookup(http):
    # The route captures `{model_id:path}`, so org/name style ids get a model 404,
    # not a routing 404.
    response = http.get("/v1/models/org/some-model")
    assert response.status_code == 404
    assert response.json()["error"]["code"] == "model_not_found"
    assert "org/some-model" in response.json()["error"]["message"]


def test_models_reject_wrong_method_with_405(http):
    response = http.post("/v1/models", json={})
    assert response.status_code == 405
    assert "GET" in response.headers["allow"]
    body = response.json()
    assert set(body["error"]) == ERROR_KEYS
    assert body["error"]["code"] == "method_not_allowed"


def test_openai_sdk_lists_and_retrieves_models(sdk):
    models = sdk.models.list()
    assert [m.id for m in models.data] == ["echo"]
    assert models.data[0].object == "model"
    assert models.data[0].owned_by == "realtime"
    model = sdk.models.retrieve("echo")
    assert model.id == "echo"
    assert model.created == models.data[0].created


def test_openai_sdk_retrieve_unknown_model_raises_not_found(sdk):
    with pytest.raises(openai.NotFoundError) as info:
        sdk.models.retrieve("nope")
    assert info.value.status_code == 404
    assert info.value.code == "model_not_found"


def test_health_reports_liveness_and_engine_readiness(http, server):
    response = http.get("/health")
    assert response.status_code == 200
    assert response.json() == {"status": "ok", "model": "echo", "engine_ready": True}

    server.engine.unavailable = "maintenance"
    try:
        response = http.get("/health")
        # Liveness: the process still answers 200; readiness is in the body.
        assert response.status_code == 200
        assert response.json() == {"status": "ok", "model": "echo", "engine_ready": False}
    finally:
        server.engine.unavailable = None
    assert http.get("/health").json()["engine_ready"] is True


def test_models_report_the_parsers_that_split_the_output(server_factory):
    from realtime.config import ServerConfig

    plain = server_factory(ServerConfig(log_level="warning"))
    parsing = server_factory(
        ServerConfig(log_level="warning", tool_parser="hermes", reasoning_parser="qwen3")
    )
    with httpx.Client() as client:
        plain_card = client.get(plain.http_url + "/v1/models").json()["data"][0]
        parsing_card = client.get(parsing.http_url + "/v1/models").json()["data"][0]
    # The echo template matches no family, so "auto" resolves to no parser.
    assert (plain_card["tool_parser"], plain_card["reasoning_parser"]) == (None, None)
    assert (parsing_card["tool_parser"], parsing_card["reasoning_parser"]) == ("hermes", "qwen3")


def test_models_report_the_context_window_and_the_longest_answer(server_factory):
    """`context_window` (Codex's name) and `max_output_tokens`: the cap, else the context."""
    from realtime.config import ServerConfig

    for config, longest in ((ServerConfig(), 32768), (ServerConfig(max_tokens_cap=512), 512)):
        server = server_factory(config=config)
        card = httpx.get(server.http_url + "/v1/models", timeout=10).json()["data"][0]
        assert card["context_window"] == card["max_model_len"] == 32768
        assert card["max_output_tokens"] == longest
