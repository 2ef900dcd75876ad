"""Hostile schemas through a real server: refused before the answer, or served within
the grammar limits; never a 500, never an engine error in the middle of an answer.

The cpu engine with the tiny random-weight model (in the server's process and in an
engine process of its own), raw HTTP, the `openai` SDK on the Realtime events, and
`websockets` for chat frames on /v1/realtime. Every surface that takes a schema:
chat completions, the Responses API, Realtime events, WebSocket chat frames. Each
schema family here got a 200 and then a 500 `engine_error` mid-answer before issue
27 (a `$ref` recursion through a required property; an enum of 3,000 objects; an
`anyOf` of 400 objects; 1,500 optional properties), in `response_format` and in
tool parameters alike.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import jsonschema
import openai
import pytest
from websockets.asyncio.client import connect

from realtime.config import ServerConfig
from tests.conftest import RunningServer, start_server
from tests.served_engines import CPU_MODES, IN_PROCESS, cpu_engine

pytest_plugins = ["tests.model_fixtures"]

torch = pytest.importorskip("torch")

MODEL = "tiny"
NO_THINKING = {"chat_template_kwargs": {"enable_thinking": False}}

#: Every branch of these nests itself for ever somewhere a value may go.
ENDLESS = {
    "required property": {"type": "object", "properties": {"a": {"$ref": "#"}}, "required": ["a"]},
    "anyOf branch": {
        "anyOf": [
            {"type": "string"},
            {"type": "object", "properties": {"a": {"$ref": "#/anyOf/1"}}, "required": ["a"]},
        ]
    },
    "optional property": {
        "type": "object",
        "properties": {
            "x": {
                "type": "object",
                "properties": {"a": {"$ref": "#/properties/x"}},
                "required": ["a"],
            }
        },
    },
    "non-empty array": {"type": "array", "items": {"$ref": "#"}, "minItems": 1},
    "through $defs": {
        "$defs": {
            "a": {"type": "object", "properties": {"b": {"$ref": "#/$defs/b"}}, "required": ["b"]},
            "b": {"type": "array", "items": {"$ref": "#/$defs/a"}, "minItems": 1},
        },
        "type": "object",
        "properties": {"start": {"$ref": "#/$defs/a"}},
    },
}
#: The same, as tool parameters: an object, whose `$ref`s point into its `$defs`.
ENDLESS_TOOLS = {
    "required property": {
        "$defs": {
            "n": {"type": "object", "properties": {"a": {"$ref": "#/$defs/n"}}, "required": ["a"]}
        },
        "type": "object",
        "properties": {"arg": {"$ref": "#/$defs/n"}},
        "required": ["arg"],
    },
    "anyOf branch": {
        "$defs": {
            "n": {"type": "object", "properties": {"a": {"$ref": "#/$defs/n"}}, "required": ["a"]}
        },
        "type": "object",
        "properties": {"arg": {"anyOf": [{"type": "integer"}, {"$ref": "#/$defs/n"}]}},
    },
    "non-empty array": {
        "$defs": {"n": {"type": "array", "items": {"$ref": "#/$defs/n"}, "minItems": 1}},
        "type": "object",
        "properties": {"arg": {"$ref": "#/$defs/n"}},
    },
}
#: Large, but ordinary: served under the default limits.
ENUM_OF_OBJECTS = {"enum": [{"k": i} for i in range(3000)]}
ANY_OF_OBJECTS = {
    "anyOf": [
        {"type": "object", "properties": {f"p{i}": {"type": "integer"}}, "required": [f"p{i}"]}
        for i in range(400)
    ]
}
MANY_OPTIONAL = {
    "type": "object",
    "properties": {f"property_{i:04d}": {"type": "string"} for i in range(1500)},
    "additionalProperties": False,
}
LARGE = {"enum of 3,000 objects": ENUM_OF_OBJECTS, "anyOf of 400 objects": ANY_OF_OBJECTS,
         "1,500 optional properties": MANY_OPTIONAL}  # fmt: skip


def fmt(schema: Any) -> dict[str, Any]:
    return {"type": "json_schema", "json_schema": {"name": "h", "schema": schema}}


def tools(schema: Any) -> list[dict[str, Any]]:
    return [{"type": "function", "function": {"name": "t", "parameters": schema}}]


def ask(**extra: Any) -> dict[str, Any]:
    return {
        "model": MODEL,
        "messages": [{"role": "user", "content": "Answer."}],
        "temperature": 1.0,
        "seed": 3,
        "max_tokens": 200,
        **NO_THINKING,
        **extra,
    }


def _serve(tiny_model_dir: Path, mode: str = IN_PROCESS, **config: Any) -> Iterator[RunningServer]:
    engine = cpu_engine(tiny_model_dir, mode, model_name=MODEL)
    running = start_server(
        ServerConfig(log_level="warning", tool_parser="hermes", **config),
        engine,  # type: ignore[arg-type]
    )
    try:
        yield running
    finally:
        running.stop()


@pytest.fixture(scope="module", params=CPU_MODES)
def served(request: pytest.FixtureRequest, tiny_model_dir: Path) -> Iterator[RunningServer]:
    yield from _serve(tiny_model_dir, request.param)


@pytest.fixture(scope="module", params=CPU_MODES)
def narrow(request: pytest.FixtureRequest, tiny_model_dir: Path) -> Iterator[RunningServer]:
    """A row limit an object of 1,500 optional properties exceeds at its first `{`, and a
    tool whose argument is one of 300 objects exceeds too (a schema small enough to fit
    the tiny model's prompt, which shows the tools)."""
    yield from _serve(tiny_model_dir, request.param, grammar_row_items=200)


def post(server: RunningServer, body: dict[str, Any]) -> httpx.Response:
    return httpx.post(server.http_url + "/v1/chat/completions", json=body, timeout=120)


def stream_events(server: RunningServer, body: dict[str, Any]) -> tuple[int, list[Any]]:
    """The status of a streamed request and its SSE events (as JSON)."""
    url = server.http_url + "/v1/chat/completions"
    with httpx.stream("POST", url, json={**body, "stream": True}, timeout=120) as response:
        if response.status_code != 200:
            return response.status_code, [json.loads(response.read())]
        lines = [line for line in response.iter_lines() if line.startswith("data: {")]
    return 200, [json.loads(line[len("data: ") :]) for line in lines]


def assert_refused(response: httpx.Response, param: str, *words: str) -> None:
    assert response.status_code == 400, response.text[:300]
    error = response.json()["error"]
    assert error["type"] == "invalid_request_error" and error["param"] == param, error
    for word in words:
        assert word in error["message"], error["message"]


# --- refused before the answer -------------------------------------------------------


@pytest.mark.parametrize("schema", list(ENDLESS.values()), ids=list(ENDLESS))
def test_a_schema_with_no_finite_value_is_a_400_before_the_answer(
    served: RunningServer, schema: Any
) -> None:
    assert_refused(post(served, ask(response_format=fmt(schema))), "response_format", "finite")
    status, events = stream_events(served, ask(response_format=fmt(schema)))
    assert status == 400 and events[0]["error"]["param"] == "response_format"


@pytest.mark.parametrize("schema", list(ENDLESS_TOOLS.values()), ids=list(ENDLESS_TOOLS))
def test_tool_parameters_with_no_finite_value_are_a_400_naming_tools(
    served: RunningServer, schema: Any
) -> None:
    for choice in ("required", "auto"):
        body = ask(
            tools=tools(schema), tool_choice=choice, response_format=fmt({"type": "boolean"})
        )
        assert_refused(post(served, body), "tools", "finite")


def test_a_limit_the_first_tokens_meet_is_a_400_naming_its_flag(narrow: RunningServer) -> None:
    assert_refused(
        post(narrow, ask(response_format=fmt(MANY_OPTIONAL))),
        "response_format",
        "--grammar-row-items",
    )
    wide = {
        "type": "object",
        "properties": {"arg": {"enum": [{"k": i} for i in range(300)]}},
        "required": ["arg"],
    }
    body = ask(tools=tools(wide), tool_choice="required")
    assert_refused(post(narrow, body), "tools", "--grammar-row-items")


def test_a_grammar_larger_than_its_limit_is_a_400(tiny_model_dir: Path) -> None:
    for server in _serve(tiny_model_dir, grammar_max_size=2000):
        assert_refused(
            post(server, ask(response_format=fmt(ANY_OF_OBJECTS))),
            "response_format",
            "--grammar-max-size",
        )


# --- served -----------------------------------------------------------------------


@pytest.mark.parametrize("schema", list(LARGE.values()), ids=list(LARGE))
def test_large_ordinary_schemas_are_served_and_answers_validate(
    served: RunningServer, schema: Any
) -> None:
    for stream in (False, True):
        if stream:
            status, events = stream_events(served, ask(response_format=fmt(schema)))
            assert status == 200
            assert not [e for e in events if "error" in e], events[-3:]
            continue
        response = post(served, ask(response_format=fmt(schema)))
        assert response.status_code == 200, response.text[:300]
        choice = response.json()["choices"][0]
        if choice["finish_reason"] == "stop":
            jsonschema.validate(json.loads(choice["message"]["content"]), schema)
        else:  # cut off by max_tokens: a prefix of a valid answer
            assert choice["finish_reason"] == "length"


# --- a limit met in the middle of an answer --------------------------------------------

#: A string first (the compile's trial stops at its many possible tokens), then an
#: object that branches 6,007 ways, more than the narrow server's row limit.
LATE = {
    "type": "object",
    "properties": {"x": {"type": "string"}, "y": MANY_OPTIONAL},
    "required": ["x", "y"],
    "additionalProperties": False,
}


def late_body(server: RunningServer) -> dict[str, Any]:
    """The model is pushed to close the string at once, so the answer meets `y` soon."""
    (quote,) = server.engine.info.tokenizer.encode('"')
    return ask(response_format=fmt(LATE), logit_bias={str(quote): 100})


def test_a_limit_met_mid_answer_is_the_request_s_error_not_a_500(narrow: RunningServer) -> None:
    response = post(narrow, late_body(narrow))
    assert_refused(response, "response_format", "--grammar-row-items")
    status, events = stream_events(narrow, late_body(narrow))
    assert status == 200  # the answer had started
    errors = [e["error"] for e in events if "error" in e]
    assert len(errors) == 1, events[-3:]
    assert errors[0]["type"] == "invalid_request_error"
    assert errors[0]["param"] == "response_format" and "--grammar-row-items" in errors[0]["message"]
    # The engine carries on.
    ok = post(narrow, ask(response_format=fmt({"type": "boolean"})))
    assert ok.status_code == 200 and json.loads(ok.json()["choices"][0]["message"]["content"]) in (
        True,
        False,
    )


# --- the socket ---------------------------------------------------------------------


async def test_on_the_socket_a_hostile_schema_is_an_error_frame_and_the_socket_carries_on(
    served: RunningServer,
) -> None:
    async with connect(served.ws_url) as ws:
        endless = ENDLESS["required property"]
        await ws.send(json.dumps({**ask(response_format=fmt(endless)), "request_id": "bad"}))
        while (frame := json.loads(await ws.recv())).get("request_id") != "bad":
            pass
        assert frame["type"] == "error" and frame["error"]["param"] == "response_format"
        # the same for tool parameters under tool_choice required, before any answer frame
        endless_tool = tools(ENDLESS_TOOLS["required property"])
        body = ask(tools=endless_tool, tool_choice="required")
        await ws.send(json.dumps({**body, "request_id": "bad tools"}))
        while (frame := json.loads(await ws.recv())).get("request_id") != "bad tools":
            pass
        assert frame["type"] == "error" and frame["error"]["param"] == "tools", frame
        await ws.send(json.dumps({**ask(response_format=fmt(ANY_OF_OBJECTS)), "request_id": "ok"}))
        while True:
            frame = json.loads(await ws.recv())
            if frame.get("request_id") == "ok" and frame.get("type") in ("response.done", "error"):
                break
        assert frame["type"] == "response.done", frame


# --- the Responses API and the Realtime events ----------------------------------------


def responses_body(**extra: Any) -> dict[str, Any]:
    return {"model": MODEL, "input": "Answer.", "max_output_tokens": 64, **extra}


def responses_format(schema: Any) -> dict[str, Any]:
    return {"format": {"type": "json_schema", "name": "h", "schema": schema}}


def responses_tools(schema: Any) -> list[dict[str, Any]]:
    return [{"type": "function", "name": "t", "parameters": schema}]


def post_responses(server: RunningServer, body: dict[str, Any]) -> list[httpx.Response]:
    """The answer to `body`, plain and streamed (the streamed one read whole)."""
    url = server.http_url + "/v1/responses"
    return [httpx.post(url, json={**body, "stream": s}, timeout=120) for s in (False, True)]


def test_responses_refuse_a_hostile_text_format_before_the_answer(served: RunningServer) -> None:
    for schema in ENDLESS.values():
        for response in post_responses(served, responses_body(text=responses_format(schema))):
            assert_refused(response, "text.format", "finite")


def test_responses_refuse_hostile_tools_under_tool_choice_required(served: RunningServer) -> None:
    for schema in ENDLESS_TOOLS.values():
        body = responses_body(tools=responses_tools(schema), tool_choice="required")
        for response in post_responses(served, body):
            assert_refused(response, "tools", "finite")


def test_responses_name_the_flag_of_the_limit_the_first_tokens_meet(narrow: RunningServer) -> None:
    for response in post_responses(narrow, responses_body(text=responses_format(MANY_OPTIONAL))):
        assert_refused(response, "text.format", "--grammar-row-items")


#: What a refused Realtime response must never have sent before its error.
ANSWER_EVENTS = ("response.output_item.added", "response.content_part.added")


async def realtime_refusal(server: RunningServer, session: dict[str, Any]) -> list[Any]:
    """The events a Realtime session with `session` settings sends for one response
    (to its `response.done`), then the `response.done` of a plain response after it."""
    async with (
        openai.AsyncOpenAI(base_url=server.http_url + "/v1", api_key="x", max_retries=0) as client,
        client.realtime.connect(model=MODEL) as conn,
    ):
        assert (await conn.recv()).type == "session.created"
        await conn.session.update(session={"type": "realtime", **session})
        assert (await conn.recv()).type == "session.updated"
        text = {"type": "input_text", "text": "Hi"}
        await conn.conversation.item.create(
            item={"type": "message", "role": "user", "content": [text]}
        )
        await conn.response.create(response={"max_output_tokens": 8})
        events = []
        while (event := await conn.recv()).type != "response.done":
            events.append(event)
        events.append(event)
        # the session carries on: a response without the tools completes
        plain = {"max_output_tokens": 8, "tools": [], "tool_choice": "auto"}
        await conn.response.create(response=plain)  # type: ignore[arg-type]
        while (event := await conn.recv()).type != "response.done":
            pass
        events.append(event)
    return events


async def test_realtime_events_refuse_hostile_tools_under_tool_choice_required(
    served: RunningServer,
) -> None:
    for schema in ENDLESS_TOOLS.values():
        session = {"tools": responses_tools(schema), "tool_choice": "required"}
        *events, done, after = await realtime_refusal(served, session)
        kinds = [e.type for e in events]
        # the error comes before any part of an answer, and the response fails empty
        assert not [k for k in kinds if k in ANSWER_EVENTS or ".delta" in k], kinds
        (error,) = [e for e in events if e.type == "error"]
        assert error.error.type == "invalid_request_error"
        assert error.error.param == "session.tools" and "finite" in error.error.message
        assert done.response.status == "failed" and not done.response.output, done.response
        assert after.response.status in ("completed", "incomplete"), after.response


pytestmark = pytest.mark.anyio
