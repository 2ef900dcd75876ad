"""Property-based fuzzing of structured outputs against a real server on the cpu engine.

Hypothesis sends schemas (`hostile_schemas`: recursion with and without an end,
`anyOf`, enums, bounds, untyped objects) as `response_format` and as a tool's
parameters under `tool_choice: required`, streamed and not, beside the known
schema bombs. Properties:

* no answer is a 5xx, and no stream carries an `engine_error`: a schema is served
  or refused with a 400 `invalid_request_error` naming its field, before the answer;
  a grammar limit met later is an `invalid_request_error` naming it too;
* an answer that finished validates against its schema (`jsonschema`);
* a well-behaved neighbour on another connection keeps getting its answers;
* the server logs no ERROR line and no traceback.

Derandomized and bounded, so the test takes a minute or two on a small machine.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import jsonschema
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from realtime.config import ServerConfig
from tests.conftest import RunningServer, start_server
from tests.fuzz.hostile_schemas import BOMBS, schemas
from tests.fuzz.test_http_fuzz import TRACEBACK_MARKERS, ErrorLog, error_log  # noqa: F401

pytest_plugins = ["tests.model_fixtures"]

torch = pytest.importorskip("torch")

from realtime.engine.cpu.engine import CpuEngine  # noqa: E402

MODEL = "tiny"
EXAMPLES = 80
FIELDS = {"response_format": "response_format", "tools": "tools"}


@pytest.fixture(scope="module")
def cpu_server(tiny_model_dir: Path) -> Iterator[RunningServer]:
    engine = CpuEngine(tiny_model_dir, model_name=MODEL)
    running = start_server(
        ServerConfig(log_level="warning", tool_parser="hermes"),
        engine,  # type: ignore[arg-type]
    )
    yield running
    running.stop()


class Neighbour(threading.Thread):
    """Short free answers on another connection, each one checked."""

    def __init__(self, base_url: str):
        super().__init__(daemon=True)
        self.base_url, self.stop, self.done, self.failures = base_url, threading.Event(), 0, []

    def run(self) -> None:
        body = {
            "model": MODEL,
            "messages": [{"role": "user", "content": "hi"}],
            "max_tokens": 4,
            "ignore_eos": True,
        }
        try:
            with httpx.Client(base_url=self.base_url, timeout=60) as client:
                while not self.stop.is_set():
                    response = client.post("/v1/chat/completions", json=body)
                    assert response.status_code == 200, response.text
                    self.done += 1
        except Exception as exc:  # reported by the test
            self.failures.append(repr(exc))


def _body(schema: dict[str, Any], target: str, stream: bool) -> dict[str, Any]:
    body: dict[str, Any] = {
        "model": MODEL,
        "messages": [{"role": "user", "content": "JSON please."}],
        "temperature": 1.0,
        "seed": 1,
        "max_tokens": 16,
        "stream": stream,
        "chat_template_kwargs": {"enable_thinking": False},
    }
    if target == "response_format":
        body["response_format"] = {
            "type": "json_schema",
            "json_schema": {"name": "f", "schema": schema},
        }
    else:
        parameters = {"type": "object", "properties": {"arg": schema}, "required": ["arg"]}
        if "$defs" in schema:  # a tool's `$ref`s point into its parameters' `$defs`
            inner = {k: v for k, v in schema.items() if k != "$defs"}
            parameters = {**parameters, "properties": {"arg": inner}, "$defs": schema["$defs"]}
            parameters = json.loads(json.dumps(parameters).replace('"#"', '"#/properties/arg"'))
        body["tools"] = [{"type": "function", "function": {"name": "t", "parameters": parameters}}]
        body["tool_choice"] = "required"
    return body


def _clean(text: str) -> None:
    assert "engine_error" not in text and "internal_error" not in text, text[:300]
    for marker in TRACEBACK_MARKERS:
        assert marker not in text, f"server internals reached the client: {text[:300]!r}"


def _check_error(error: dict[str, Any], target: str) -> None:
    assert error["type"] == "invalid_request_error", error
    assert error["param"] == FIELDS[target], error
    _clean(error["message"])


def _check(
    client: httpx.Client, schema: dict[str, Any], target: str, stream: bool, stats: dict[str, int]
) -> None:
    body = _body(schema, target, stream)
    if not stream:
        response = client.post("/v1/chat/completions", json=body)
        assert response.status_code < 500, (response.status_code, response.text[:300])
        stats[str(response.status_code)] = stats.get(str(response.status_code), 0) + 1
        if response.status_code >= 400:
            if response.json()["error"]["code"] == "context_length_exceeded":
                return  # the tools are in the prompt; the tiny model's context is 4k
            _check_error(response.json()["error"], target)
            return
        choice = response.json()["choices"][0]
        if target == "response_format" and choice["finish_reason"] == "stop":
            jsonschema.validate(json.loads(choice["message"]["content"]), schema)
        if target == "tools" and choice["finish_reason"] == "tool_calls":
            for call in choice["message"]["tool_calls"]:
                params = body["tools"][0]["function"]["parameters"]
                jsonschema.validate(json.loads(call["function"]["arguments"]), params)
        return
    with client.stream("POST", "/v1/chat/completions", json=body) as response:
        assert response.status_code < 500, response.status_code
        stats[f"stream {response.status_code}"] = stats.get(f"stream {response.status_code}", 0) + 1
        if response.status_code >= 400:
            error = json.loads(response.read())["error"]
            if error["code"] != "context_length_exceeded":
                _check_error(error, target)
            return
        for line in response.iter_lines():
            if line.startswith("data: {"):
                event = json.loads(line[len("data: ") :])
                if "error" in event:  # a grammar limit met mid-answer: the request's error
                    _check_error(event["error"], target)


@pytest.fixture
def neighbour(cpu_server: RunningServer) -> Iterator[Neighbour]:
    running = Neighbour(cpu_server.http_url)
    running.start()
    yield running
    running.stop.set()
    running.join(60)
    assert not running.failures, running.failures
    assert running.done > 0


def test_the_schema_bombs_are_served_or_refused_early(
    cpu_server: RunningServer,
    neighbour: Neighbour,
    error_log: ErrorLog,  # noqa: F811
) -> None:
    stats: dict[str, int] = {}
    with httpx.Client(base_url=cpu_server.http_url, timeout=120) as client:
        for schema in BOMBS.values():
            for stream in (False, True):
                _check(client, schema, "response_format", stream, stats)
    assert stats.get("400", 0) == 3 and stats.get("200", 0) == len(BOMBS) - 3, stats
    assert not error_log.records, [r.getMessage() for r in error_log.records]


def test_fuzzed_schemas_are_served_or_refused_early_never_a_500(
    cpu_server: RunningServer,
    neighbour: Neighbour,
    error_log: ErrorLog,  # noqa: F811
) -> None:
    stats: dict[str, int] = {}
    client = httpx.Client(base_url=cpu_server.http_url, timeout=120)

    @settings(
        max_examples=EXAMPLES,
        derandomize=True,
        database=None,
        deadline=None,
        print_blob=True,
        suppress_health_check=list(HealthCheck),
    )
    @given(schemas, st.sampled_from(sorted(FIELDS)), st.booleans())
    def one_schema(schema: dict[str, Any], target: str, stream: bool) -> None:
        _check(client, schema, target, stream, stats)

    try:
        one_schema()
    finally:
        client.close()
    refused = sum(n for status, n in stats.items() if status.endswith("400"))
    served = sum(n for status, n in stats.items() if status.endswith("200"))
    assert refused > 3 and served > 3, stats
    assert not error_log.records, [r.getMessage() for r in error_log.records]
