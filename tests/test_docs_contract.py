"""The protocol documents match the implementation.

* the generated parts (state diagrams, limits table, openapi.json, asyncapi.yaml)
  are what `python -m realtime.docgen` produces from the code today;
* openapi.json's paths are the app's routes and its request schema is
  ChatCompletionRequest's JSON schema; live HTTP answers validate against it;
* frames captured from a live server validate against asyncapi.yaml's messages;
* every error code and close code the code can produce is in protocol.md.
"""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path
from typing import Any

import httpx
import jsonschema
import pytest
import yaml
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed

from realtime import docgen
from realtime.app import build_app
from realtime.cli import _parser, config_from_args
from realtime.config import ServerConfig
from realtime.config.flags import FLAGS
from realtime.dialects.chat.request import ChatCompletionRequest
from realtime.protocol import errors
from realtime.protocol.close_codes import CloseCode
from tests.ws.wsclient import recv_frame

DOCS = Path(__file__).resolve().parents[1] / "docs"
PROTOCOL = (DOCS / "protocol.md").read_text(encoding="utf-8")


def _validator(document: dict[str, Any], pointer: str) -> jsonschema.Draft202012Validator:
    """A validator for the schema at `pointer`, resolving $refs inside `document`."""
    root = {k: v for k, v in document.items() if k != "$schema"}
    return jsonschema.Draft202012Validator({**root, "$ref": pointer})


# --- generated parts ----------------------------------------------------------


def test_generated_docs_are_up_to_date():
    stale = docgen.stale_files()
    assert not stale, f"run `python -m realtime.docgen`: stale {[str(p) for p in stale]}"


def test_the_state_diagrams_in_the_doc_are_the_tables_the_session_runs():
    from realtime.protocol.states import REQUEST, SOCKET

    assert SOCKET.mermaid() in PROTOCOL
    assert REQUEST.mermaid() in PROTOCOL


def test_limits_table_flags_exist_with_the_documented_defaults():
    args = _parser().parse_args(["serve"])
    from_cli = config_from_args(args)
    defaults = ServerConfig()
    limits = [flag for flag in FLAGS if flag.limit is not None]
    assert len(limits) >= 20
    for flag in limits:
        assert f"| `{flag.option}` | {docgen.config_default(flag.field)} |" in PROTOCOL
        assert hasattr(args, flag.dest), flag
        assert getattr(from_cli, flag.field) == getattr(defaults, flag.field), flag


# --- OpenAPI -----------------------------------------------------------------


@pytest.fixture(scope="module")
def openapi_doc() -> dict[str, Any]:
    return json.loads((DOCS / "openapi.json").read_text(encoding="utf-8"))


def test_openapi_paths_are_the_app_routes(openapi_doc):
    app = build_app(ServerConfig())
    routes = {(path, method) for path, method, _ in docgen.http_routes(app.routes)}
    documented = {(path, method) for path, ops in openapi_doc["paths"].items() for method in ops}
    assert documented == routes
    assert ("/v1/chat/completions", "post") in routes and ("/ready", "get") in routes


def test_openapi_request_schema_is_chat_completion_requests_json_schema(openapi_doc):
    schema = ChatCompletionRequest.model_json_schema(ref_template=docgen.REF)
    definitions = schema.pop("$defs")
    components = openapi_doc["components"]["schemas"]
    assert components["ChatCompletionRequest"] == schema
    for name, definition in definitions.items():
        assert components[name] == definition, name
    body = openapi_doc["paths"]["/v1/chat/completions"]["post"]["requestBody"]
    assert body["content"]["application/json"]["schema"] == {
        "$ref": "#/components/schemas/ChatCompletionRequest"
    }


def test_openapi_marks_only_health_and_ready_as_open(openapi_doc):
    open_paths = {
        path
        for path, ops in openapi_doc["paths"].items()
        for op in ops.values()
        if op.get("security") == []
    }
    assert open_paths == {"/health", "/ready"}


