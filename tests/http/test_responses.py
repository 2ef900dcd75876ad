"""The Responses API over HTTP: a real server, the unmodified openai SDK, real TCP.

The echo model answers with the last user message, so expected text is the text
sent; the scripted engine (with the hermes tool parser) calls tools and records
every prompt, which shows what the server rebuilt from `previous_response_id`.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from realtime.config import ServerConfig
from realtime.engine.echo import EchoEngine, EchoTokenizer
from realtime.engine.scripted import ScriptedEngine
from tests.conftest import RunningServer, wait_until
from tests.dialects.responses.sdk_types import check_event, check_item, check_response

TOKENIZER = EchoTokenizer()
ERROR_KEYS = {"message", "type", "param", "code"}
TEXT = "Hello there, wonderful world! Ünïcödé 日本語 ok"
WEATHER = {
    "type": "function",
    "name": "get_weather",
    "description": "The weather in a city",
    "parameters": {
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
    },
    "strict": True,
}
SCRIPT = [
    {
        "match": "weather in Paris",
        "reply": "<tool_call>\n"
        '{"name": "get_weather", "arguments": {"city": "Paris"}}'
        "\n</tool_call>",
    },
    {"match": "sunny, 24 C", "reply": "It is sunny in Paris, 24 degrees."},
    {"match": "first turn", "reply": "First answer."},
    {"match": "second turn", "reply": "Second answer."},
]


def sdk(server: RunningServer, key: str = "x") -> openai.OpenAI:
    return openai.OpenAI(base_url=server.http_url + "/v1", api_key=key, max_retries=0)


@pytest.fixture
def echo(server_factory: Any) -> RunningServer:
    return server_factory(ServerConfig(log_level="warning"))  # type: ignore[no-any-return]


@pytest.fixture
def scripted(server_factory: Any) -> RunningServer:
    engine = ScriptedEngine(SCRIPT)
    config = ServerConfig(log_level="warning", tool_parser="hermes")
    return server_factory(config, engine)  # type: ignore[no-any-return]


# --- create, JSON and streamed ---


def test_create_returns_the_answer_as_a_response(echo: RunningServer) -> None:
    with sdk(echo) as client:
        response = client.responses.create(model="echo", input=TEXT, metadata={"k": "v"})
    assert response.object == "response" and response.status == "completed"
    assert response.id.startswith("resp_") and len(response.id) == len("resp_") + 32
    assert response.output_text == TEXT
    assert response.metadata == {"k": "v"} and response.store is True
    usage = response.usage
    assert usage is not None and usage.output_tokens == len(TOKENIZER.encode(TEXT))
    assert usage.input_tokens_details.cached_tokens == 0
    assert usage.output_tokens_details.reasoning_tokens == 0
    check_response(response.model_dump(mode="json", exclude_unset=True))


def test_streamed_deltas_join_to_the_final_text(echo: RunningServer) -> None:
    with sdk(echo) as client:
        stream = client.responses.create(model="echo", input=TEXT, stream=True)
        events = list(stream)
    numbers = [event.sequence_number for event in events]
    assert numbers == list(range(len(events)))
    deltas = [e.delta for e in events if e.type == "response.output_text.delta"]
    final = events[-1]
    assert final.type == "response.completed"
    assert len(deltas) == len(TOKENIZER.encode(TEXT))
    assert "".join(deltas) == final.response.output_text == TEXT
    assert [e.type for e in events].count("response.created") == 1
    for event in events:
        check_event(event.model_dump(mode="json", exclude_unset=True))


def test_the_sse_body_names_each_event_and_has_no_done_marker(echo: RunningServer) -> None:
    body = {"model": "echo", "input": "framing", "stream": True}
    with httpx.Client(base_url=echo.http_url, timeout=30) as client:
        response = client.post("/v1/responses", json=body)
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/event-stream")
    blocks = response.text.split("\n\n")
    assert blocks[-1] == "" and "[DONE]" not in response.text
    for block in blocks[:-1]:
        name, data = block.split("\n")
        event = json.loads(data.removeprefix("data: "))
        assert name == f"event: {event['type']}"
    assert json.loads(blocks[-2].split("\n")[1][6:])["type"] == "response.completed"


def test_the_stream_helper_of_the_sdk_accumulates_the_response(echo: RunningServer) -> None:
    with sdk(echo) as client, client.responses.stream(model="echo", input=TEXT) as stream:
        text = "".join(e.delta for e in stream if e.type == "response.output_text.delta")
        final = stream.get_final_response()
    assert text == final.output_text == TEXT


# --- stored responses ---


def test_retrieve_list_input_items_delete_and_cancel(echo: RunningServer) -> None:
    items = [
        {"role": "system", "content": "be nice"},
        {"role": "user", "content": [{"type": "input_text", "text": "hello"}]},
    ]
    with sdk(echo) as client:
        created = client.responses.create(model="echo", input=items)  # type: ignore[arg-type]
        got = client.responses.retrieve(created.id)
        assert got.id == created.id and got.output_text == "hello"
        assert got.model_dump() == created.model_dump()
        listed = client.responses.input_items.list(created.id)
        assert [item.role for item in listed.data] == ["user", "system"]  # newest first
        ascending = client.responses.input_items.list(created.id, order="asc", limit=1)
        assert [item.role for item in ascending.data] == ["system"] and ascending.has_more
        assert [i.role for i in client.responses.input_items.list(created.id, order="asc")] == [
            "system",
            "user",
        ]  # the SDK's auto-pagination follows `after`
        for item in listed.data:
            check_item(item.model_dump(mode="json", exclude_unset=True))
        with pytest.raises(openai.BadRequestError) as cancel:
            client.responses.cancel(created.id)
        assert cancel.value.body["code"] == "response_not_cancellable"  # type: ignore[index]
        client.responses.delete(created.id)
        for call in (
            client.responses.retrieve,
            client.responses.delete,
            client.responses.cancel,
            client.responses.input_items.list,
        ):
            with pytest.raises(openai.NotFoundError) as gone:
                call(created.id)
            error = gone.value.body
            assert isinstance(error, dict) and set(error) == ERROR_KEYS
            assert created.id in error["message"] and error["code"] == "response_not_found"


def test_an_unknown_id_is_refused_naming_it(echo: RunningServer) -> None:
    with sdk(echo) as client:
        with pytest.raises(openai.NotFoundError) as info:
            client.responses.retrieve("resp_doesnotexist")
        assert "resp_doesnotexist" in info.value.message
        with pytest.raises(openai.BadRequestError) as info:
            client.responses.create(model="echo", input="x", previous_response_id="resp_gone")
    body = info.value.body
    assert isinstance(body, dict) and body["code"] == "previous_response_not_found"
    assert body["param"] == "previous_response_id" and "resp_gone" in body["message"]


def test_store_false_is_neither_retrievable_nor_continuable(echo: RunningServer) -> None:
    with sdk(echo) as client:
        response = client.responses.create(model="echo", input="private", store=False)
        assert response.store is False and response.output_text == "private"
        with pytest.raises(openai.NotFoundError):
            client.responses.retrieve(response.id)
        with pytest.raises(openai.BadRequestError) as info:
            client.responses.create(model="echo", input="x", previous_response_id=response.id)
    assert info.value.body["code"] == "previous_response_not_found"  # type: ignore[index]


def test_previous_response_id_rebuilds_the_conversation(scripted: RunningServer) -> None:
    engine = scripted.engine
    with sdk(scripted) as client:
        first = client.responses.create(
            model="scripted", input="This is the first turn.", instructions="Be brief."
        )
        assert first.output_text == "First answer."
        second = client.responses.create(
            model="scripted", input="And the second turn.", previous_response_id=first.id
        )
        assert second.output_text == "Second answer."
        assert second.previous_response_id == first.id
    prompt = engine.prompts[-1]
    # the earlier input and answer, then only the new input; instructions not carried over
    assert prompt.index("This is the first turn.") < prompt.index("First answer.")
    assert prompt.index("First answer.") < prompt.index("And the second turn.")
    assert "Be brief." not in prompt and "Be brief." in engine.prompts[-2]
    with sdk(scripted) as client:
        items = client.responses.input_items.list(second.id)
    assert [item.content[0].text for item in items.data] == ["And the second turn."]


def test_a_store_survives_a_restart(server_factory: Any, tmp_path: Path) -> None:
    config = ServerConfig(log_level="warning", response_store_dir=str(tmp_path / "store"))
    first_server = server_factory(config, ScriptedEngine(SCRIPT))
    with sdk(first_server) as client:
        first = client.responses.create(model="scripted", input="This is the first turn.")
    first_server.stop()
    assert (tmp_path / "store" / "responses.sqlite3").exists()

    engine = ScriptedEngine(SCRIPT)
    second_server = server_factory(config, engine)
    with sdk(second_server) as client:
        kept = client.responses.retrieve(first.id)
        assert kept.output_text == "First answer." and kept.created_at == first.created_at
        second = client.responses.create(
            model="scripted", input="And the second turn.", previous_response_id=first.id
        )
    assert second.output_text == "Second answer."
    assert "This is the first turn." in engine.prompts[-1]


def test_each_key_sees_only_its_own_responses(server_factory: Any) -> None:
    server = server_factory(ServerConfig(log_level="warning", api_keys=("key-a", "key-b")))
    with sdk(server, "key-a") as alice, sdk(server, "key-b") as bob:
        mine = alice.responses.create(model="echo", input="alice's")
        assert alice.responses.retrieve(mine.id).output_text == "alice's"
        for call in (
            bob.responses.retrieve,
            bob.responses.delete,
            bob.responses.cancel,
            bob.responses.input_items.list,
        ):
            with pytest.raises(openai.NotFoundError):
                call(mine.id)
        with pytest.raises(openai.AuthenticationError):  # an unknown key: refused first
            with sdk(server, "key-c") as nobody:
                nobody.responses.retrieve(mine.id)
        with pytest.raises(openai.BadRequestError) as info:
            bob.responses.create(model="echo", input="x", previous_response_id=mine.id)
        assert info.value.body["code"] == "previous_response_not_found"  # type: ignore[index]
        # alice still has it, and continues it
        follow = alice.responses.create(model="echo", input="again", previous_response_id=mine.id)
        assert follow.output_text == "again"
        assert alice.responses.retrieve(mine.id).id == mine.id


# --- tools, limits, logprobs ---


def test_a_function_call_and_its_output_continue_the_conversation(
    scripted: RunningServer,
) -> None:
    engine = scripted.engine
    with sdk(scripted) as client:
        asked = client.responses.create(
            model="scripted",
            input="What is the weather in Paris?",
            tools=[WEATHER],  # type: ignore[list-item]
        )
        [call] = asked.output
        assert call.type == "function_call" and call.name == "get_weather"
        assert json.loads(call.arguments) == {"city": "Paris"}
        assert call.status == "completed" and call.call_id
        assert asked.output_text == ""
        answered = client.responses.create(
            model="scripted",
            previous_response_id=asked.id,
            input=[
                {
                    "type": "function_call_output",
                    "call_id": call.call_id,
                    "output": "sunny, 24 C",
                }
            ],
            tools=[WEATHER],  # type: ignore[list-item]
        )
    assert answered.output_text == "It is sunny in Paris, 24 degrees."
    prompt = engine.prompts[-1]
    assert "get_weather" in prompt and f"tool {call.call_id}: sunny, 24 C" in prompt


def test_a_streamed_function_call_has_argument_deltas(scripted: RunningServer) -> None:
    with sdk(scripted) as client:
        events = list(
            client.responses.create(
                model="scripted",
                input="What is the weather in Paris?",
                tools=[WEATHER],  # type: ignore[list-item]
                stream=True,
            )
        )
    kinds = [e.type for e in events]
    assert "response.function_call_arguments.delta" in kinds
    done = [e for e in events if e.type == "response.function_call_arguments.done"]
    deltas = "".join(e.delta for e in events if e.type == "response.function_call_arguments.delta")
    assert [e.arguments for e in done] == [deltas]
    assert json.loads(deltas) == {"city": "Paris"}
    added = next(e for e in events if e.type == "response.output_item.added")
    assert added.item.type == "function_call" and added.item.name == "get_weather"


def test_max_output_tokens_makes_the_response_incomplete(echo: RunningServer) -> None:
    with sdk(echo) as client:
        response = client.responses.create(model="echo", input=TEXT, max_output_tokens=3)
        events = list(
            client.responses.create(model="echo", input=TEXT, max_output_tokens=3, stream=True)
        )
    assert response.status == "incomplete"
    assert response.incomplete_details is not None
    assert response.incomplete_details.reason == "max_output_tokens"
    assert response.output_text == "".join(
        TOKENIZER.token_text(t) for t in TOKENIZER.encode(TEXT)[:3]
    )
    assert response.usage is not None and response.usage.output_tokens == 3
    assert events[-1].type == "response.incomplete"


def test_logprobs_are_returned_when_included(echo: RunningServer) -> None:
    with sdk(echo) as client:
        response = client.responses.create(
            model="echo",
            input="Hello there",
            include=["message.output_text.logprobs"],
            top_logprobs=1,
        )
    part = response.output[0].content[0]  # type: ignore[union-attr]
    assert part.logprobs is not None  # type: ignore[union-attr]
    assert "".join(lp.token for lp in part.logprobs) == "Hello there"  # type: ignore[union-attr]


def test_a_json_text_format_is_refused_naming_it(echo: RunningServer) -> None:
    schema = {"type": "object", "properties": {}}
    with sdk(echo) as client, pytest.raises(openai.BadRequestError) as info:
        client.responses.create(
            model="echo",
            input="x",
            text={"format": {"type": "json_schema", "name": "n", "schema": schema}},
        )
    body = info.value.body
    assert isinstance(body, dict) and body["param"] == "text.format"
    assert body["code"] == "unsupported" and "json_schema" in body["message"]


# --- bad input costs only the offender ---

BAD_BODIES: list[tuple[dict[str, Any], str]] = [
    ({"model": "echo", "input": "x", "temprature": 1}, "temprature"),
    ({"model": "echo", "input": [{"role": "user", "content": "x", "nme": "a"}]}, "input.0.nme"),
    ({"model": "echo", "input": [{"type": "computer_call_output"}]}, "input.0.type"),
    (
        {"model": "echo", "input": [{"role": "user", "content": [{"type": "input_audio"}]}]},
        "input.0.content.0.type",
    ),
    ({"model": "echo", "input": [{"type": "function_call", "name": "f"}]}, "input.0.call_id"),
    ({"model": "echo", "input": "x", "tools": [{"type": "custom"}]}, "tools.0.name"),
    ({"model": "echo", "input": "x", "tool_choice": "maybe"}, "tool_choice"),
    ({"model": "echo", "input": "x", "include": ["nothing"]}, "include.0"),
    ({"model": "echo", "input": "x", "max_output_tokens": "5"}, "max_output_tokens"),
    ({"model": "echo", "input": "x", "metadata": {"a": 1}}, "metadata.a"),
    ({"model": "echo", "input": "x", "background": True, "store": False}, "background"),
    ({"model": "other", "input": "x"}, "model"),
    ({"model": "echo", "input": "x", "stream": True, "top_p": 7}, "top_p"),
]


def test_bad_bodies_get_a_400_naming_the_field_and_the_connection_carries_on(
    echo: RunningServer,
) -> None:
    with httpx.Client(base_url=echo.http_url, timeout=30) as client:
        for body, param in BAD_BODIES:
            response = client.post("/v1/responses", json=body)
            assert response.status_code in (400, 404), (body, response.text)
            error = response.json()["error"]
            assert set(error) == ERROR_KEYS and error["param"] == param, (body, error)
        not_json = client.post("/v1/responses", content=b"{nope")
        assert not_json.status_code == 400
        assert "not valid JSON" in not_json.json()["error"]["message"]
        ok = client.post("/v1/responses", json={"model": "echo", "input": "still here"})
    assert ok.status_code == 200 and ok.json()["output"][0]["content"][0]["text"] == "still here"


@pytest.mark.parametrize(
    ("method", "path", "param"),
    [
        ("GET", "/v1/responses/resp_x?colour=red", "colour"),
        ("GET", "/v1/responses/resp_x?stream=yes", "stream"),
        ("GET", "/v1/responses/resp_x?stream=true&starting_after=-3", "starting_after"),
        ("GET", "/v1/responses/resp_x?include[]=bogus", "include"),
        ("GET", "/v1/responses/resp_x/input_items?limit=0", "limit"),
        ("GET", "/v1/responses/resp_x/input_items?limit=many", "limit"),
        ("GET", "/v1/responses/resp_x/input_items?order=sideways", "order"),
        ("DELETE", "/v1/responses/resp_x?force=1", "force"),
        ("POST", "/v1/responses/resp_x/cancel?now=1", "now"),
    ],
)
def test_bad_query_parameters_are_refused_naming_them(
    echo: RunningServer, method: str, path: str, param: str
) -> None:
    with httpx.Client(base_url=echo.http_url, timeout=30) as client:
        response = client.request(method, path)
    assert response.status_code == 400, response.text
    assert response.json()["error"]["param"] == param


# --- a client that goes away stops the work ---


def test_a_client_that_hangs_up_mid_stream_stops_the_engine(server_factory: Any) -> None:
    server = server_factory(ServerConfig(log_level="warning", echo_delay=0.05))
    text = " ".join(f"word{i}" for i in range(200))
    total = len(TOKENIZER.encode(text))
    body = {"model": "echo", "input": text, "stream": True}
    with httpx.Client(base_url=server.http_url, timeout=30) as client:
        with client.stream("POST", "/v1/responses", json=body) as response:
            deltas = 0
            for line in response.iter_lines():
                if line.startswith("data: ") and '"response.output_text.delta"' in line:
                    deltas += 1
                    if deltas == 2:
                        break
        stats = server.engine.stats
        wait_until(lambda: stats.requests_cancelled == 1)
        generated = stats.tokens_generated
        assert 2 <= generated < total // 4, (generated, total)
        time.sleep(0.3)
        assert stats.tokens_generated == generated
        # nothing was stored for the abandoned response
        assert len(server.app.state.responses.store) == 0


# --- failures during generation ---


def test_an_engine_failure_fails_the_response_and_stores_it_failed(echo: RunningServer) -> None:
    echo.engine.fail_after_tokens = 2
    with sdk(echo) as client:
        events = list(client.responses.create(model="echo", input=TEXT, stream=True))
        with pytest.raises(openai.InternalServerError) as info:
            client.responses.create(model="echo", input=TEXT)
        failed = events[-1]
        assert failed.type == "response.failed" and failed.response.status == "failed"
        assert failed.response.error.code == "engine_error"
        assert failed.response.output[0].status == "incomplete"  # what was written so far
        assert info.value.response.headers["x-should-retry"] == "false"
        stored = client.responses.retrieve(failed.response.id)
    assert stored.status == "failed" and stored.error is not None
    assert [e.sequence_number for e in events] == list(range(len(events)))


def test_an_unsatisfied_tool_choice_fails_the_response(scripted: RunningServer) -> None:
    with sdk(scripted) as client:
        events = list(
            client.responses.create(
                model="scripted",
                input="This is the first turn.",
                tools=[WEATHER],  # type: ignore[list-item]
                tool_choice="required",
                stream=True,
            )
        )
    final = events[-1]
    assert final.type == "response.failed"
    assert final.response.error.code == "tool_choice_not_satisfied"
    assert final.response.error.param == "tool_choice"  # type: ignore[union-attr]


class SessionRecorder(EchoEngine):
    """The echo engine, noting each request's cache session and salt."""

    def __init__(self) -> None:
        super().__init__()
        self.scopes: list[tuple[str | None, str | None]] = []

    async def generate(self, request: Any) -> Any:
        self.scopes.append((request.session_id, request.cache_salt))
        async for output in super().generate(request):
            yield output


