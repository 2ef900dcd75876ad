"""/tokenize and /detokenize against a real server: the tokens generation sees, in vLLM's shapes."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from realtime.config import ServerConfig  # noqa: E402
from realtime.engine.cpu.engine import CpuEngine  # noqa: E402
from tests.conftest import RunningServer, start_server  # noqa: E402

MODEL = "tiny"
WEATHER = {
    "type": "function",
    "function": {
        "name": "weather",
        "description": "The weather in a city.",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
    },
}
#: A system prompt, a user message of two text parts, an assistant answer with its
#: reasoning and a function call, the call's output, and the next question.
MESSAGES: list[dict[str, Any]] = [
    {"role": "system", "content": "You are terse."},
    {
        "role": "user",
        "content": [{"type": "text", "text": "Weather?"}, {"type": "text", "text": "In Oslo."}],
    },
    {
        "role": "assistant",
        "content": "Let me look.",
        "reasoning_content": "They want the weather.",
        "tool_calls": [
            {
                "id": "call_1",
                "type": "function",
                "function": {"name": "weather", "arguments": '{"city": "Oslo"}'},
            }
        ],
    },
    {"role": "tool", "tool_call_id": "call_1", "content": "Sunny"},
    {"role": "user", "content": "And tomorrow?"},
]


@pytest.fixture(scope="module")
def server(tiny_model_dir: Path) -> Iterator[RunningServer]:
    engine = CpuEngine(tiny_model_dir, model_name=MODEL)
    running = start_server(ServerConfig(log_level="warning"), engine)  # type: ignore[arg-type]
    yield running
    running.stop()


def post(server: RunningServer, path: str, body: dict[str, Any]) -> httpx.Response:
    return httpx.post(server.http_url + path, json=body, timeout=60)


def test_a_conversation_counts_what_a_chat_request_reports(server: RunningServer) -> None:
    tokenized = post(
        server, "/tokenize", {"model": MODEL, "messages": MESSAGES, "tools": [WEATHER]}
    )
    assert tokenized.status_code == 200, tokenized.text
    body = tokenized.json()
    assert body["count"] == len(body["tokens"]) > 20
    assert body["max_model_len"] == server.engine.info.context_length
    assert body["token_strs"] is None
    chat = post(
        server,
        "/v1/chat/completions",
        {"model": MODEL, "messages": MESSAGES, "tools": [WEATHER], "max_tokens": 1},
    )
    assert chat.status_code == 200, chat.text
    assert chat.json()["usage"]["prompt_tokens"] == body["count"]


def test_without_the_generation_prompt_the_prompt_is_shorter(server: RunningServer) -> None:
    with_prompt = post(server, "/tokenize", {"messages": MESSAGES})
    without = post(server, "/tokenize", {"messages": MESSAGES, "add_generation_prompt": False})
    assert with_prompt.status_code == without.status_code == 200
    tokens, fewer = with_prompt.json()["tokens"], without.json()["tokens"]
    assert len(fewer) < len(tokens) and tokens[: len(fewer)] == fewer


def test_a_prompt_counts_what_a_text_completion_reports_and_detokenizes_back(
    server: RunningServer,
) -> None:
    prompt = "The harbour at night, the boats and the wind."
    body = post(server, "/tokenize", {"prompt": prompt, "return_token_strs": True}).json()
    assert len(body["token_strs"]) == body["count"]
    completion = post(
        server, "/v1/completions", {"model": MODEL, "prompt": prompt, "max_tokens": 1}
    )
    assert completion.json()["usage"]["prompt_tokens"] == body["count"]
    back = post(server, "/detokenize", {"model": MODEL, "tokens": body["tokens"]})
    assert back.status_code == 200 and back.json() == {"prompt": prompt}


@pytest.mark.parametrize(
    ("path", "body", "status", "param"),
    [
        ("/tokenize", {}, 400, "prompt"),
        ("/tokenize", {"prompt": "a", "messages": MESSAGES}, 400, "prompt"),
        ("/tokenize", {"prompt": "a", "add_special_tokens": True}, 400, "add_special_tokens"),
        (
            "/tokenize",
            {"messages": MESSAGES, "continue_final_message": True},
            400,
            "continue_final_message",
        ),
        ("/tokenize", {"prompt": "a", "bogus": 1}, 400, "bogus"),
        ("/tokenize", {"prompt": 5}, 400, "prompt"),
        ("/tokenize", {"messages": []}, 400, "messages"),
        ("/tokenize", {"model": "gpt-4o", "prompt": "a"}, 404, "model"),
        ("/detokenize", {"tokens": [10**9]}, 400, "tokens"),
        ("/detokenize", {"tokens": [-1]}, 400, "tokens"),
        ("/detokenize", {"tokens": "abc"}, 400, "tokens"),
        ("/detokenize", {"model": "gpt-4o", "tokens": [1]}, 404, "model"),
    ],
)
def test_bad_input_is_a_specific_error_and_the_server_carries_on(
    server: RunningServer, path: str, body: dict[str, Any], status: int, param: str
) -> None:
    refused = post(server, path, body)
    assert refused.status_code == status, refused.text
    assert refused.json()["error"]["param"] == param
    assert post(server, "/tokenize", {"prompt": "still here"}).status_code == 200
