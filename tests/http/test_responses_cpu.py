"""The Responses API on the cpu engine (the tiny random-weight model): a continuation by
`previous_response_id` is rebuilt into a prompt that starts with the earlier turn's,
so the engine's prefix cache serves it and `cached_tokens` says so."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

import httpx  # noqa: E402
import openai  # noqa: E402

from realtime.config import ServerConfig  # noqa: E402
from tests.conftest import RunningServer, start_server, wait_until  # noqa: E402
from tests.served_engines import CPU_MODES, cpu_engine  # noqa: E402

MODEL = "tiny"
FIRST = "Tell me a long story about the sea, the wind, the boats and the harbour at night."


@pytest.fixture(scope="module", params=CPU_MODES)
def server(request: pytest.FixtureRequest, tiny_model_dir: Path) -> Iterator[RunningServer]:
    engine = cpu_engine(tiny_model_dir, request.param, model_name=MODEL)
    running = start_server(ServerConfig(log_level="warning"), engine)  # type: ignore[arg-type]
    yield running
    running.stop()


def test_a_continuation_reports_the_cached_prefix(server: RunningServer) -> None:
    with openai.OpenAI(base_url=server.http_url + "/v1", api_key="x", max_retries=0) as client:
        first = client.responses.create(
            model=MODEL, input=FIRST, max_output_tokens=8, temperature=0
        )
        assert first.usage is not None
        assert first.usage.input_tokens_details.cached_tokens == 0
        second = client.responses.create(
            model=MODEL,
            input="And then?",
            previous_response_id=first.id,
            max_output_tokens=4,
            temperature=0,
        )
    usage = second.usage
    assert usage is not None
    cached = usage.input_tokens_details.cached_tokens
    # the whole first prompt was computed before; the continuation only adds to it
    assert cached >= first.usage.input_tokens - 1, (cached, first.usage.input_tokens)
    assert cached > usage.input_tokens / 2, (cached, usage.input_tokens)
    assert usage.input_tokens > first.usage.input_tokens


def test_a_response_that_asks_warms_its_next_turn(server: RunningServer) -> None:
    """`nvext.agent_hints.speculative_prefill` (the chat API's hint, sent as extra_body):
    after the answer the server prefills the next turn's prefix, so the continuation
    finds the whole earlier conversation, answer included, in the cache."""
    speculative = server.app.state.pipeline.speculative
    done = speculative.stats.completed
    hint = {"nvext": {"agent_hints": {"speculative_prefill": True}}}
    with openai.OpenAI(base_url=server.http_url + "/v1", api_key="x", max_retries=0) as client:
        first = client.responses.create(
            model=MODEL, input=FIRST + " Warm.", max_output_tokens=8, temperature=0, extra_body=hint
        )
        wait_until(lambda: speculative.stats.completed > done, timeout=30)
        warmed = speculative.stats.recent[-1]
        second = client.responses.create(
            model=MODEL,
            input="And then?",
            previous_response_id=first.id,
            max_output_tokens=2,
            temperature=0,
        )
    assert warmed.outcome == "completed" and first.usage is not None
    # the warm-up covered the first prompt and its answer as the next turn renders it
    assert warmed.prompt_tokens > first.usage.input_tokens
    assert second.usage is not None
    assert second.usage.input_tokens_details.cached_tokens == warmed.prompt_tokens


@pytest.fixture(scope="module", params=CPU_MODES)
def plain_server(request: pytest.FixtureRequest, tiny_model_dir: Path) -> Iterator[RunningServer]:
    """No reasoning parser: the Responses API has no `chat_template_kwargs` to switch the
    tiny template's thinking off, and a random model may think until max_output_tokens."""
    engine = cpu_engine(tiny_model_dir, request.param, model_name=MODEL)
    config = ServerConfig(log_level="warning", reasoning_parser="none")
    running = start_server(config, engine)  # type: ignore[arg-type]
    yield running
    running.stop()


def test_text_format_json_schema_is_enforced(plain_server: RunningServer) -> None:
    """`text.format` (the Responses form of structured outputs) reaches the grammar:
    a random-weight model's sampled answers are valid JSON of the schema."""
    server = plain_server
    schema = {
        "type": "object",
        "properties": {"color": {"enum": ["red", "blue"]}, "n": {"type": "integer"}},
        "required": ["color", "n"],
        "additionalProperties": False,
    }
    fmt = {"type": "json_schema", "name": "pick", "schema": schema, "strict": True}
    with openai.OpenAI(base_url=server.http_url + "/v1", api_key="x", max_retries=0) as client:
        for _ in range(3):
            response = client.responses.create(
                model=MODEL,
                input="Pick one.",
                text={"format": fmt},  # type: ignore[typeddict-item]
                temperature=1.0,
                max_output_tokens=200,
            )
            value = json.loads(response.output_text)
            assert set(value) == {"color", "n"} and value["color"] in ("red", "blue")
            assert isinstance(value["n"], int)
            # The Response shows the format that was applied, as OpenAI's does.
            assert response.text.format.model_dump(by_alias=True, exclude_none=True) == fmt


def test_the_response_echoes_the_applied_text_format(plain_server: RunningServer) -> None:
    """`text.format` is echoed in every form of the Response: the created event of a
    stream, the stored object, and a `json_object` format as well."""
    url = plain_server.http_url + "/v1/responses"
    fmt = {"type": "json_object"}
    body = {"model": MODEL, "input": "JSON.", "text": {"format": fmt}, "max_output_tokens": 4}
    created = httpx.post(url, json=body, timeout=60)
    assert created.status_code == 200, created.text
    assert created.json()["text"]["format"] == fmt
    stored = httpx.get(f"{url}/{created.json()['id']}", timeout=60).json()
    assert stored["text"]["format"] == fmt
    with httpx.stream("POST", url, json={**body, "stream": True}, timeout=60) as stream:
        first = next(line for line in stream.iter_lines() if line.startswith("data: "))
    event = json.loads(first[len("data: ") :])
    assert event["type"] == "response.created"
    assert event["response"]["text"]["format"] == fmt


def test_a_custom_tools_regex_constrains_its_input(plain_server: RunningServer) -> None:
    """A `custom` tool with a regex `format`, called by `tool_choice`: a random-weight
    model's sampled inputs all match it, and come back as `custom_tool_call` items."""
    import re

    server = plain_server
    regex = "(red|blue)-[0-9]{2}"
    tool = {
        "type": "custom",
        "name": "paint",
        "description": "Paint with a color code",
        "format": {"type": "grammar", "syntax": "regex", "definition": regex},
    }
    with openai.OpenAI(base_url=server.http_url + "/v1", api_key="x", max_retries=0) as client:
        for _ in range(3):
            response = client.responses.create(
                model=MODEL,
                input="Paint something.",
                tools=[tool],  # type: ignore[list-item]
                tool_choice={"type": "custom", "name": "paint"},
                temperature=1.0,
                max_output_tokens=120,
            )
            calls = [item for item in response.output if item.type == "custom_tool_call"]
            assert calls, response.output
            for call in calls:
                assert call.name == "paint" and re.fullmatch(regex, call.input), call.input
