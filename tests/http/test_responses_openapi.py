"""docs/openapi.json describes the Responses routes as they answer: live answers validate
against it, the request schema is ResponsesRequest's, and the models in
`realtime.dialects.responses.schemas` accept what the server sends."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import jsonschema
import pytest

from realtime import docgen
from realtime.config import ServerConfig
from realtime.dialects.responses.request import ResponsesRequest
from realtime.dialects.responses.schemas import InputItemList, Response, ResponseStreamEvent
from realtime.engine.scripted import ScriptedEngine

DOCS = Path(__file__).resolve().parents[2] / "docs"
TOOL = {"type": "function", "name": "lookup", "parameters": {"type": "object"}, "strict": True}
SCRIPT = [
    {"match": "call it", "reply": '<tool_call>{"name": "lookup", "arguments": {}}</tool_call>'},
    {"match": "think", "reply": "<think>hmm</think>Thought about it."},
]


@pytest.fixture(scope="module")
def openapi_doc() -> dict[str, Any]:
    return json.loads((DOCS / "openapi.json").read_text(encoding="utf-8"))


def validator(document: dict[str, Any], pointer: str) -> jsonschema.Draft202012Validator:
    root = {k: v for k, v in document.items() if k != "$schema"}
    return jsonschema.Draft202012Validator({**root, "$ref": pointer})


def schema_of(doc: dict[str, Any], path: str, method: str, status: str, media: str) -> str:
    ref: str = doc["paths"][path][method]["responses"][status]["content"][media]["schema"]["$ref"]
    return ref


def test_the_request_schema_is_responses_requests(openapi_doc: dict[str, Any]) -> None:
    schema = ResponsesRequest.model_json_schema(ref_template=docgen.REF)
    schema.pop("$defs", None)
    assert openapi_doc["components"]["schemas"]["ResponsesRequest"] == schema
    body = openapi_doc["paths"]["/v1/responses"]["post"]["requestBody"]
    assert body["content"]["application/json"]["schema"] == {
        "$ref": "#/components/schemas/ResponsesRequest"
    }


def test_live_answers_validate_against_openapi(
    openapi_doc: dict[str, Any], server_factory: Any
) -> None:
    config = ServerConfig(log_level="warning", tool_parser="hermes", reasoning_parser="qwen3")
    server = server_factory(config, ScriptedEngine(SCRIPT))
    body = {"model": "scripted", "input": "call it", "tools": [TOOL]}
    with httpx.Client(base_url=server.http_url, timeout=30) as client:
        created = client.post("/v1/responses", json=body)
        thought = client.post("/v1/responses", json={**body, "input": "think", "tools": []})
        limited = client.post(
            "/v1/responses", json={**body, "input": "think", "max_output_tokens": 2}
        )
        stream = client.post("/v1/responses", json={**body, "input": "think", "stream": True})
        rid = created.json()["id"]
        checks = [
            (created, "/v1/responses", "post"),
            (thought, "/v1/responses", "post"),
            (limited, "/v1/responses", "post"),
            (client.get(f"/v1/responses/{rid}"), "/v1/responses/{response_id}", "get"),
            (
                client.get(f"/v1/responses/{rid}/input_items"),
                "/v1/responses/{response_id}/input_items",
                "get",
            ),
            (client.post(f"/v1/responses/{rid}/cancel"), "/v1/responses/{response_id}/cancel",
             "post"),
            (client.delete(f"/v1/responses/{rid}"), "/v1/responses/{response_id}", "delete"),
            (client.get(f"/v1/responses/{rid}"), "/v1/responses/{response_id}", "get"),
            (client.post("/v1/responses", json={"model": "x", "input": "y"}), "/v1/responses",
             "post"),
        ]  # fmt: skip
    statuses = [response.status_code for response, _, _ in checks]
    assert statuses == [200, 200, 200, 200, 200, 400, 200, 404, 404]
    for response, path, method in checks:
        status = str(response.status_code)
        pointer = schema_of(openapi_doc, path, method, status, "application/json")
        validator(openapi_doc, pointer).validate(response.json())
    assert [i["type"] for i in thought.json()["output"]] == ["reasoning", "message"]
    assert created.json()["output"][0]["type"] == "function_call"
    assert limited.json()["status"] == "incomplete"
    Response.model_validate(created.json())
    InputItemList.model_validate(checks[4][0].json())
    event_ref = schema_of(openapi_doc, "/v1/responses", "post", "200", "text/event-stream")
    lines = stream.text.splitlines()
    events = [json.loads(line[6:]) for line in lines if line.startswith("data: ")]
    assert {e["type"] for e in events} >= {"response.reasoning_text.delta", "response.completed"}
    for event in events:
        validator(openapi_doc, event_ref).validate(event)
        ResponseStreamEvent.model_validate(event)