def test_live_http_answers_validate_against_openapi(openapi_doc, server):
    def response_schema(path: str, method: str, status: str, media: str) -> Any:
        content = openapi_doc["paths"][path][method]["responses"][status]["content"]
        return content[media]["schema"]["$ref"]

    with httpx.Client(base_url=server.http_url, timeout=10) as client:
        body = {"model": "echo", "messages": [{"role": "user", "content": "validate me"}]}
        checks = [
            (client.post("/v1/chat/completions", json=body), "/v1/chat/completions", "post"),
            (client.get("/v1/models"), "/v1/models", "get"),
            (client.get("/v1/models/echo"), "/v1/models/{model_id}", "get"),
            (client.get("/health"), "/health", "get"),
            (client.get("/ready"), "/ready", "get"),
            (client.get("/v1/models/nope"), "/v1/models/{model_id}", "get"),
            (client.post("/v1/chat/completions", json={**body, "n": 0}), "/v1/chat/completions",
             "post"),
        ]  # fmt: skip
        stream = client.post("/v1/chat/completions", json={**body, "stream": True})
    for response, path, method in checks:
        pointer = response_schema(path, method, str(response.status_code), "application/json")
        _validator(openapi_doc, pointer).validate(response.json())
    chunk_ref = response_schema("/v1/chat/completions", "post", "200", "text/event-stream")
    chunks = [
        json.loads(line[6:]) for line in stream.text.splitlines() if line.startswith("data: {")
    ]
    assert chunks
    for chunk in chunks:
        _validator(openapi_doc, chunk_ref).validate(chunk)


# --- AsyncAPI ----------------------------------------------------------------


@pytest.fixture(scope="module")
def asyncapi_doc() -> dict[str, Any]:
    return yaml.safe_load((DOCS / "asyncapi.yaml").read_text(encoding="utf-8"))


def _message_validator(doc: dict[str, Any], name: str) -> jsonschema.Draft202012Validator:
    return _validator(doc, doc["components"]["messages"][name]["payload"]["$ref"])


def _classify(frame: dict[str, Any]) -> str:
    kind = frame.get("type") or frame.get("object")
    return {
        "chat.completion.chunk": "ChunkFrame",
        "chat.completion": "CompletionFrame",
        "response.done": "ResponseDoneFrame",
        "error": "ErrorFrame",
        "session.expiring": "SessionExpiringFrame",
        "session.ready": "SessionReadyFrame",
    }[kind]


def test_asyncapi_describes_the_realtime_channel(asyncapi_doc):
    channel = asyncapi_doc["channels"]["realtime"]
    assert channel["address"] == "/v1/realtime"
    assert set(channel["messages"]) == {
        "RequestFrame",
        "CancelFrame",
        "SessionCloseFrame",
        "ChunkFrame",
        "CompletionFrame",
        "ResponseDoneFrame",
        "ErrorFrame",
        "SessionExpiringFrame",
        "SessionSetupFrame",
        "SessionReadyFrame",
    }
    documented_closes = {int(code) for code in channel["x-close-codes"]}
    assert documented_closes == {1000, 1001, 1003, 1007, 1008, 1009, 1011, 1012}


@pytest.mark.anyio
async def test_frames_from_a_live_server_validate_against_asyncapi(asyncapi_doc, server_factory):
    server = server_factory(
        ServerConfig(
            echo_delay=0.01,
            max_session_seconds=0.5,
            session_expiry_grace_seconds=5,
            log_level="warning",
        )
    )
    sent = [
        {"type": "session.setup", "model": "echo", "defaults": {"nvext": {"cache_salt": "t"}}},
        {"request_id": "s", "messages": [{"role": "user", "content": "a b c"}],
         "stream_options": {"include_usage": True}, "logprobs": True, "top_logprobs": 1},
        {"model": "echo", "messages": [{"role": "user", "content": "whole"}], "stream": False},
        {"request_id": "long", "model": "echo",
         "messages": [{"role": "user", "content": " ".join(["w"] * 200)}]},
        {"type": "response.cancel", "request_id": "long"},
        {"request_id": "bad", "model": "nope", "messages": [{"role": "user", "content": "x"}]},
        {"type": "response.cancel"},
        {"type": "session.close"},
    ]  # fmt: skip
    client_names = {
        "response.cancel": "CancelFrame",
        "session.close": "SessionCloseFrame",
        "session.setup": "SessionSetupFrame",
    }
    frames: list[dict[str, Any]] = []
    async with connect(server.ws_url) as ws:
        for frame in sent[:4]:
            await ws.send(json.dumps(frame))
        while not any(f.get("request_id") == "long" for f in frames):
            frames.append(await recv_frame(ws))
        for frame in sent[4:7]:
            await ws.send(json.dumps(frame))
        while not any(f.get("type") == "session.expiring" for f in frames):
            frames.append(await recv_frame(ws))
        await ws.send(json.dumps(sent[7]))
        with pytest.raises(ConnectionClosed):
            while True:
                frames.append(await recv_frame(ws))
    seen = {_classify(f) for f in frames}
    assert seen == {
        "ChunkFrame",
        "CompletionFrame",
        "ResponseDoneFrame",
        "ErrorFrame",
        "SessionExpiringFrame",
        "SessionReadyFrame",
    }
    for frame in frames:
        _message_validator(asyncapi_doc, _classify(frame)).validate(frame)
    for frame in sent:
        name = client_names.get(frame.get("type", ""), "RequestFrame")
        if frame == {"type": "response.cancel"}:  # the broken one: the schema refuses it too
            with pytest.raises(jsonschema.ValidationError):
                _message_validator(asyncapi_doc, name).validate(frame)
        else:
            _message_validator(asyncapi_doc, name).validate(frame)
    assert {f["status"] for f in frames if f.get("type") == "response.done"} == {
        "completed",
        "cancelled",
    }
    await asyncio.sleep(0)