def test_prompt_cache_key_is_the_requests_cache_scope(
    server_factory: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """Codex sends its thread id as `prompt_cache_key`: each thread's turns share a cache
    session, scoped to the caller's key; the access log shows it."""
    caplog.set_level("INFO", logger="realtime.http")
    engine = SessionRecorder()
    server = server_factory(ServerConfig(api_keys=("alice", "bob")), engine)
    for key, thread in (("alice", "thread-1"), ("alice", "thread-1"), ("bob", "thread-1")):
        with openai.OpenAI(base_url=server.http_url + "/v1", api_key=key) as client:
            client.responses.create(model="echo", input="hi", prompt_cache_key=thread)
    with openai.OpenAI(base_url=server.http_url + "/v1", api_key="alice") as client:
        client.responses.create(model="echo", input="hi")
    first, again, other_key, none = engine.scopes
    assert first == again and first[0] is not None and first[0].startswith("http-")
    assert other_key[0] != first[0] and other_key[1] != first[1]
    assert none[0] is None  # no session; under keys the caller's own salt still applies
    ends = [r.getMessage() for r in caplog.records if r.getMessage() == "request.end"]
    labels = [
        r.fields.get("cache_scope")  # type: ignore[attr-defined]
        for r in caplog.records
        if r.getMessage() == "request.end"
    ]
    assert len(ends) == 4 and labels == ["thread-1", "thread-1", "thread-1", None]
    with httpx.Client(base_url=server.http_url, timeout=10) as client:
        bad = client.post(
            "/v1/responses",
            json={"model": "echo", "input": "x", "prompt_cache_key": "a b"},
            headers={"authorization": "Bearer alice"},
        )
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "prompt_cache_key"
