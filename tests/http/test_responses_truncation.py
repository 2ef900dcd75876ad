"""`truncation: "auto"` on a real server with the unmodified openai SDK: a conversation
too long for the context loses its oldest turns, over HTTP and WebSocket mode.

The scripted engine renders the whole conversation (its `prompts` show what the model
was given) and counts a word a token, with a 400-token context here: ten turns of
about 40 words each do not fit, the last few do."""

from __future__ import annotations

import json
from typing import Any

import openai
import pytest
from websockets.sync.client import connect

from realtime.config import ServerConfig
from realtime.engine.scripted import ScriptedEngine
from tests.conftest import RunningServer

CONTEXT = 400


def turn(n: int, who: str) -> str:
    return f"{who} turn {n}: " + " ".join(f"{who[0]}{n}w{i}" for i in range(36))


HISTORY: list[dict[str, Any]] = [
    {"role": "system", "content": "You are terse."},
    *(
        message
        for n in range(10)
        for message in (
            {"role": "user", "content": turn(n, "user")},
            {"role": "assistant", "content": turn(n, "assistant")},
        )
    ),
]
QUESTION = {"role": "user", "content": "the last question"}


@pytest.fixture
def server(server_factory: Any) -> RunningServer:
    engine = ScriptedEngine(
        [{"match": "the last question", "reply": "Answered."}, {"reply": "Noted."}],
        context_length=CONTEXT,
    )
    return server_factory(ServerConfig(log_level="warning"), engine)  # type: ignore[no-any-return]


def sdk(server: RunningServer) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.http_url + "/v1", api_key="x", max_retries=0)


def test_without_truncation_the_long_conversation_is_refused(server: RunningServer) -> None:
    with sdk(server) as client, pytest.raises(openai.BadRequestError) as refused:
        client.responses.create(model="scripted", input=[*HISTORY, QUESTION], max_output_tokens=8)
    assert refused.value.code == "context_length_exceeded"


def test_auto_keeps_the_instructions_and_the_newest_turns_that_fit(server: RunningServer) -> None:
    engine: ScriptedEngine = server.engine
    with sdk(server) as client:
        answer = client.responses.create(
            model="scripted",
            input=[*HISTORY, QUESTION],
            max_output_tokens=8,
            truncation="auto",
        )
        stored = client.responses.input_items.list(answer.id, order="asc", limit=100)
    assert answer.status == "completed" and answer.output_text == "Answered."
    assert answer.truncation == "auto"
    assert answer.usage is not None and answer.usage.input_tokens <= CONTEXT
    prompt = engine.prompts[-1]
    assert prompt.startswith("system: You are terse.\nuser: ")
    assert prompt.endswith("user: the last question\nassistant: ")
    kept = [n for n in range(10) if turn(n, "user") in prompt]
    assert kept and kept == list(range(kept[0], 10)), kept  # the newest turns, whole
    assert 0 not in kept
    for n in kept:
        assert turn(n, "assistant") in prompt
    # the stored input is the whole conversation: truncation is what the model read
    assert len(stored.data) == len(HISTORY) + 1


def test_a_continuation_is_truncated_over_its_stored_history(server: RunningServer) -> None:
    engine: ScriptedEngine = server.engine
    with sdk(server) as client:
        first = client.responses.create(model="scripted", input=[*HISTORY[:7]], max_output_tokens=4)
        second = client.responses.create(
            model="scripted",
            input=[*HISTORY[7:], QUESTION],
            previous_response_id=first.id,
            max_output_tokens=8,
            truncation="auto",
        )
    assert second.output_text == "Answered." and second.previous_response_id == first.id
    prompt = engine.prompts[-1]
    assert prompt.startswith("system: You are terse.\n") and turn(0, "user") not in prompt
    assert turn(9, "user") in prompt and prompt.endswith("user: the last question\nassistant: ")


def test_when_the_last_turn_alone_does_not_fit_it_is_refused(server: RunningServer) -> None:
    huge = {"role": "user", "content": "the last question " + "word " * CONTEXT}
    with sdk(server) as client, pytest.raises(openai.BadRequestError) as refused:
        client.responses.create(
            model="scripted", input=[*HISTORY, huge], max_output_tokens=8, truncation="auto"
        )
    assert refused.value.code == "context_length_exceeded"


def test_websocket_mode_truncates_too(server: RunningServer) -> None:
    engine: ScriptedEngine = server.engine
    url = f"ws://127.0.0.1:{server.port}/v1/responses"
    create = {
        "type": "response.create",
        "model": "scripted",
        "input": [*HISTORY, QUESTION],
        "max_output_tokens": 8,
        "truncation": "auto",
    }
    with connect(url) as ws:
        ws.send(json.dumps(create))
        while True:
            event = json.loads(ws.recv(timeout=30))
            if event["type"] in ("response.completed", "response.failed", "error"):
                break
    assert event["type"] == "response.completed", event
    assert event["response"]["truncation"] == "auto"
    assert engine.prompts[-1].endswith("user: the last question\nassistant: ")
    assert turn(0, "user") not in engine.prompts[-1]