def test_asyncapi_describes_websocket_mode(asyncapi_doc):
    channel = asyncapi_doc["channels"]["responses"]
    assert channel["address"] == "/v1/responses"
    assert set(channel["messages"]) == {
        "ResponsesCreateEvent",
        "ResponsesSteerEvent",
        "ResponsesServerEvent",
        "ResponsesErrorEvent",
        "ResponsesSteerAcceptedEvent",
        "ResponsesSteerFailedEvent",
    }


@pytest.mark.anyio
async def test_websocket_mode_events_from_a_live_server_validate_against_asyncapi(
    asyncapi_doc, server_factory
):
    server = server_factory(ServerConfig(echo_delay=0.001, log_level="warning"))
    sent = [
        {"type": "response.create", "model": "echo", "input": "a b c", "stream_id": "l1",
         "include": ["message.output_text.logprobs"], "max_output_tokens": 2},
        {"type": "response.create", "model": "echo", "input": "x", "previous_response_id": "r"},
        {"type": "response.steer", "previous_response_id": "r", "input": "faster"},
        {"type": "response.create", "model": "echo", "store": False,
         "input": [{"role": "user", "content": [{"type": "input_text", "text": "items"}]}]},
    ]  # fmt: skip
    frames: list[dict[str, Any]] = []
    async with connect(f"ws://127.0.0.1:{server.port}/v1/responses") as ws:
        for event in sent:
            await ws.send(json.dumps(event))
            while True:
                frame = json.loads(await ws.recv())
                frames.append(frame)
                if frame["type"] in (
                    "error",
                    "response.completed",
                    "response.incomplete",
                    "response.steer.failed",
                ):
                    break
    kinds = [f["type"] for f in frames]
    assert {"response.incomplete", "response.completed", "error"} <= set(kinds)
    assert "response.steer.failed" in kinds
    names = {
        "error": "ResponsesErrorEvent",
        "response.steer.failed": "ResponsesSteerFailedEvent",
        "response.steer.accepted": "ResponsesSteerAcceptedEvent",
    }
    for frame in frames:
        name = names.get(frame["type"], "ResponsesServerEvent")
        _message_validator(asyncapi_doc, name).validate(frame)
    for event in sent:
        steer = event["type"] == "response.steer"
        name = "ResponsesSteerEvent" if steer else "ResponsesCreateEvent"
        _message_validator(asyncapi_doc, name).validate(event)
    with pytest.raises(jsonschema.ValidationError):  # the schema is as strict as the server
        _message_validator(asyncapi_doc, "ResponsesCreateEvent").validate({**sent[0], "x": 1})


# --- error and close codes -------------------------------------------------------


def _subclasses(cls: type) -> list[type]:
    found = []
    for sub in cls.__subclasses__():
        found.append(sub)
        found.extend(_subclasses(sub))
    return found


def test_every_error_code_is_in_the_error_table():
    table = PROTOCOL[PROTOCOL.index("## Errors") : PROTOCOL.index("## HTTP API")]
    codes = {c.default_code for c in _subclasses(errors.RealtimeError) if c.default_code}
    codes |= {"missing_api_key", "not_found", "method_not_allowed", "http_error"}
    missing = {code for code in codes if f"`{code}`" not in table}
    assert not missing


def test_every_close_code_the_server_sends_is_in_the_close_table():
    table = PROTOCOL[PROTOCOL.index("## Close codes") : PROTOCOL.index("## Errors")]
    rows = set(re.findall(r"^\| (\d{4})", table, re.M))
    sent = {int(c) for c in CloseCode} - {CloseCode.TRY_AGAIN_LATER}
    assert {str(c) for c in sent} <= rows
    assert "1013" in table  # documented as never sent
