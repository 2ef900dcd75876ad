"""Structured outputs end to end: a real server, the `openai` SDK over HTTP and
`websockets` on /v1/realtime, with random-weight models that never write JSON by
themselves (tests/constrain/test_structured_sampling.py shows the control).

Every check runs on both engines that constrain: the cpu engine with the tiny model,
and the exllamav2 engine against the fake exllamav2 (which calls the grammar filter
as exllamav2 0.3.2 does) with a seeded random distribution as its model. The echo
engine refuses the JSON modes with a clear 400.
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
from websockets.asyncio.client import ClientConnection, connect

from realtime.config import ServerConfig
from tests.conftest import RunningServer, start_server
from tests.served_engines import ENGINE_PROCESS, IN_PROCESS, cpu_engine

pytestmark = pytest.mark.anyio
pytest_plugins = ["tests.model_fixtures"]

torch = pytest.importorskip("torch")

MODEL = "tiny"
TICKET: dict[str, Any] = {
    "type": "object",
    "properties": {
        "color": {"type": "string", "enum": ["red", "green", "blue"]},
        "urgent": {"type": "boolean"},
        "priority": {"type": "integer", "minimum": 1, "maximum": 5},
    },
    "required": ["color", "urgent", "priority"],
    "additionalProperties": False,
}
TICKET_FORMAT = {
    "type": "json_schema",
    "json_schema": {"name": "ticket", "schema": TICKET, "strict": True},
}
WEATHER = {
    "type": "object",
    "properties": {
        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
        "days": {"type": "integer", "minimum": 1, "maximum": 14},
        "alerts": {"type": "boolean"},
    },
    "required": ["unit", "days"],
    "additionalProperties": False,
}
ZONE = {
    "type": "object",
    "properties": {"zone": {"type": "string", "enum": ["utc", "local"]}},
    "required": ["zone"],
    "additionalProperties": False,
}
TOOLS = [
    {"type": "function", "function": {"name": "get_weather", "parameters": WEATHER}},
    {"type": "function", "function": {"name": "get_time", "parameters": ZONE}},
]
SCHEMAS = {"get_weather": WEATHER, "get_time": ZONE}
#: The tiny template thinks unless told not to; most checks ask for the answer alone
#: (one test below lets the model think first).
NO_THINKING = {"chat_template_kwargs": {"enable_thinking": False}}
SEEDS = range(6)


def random_model(size: int) -> Any:
    """The fake exllamav2's model: logits drawn from a normal distribution seeded by the
    sequence (a random-weight model)."""

    def logits(sequence: list[int], prompt_length: int) -> list[float]:
        generator = torch.Generator().manual_seed(hash((len(sequence), *sequence[-3:])) % 2**31)
        return torch.randn(size, generator=generator).tolist()

    return logits


@pytest.fixture(scope="module", params=["cpu", "cpu-engine-process", "exllamav2"])
def served(request: pytest.FixtureRequest, tiny_model_dir: Path) -> Iterator[RunningServer]:
    patch = pytest.MonkeyPatch()
    engine: Any
    if request.param.startswith("cpu"):
        mode = ENGINE_PROCESS if request.param == "cpu-engine-process" else IN_PROCESS
        engine = cpu_engine(tiny_model_dir, mode, model_name=MODEL)
    else:
        from realtime.engine.exllamav2.engine import ExLlamaV2Engine
        from realtime.testing import fake_exllamav2 as fake

        state = fake.install(patch)
        vocab = json.loads((tiny_model_dir / "config.json").read_text())["vocab_size"]
        state.logits_fn = random_model(vocab)
        engine = ExLlamaV2Engine(tiny_model_dir, model_name=MODEL)
    running = start_server(ServerConfig(log_level="warning"), engine)
    try:
        yield running
    finally:
        running.stop()
        patch.undo()


@pytest.fixture
def sdk(served: RunningServer) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=served.http_url + "/v1", api_key="x", max_retries=0) as client:
        yield client


def ask(**extra: Any) -> dict[str, Any]:
    return {
        "model": MODEL,
        "messages": [{"role": "user", "content": "File a ticket."}],
        "temperature": 1.0,
        **NO_THINKING,
        **extra,
    }


def sdk_ask(**extra: Any) -> dict[str, Any]:
    """`ask` as the SDK takes it (extensions go in `extra_body`)."""
    body = ask(**extra)
    kwargs = body.pop("chat_template_kwargs")
    return {**body, "extra_body": {"chat_template_kwargs": kwargs}}


def token_id(served: RunningServer, text: str) -> int:
    (found,) = served.engine.info.tokenizer.encode(text)
    return int(found)


# --- response_format ------------------------------------------------------------


def test_sampled_json_schema_answers_parse_and_validate(sdk: openai.OpenAI) -> None:
    answers = set()
    for seed in SEEDS:
        completion = sdk.chat.completions.create(
            **sdk_ask(seed=seed, response_format=TICKET_FORMAT)
        )
        choice = completion.choices[0]
        assert choice.finish_reason == "stop", choice
        assert choice.message.content is not None
        jsonschema.validate(json.loads(choice.message.content), TICKET)
        answers.add(choice.message.content)
    assert len(answers) > 1  # sampled at temperature 1, not one forced answer


def test_a_streamed_answers_joined_deltas_validate(sdk: openai.OpenAI) -> None:
    stream = sdk.chat.completions.create(
        **sdk_ask(seed=7, response_format=TICKET_FORMAT, stream=True)
    )
    pieces = [c.choices[0].delta.content or "" for c in stream if c.choices]
    assert len([p for p in pieces if p]) > 1
    jsonschema.validate(json.loads("".join(pieces)), TICKET)


def test_json_object_answers_parse_as_objects(sdk: openai.OpenAI) -> None:
    for seed in range(3):
        completion = sdk.chat.completions.create(
            **sdk_ask(seed=seed, max_tokens=3000, response_format={"type": "json_object"})
        )
        choice = completion.choices[0]
        assert choice.finish_reason == "stop", completion.usage
        assert isinstance(json.loads(choice.message.content or ""), dict)


def test_max_tokens_inside_an_answer_is_length_with_the_partial_text(sdk: openai.OpenAI) -> None:
    completion = sdk.chat.completions.create(
        **sdk_ask(seed=1, max_tokens=4, response_format=TICKET_FORMAT)
    )
    choice = completion.choices[0]
    assert choice.finish_reason == "length" and completion.usage is not None
    assert completion.usage.completion_tokens == 4
    partial = choice.message.content or ""
    assert partial.startswith("{")
    with pytest.raises(ValueError):
        json.loads(partial)


def test_text_completions_take_a_response_format(served: RunningServer) -> None:
    body = {
        "model": MODEL,
        "prompt": ["A ticket as JSON:", "Another one:"],
        "max_tokens": 200,
        "temperature": 1.0,
        "seed": 3,
        "response_format": TICKET_FORMAT,
    }
    response = httpx.post(served.http_url + "/v1/completions", json=body, timeout=60)
    assert response.status_code == 200, response.text
    for choice in response.json()["choices"]:
        assert choice["finish_reason"] == "stop"
        jsonschema.validate(json.loads(choice["text"]), TICKET)


def test_a_reasoning_block_may_come_before_the_answer(served: RunningServer) -> None:
    """With thinking on, the grammar allows <think>...</think> first; the bias makes the
    model take it and leave it soon. The answer after it still validates."""
    think, end = token_id(served, "<think>"), token_id(served, "</think>")
    body = ask(seed=2, response_format=TICKET_FORMAT, logit_bias={str(think): 50, str(end): 3})
    del body["chat_template_kwargs"]
    response = httpx.post(served.http_url + "/v1/chat/completions", json=body, timeout=60)
    assert response.status_code == 200, response.text
    message = response.json()["choices"][0]["message"]
    assert message["reasoning_content"]
    jsonschema.validate(json.loads(message["content"]), TICKET)


# --- tool_choice ------------------------------------------------------------------


@pytest.mark.parametrize(
    "choice", ["required", {"type": "function", "function": {"name": "get_time"}}]
)
def test_required_and_named_choices_always_call_a_valid_tool(
    sdk: openai.OpenAI, choice: Any
) -> None:
    named = choice["function"]["name"] if isinstance(choice, dict) else None
    for seed in range(4):
        completion = sdk.chat.completions.create(
            **sdk_ask(seed=seed, max_tokens=300, tools=TOOLS, tool_choice=choice)
        )
        result = completion.choices[0]
        assert result.finish_reason == "tool_calls", result
        assert not result.message.content
        calls = result.message.tool_calls or []
        assert calls
        for call in calls:
            assert call.type == "function"
            assert call.function.name in SCHEMAS
            if named is not None:
                assert call.function.name == named
            jsonschema.validate(json.loads(call.function.arguments), SCHEMAS[call.function.name])


def test_parallel_tool_calls_false_gives_exactly_one_call(sdk: openai.OpenAI) -> None:
    for seed in range(4):
        completion = sdk.chat.completions.create(
            **sdk_ask(
                seed=seed,
                max_tokens=300,
                tools=TOOLS,
                tool_choice="required",
                parallel_tool_calls=False,
            )
        )
        (call,) = completion.choices[0].message.tool_calls or []
        jsonschema.validate(json.loads(call.function.arguments), SCHEMAS[call.function.name])


def test_tool_choice_none_bans_the_call_marker(served: RunningServer) -> None:
    """The marker made all but certain: `auto` writes it at once, `none` never."""
    marker = token_id(served, "<tool_call>")
    extra = {"nvext": {"extra_fields": ["completion_token_ids"]}}
    written = {}
    for choice in ("auto", "none"):
        body = ask(seed=0, max_tokens=6, tools=TOOLS, tool_choice=choice, **extra)
        body["logit_bias"] = {str(marker): 100}
        response = httpx.post(served.http_url + "/v1/chat/completions", json=body, timeout=60)
        assert response.status_code == 200, response.text
        written[choice] = marker in response.json()["nvext"]["completion_token_ids"]
    assert written == {"auto": True, "none": False}


# --- refusals ---------------------------------------------------------------------

BAD_SCHEMAS = [
    {"type": "wat"},
    {"type": "integer", "minimum": 5, "maximum": 1},
    ["not", "an", "object"],
    {"type": "object", "properties": {"a": {"$ref": "#/$defs/missing"}}},
    {"$ref": "#"},  # compiles, but no answer can start
]


@pytest.mark.parametrize("schema", BAD_SCHEMAS)
def test_an_invalid_schema_is_a_400_naming_response_format(
    served: RunningServer, schema: Any
) -> None:
    fmt = {"type": "json_schema", "json_schema": {"name": "bad", "schema": schema}}
    response = httpx.post(
        served.http_url + "/v1/chat/completions", json=ask(response_format=fmt), timeout=30
    )
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["param"].startswith("response_format")
    assert error["type"] == "invalid_request_error"
    assert "Traceback" not in error["message"]


def test_a_schema_over_the_size_limit_is_refused_before_compiling(served: RunningServer) -> None:
    big = {"type": "object", "description": "x" * 70_000}
    fmt = {"type": "json_schema", "json_schema": {"name": "big", "schema": big}}
    response = httpx.post(
        served.http_url + "/v1/chat/completions", json=ask(response_format=fmt), timeout=30
    )
    assert response.status_code == 400
    assert "the limit is 65536" in response.json()["error"]["message"]


def test_a_tool_schema_the_format_cannot_enforce_is_a_400_naming_tools(
    served: RunningServer,
) -> None:
    tools = [{"type": "function", "function": {"name": "t", "parameters": {"type": "wat"}}}]
    body = ask(tools=tools, tool_choice="required")
    response = httpx.post(served.http_url + "/v1/chat/completions", json=body, timeout=30)
    assert response.status_code == 400, response.text
    assert response.json()["error"]["param"] == "tools"


# --- the socket -------------------------------------------------------------------


async def collect(ws: ClientConnection, request_id: str) -> tuple[str, dict[str, Any]]:
    """The content a request streamed, and its terminal frame."""
    text = ""
    while True:
        frame = json.loads(await ws.recv())
        if frame.get("request_id") != request_id:
            continue
        if frame.get("object") == "chat.completion.chunk":
            text += "".join(c["delta"].get("content") or "" for c in frame["choices"])
        elif frame.get("type") in ("response.done", "error"):
            return text, frame


async def test_over_the_socket_answers_validate_and_a_bad_schema_is_an_error_frame(
    served: RunningServer,
) -> None:
    bad = {"type": "json_schema", "json_schema": {"name": "bad", "schema": {"type": "wat"}}}
    async with connect(served.ws_url) as ws:
        await ws.send(json.dumps({**ask(seed=4, response_format=TICKET_FORMAT), "request_id": "a"}))
        text, done = await collect(ws, "a")
        assert done["type"] == "response.done" and done["finish_reason"] == "stop"
        jsonschema.validate(json.loads(text), TICKET)

        await ws.send(json.dumps({**ask(response_format=bad), "request_id": "b"}))
        _, error = await collect(ws, "b")
        assert error["type"] == "error" and error["error"]["param"] == "response_format"

        # The socket carries on.
        await ws.send(json.dumps({**ask(seed=5, response_format=TICKET_FORMAT), "request_id": "c"}))
        text, done = await collect(ws, "c")
        assert done["type"] == "response.done"
        jsonschema.validate(json.loads(text), TICKET)


# --- engines that cannot constrain ------------------------------------------------


@pytest.fixture
def echo(server_factory: Any) -> RunningServer:
    running: RunningServer = server_factory(ServerConfig(log_level="warning"))
    return running


@pytest.mark.parametrize(
    "fmt", [{"type": "json_object"}, TICKET_FORMAT], ids=["json_object", "json_schema"]
)
def test_the_echo_engine_refuses_json_modes_clearly(echo: RunningServer, fmt: Any) -> None:
    body = {
        "model": "echo",
        "messages": [{"role": "user", "content": "hi"}],
        "response_format": fmt,
    }
    response = httpx.post(echo.http_url + "/v1/chat/completions", json=body, timeout=10)
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["param"] == "response_format" and error["code"] == "unsupported"
    assert "constrained generation" in error["message"] and "cpu or exllamav2" in error["message"]
    completions = {"model": "echo", "prompt": "hi", "response_format": fmt}
    response = httpx.post(echo.http_url + "/v1/completions", json=completions, timeout=10)
    assert response.status_code == 400 and response.json()["error"]["param"] == "response_format"


async def test_the_echo_engine_refuses_on_the_socket_and_carries_on(echo: RunningServer) -> None:
    body = {"model": "echo", "messages": [{"role": "user", "content": "hi"}]}
    async with connect(echo.ws_url) as ws:
        await ws.send(
            json.dumps({**body, "response_format": {"type": "json_object"}, "request_id": "a"})
        )
        _, error = await collect(ws, "a")
        assert error["type"] == "error" and error["error"]["code"] == "unsupported"
        await ws.send(json.dumps({**body, "request_id": "b"}))
        text, done = await collect(ws, "b")
        assert done["type"] == "response.done" and text == "hi"
