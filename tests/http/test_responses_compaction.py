"""Compaction over HTTP: `POST /v1/responses/compact` and `context_management` on a real
server with the unmodified openai SDK, on the scripted engine.

Why the scripted engine: the check is about what compaction does with a context -
what is summarized, what is kept, what the next prompt holds and how many tokens it
has - and the scripted engine shows each of those exactly (its `prompts` are what
the model was given; its summary is the script's, a fixed short text, as a real
model's summary is short). The echo engine would echo the whole transcript back as
the "summary", and the tiny random-weight model writes max_tokens of noise: neither
makes the size comparison mean anything."""

from __future__ import annotations

from typing import Any

import httpx
import openai
import pytest

from realtime.config import ServerConfig
from realtime.dialects.responses.compaction import COMPACT_INSTRUCTIONS, COMPACT_REQUEST_END
from realtime.engine.scripted import ScriptedEngine
from tests.conftest import RunningServer
from tests.dialects.responses.sdk_types import check_item

SUMMARY = "The user and the assistant discussed twenty topics; topic 19 is still open."


def turn_text(n: int, who: str) -> str:
    return f"{who} turn {n}: " + " ".join(f"{who[0]}{n}w{i}" for i in range(100))


#: 20 turns of about 100 words each way: about 4,000 tokens on the scripted engine.
CONTEXT: list[dict[str, Any]] = [
    {"role": "system", "content": "You are terse."},
    *(
        message
        for n in range(20)
        for message in (
            {"role": "user", "content": turn_text(n, "user")},
            {"role": "assistant", "content": turn_text(n, "assistant")},
        )
    ),
]
SCRIPT = [
    {"match": COMPACT_REQUEST_END.strip(), "reply": SUMMARY},
    {"match": "next question", "reply": "Answered."},
]


@pytest.fixture
def scripted(server_factory: Any) -> RunningServer:
    engine = ScriptedEngine(SCRIPT)
    return server_factory(ServerConfig(log_level="warning"), engine)  # type: ignore[no-any-return]


def sdk(server: RunningServer) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.http_url + "/v1", api_key="x", max_retries=0)


def test_compact_then_continue_with_under_30_percent_of_the_input(scripted: RunningServer) -> None:
    engine: ScriptedEngine = scripted.engine  # type: ignore[assignment]
    question = {"role": "user", "content": "next question"}
    with sdk(scripted) as client:
        original = client.responses.create(model="scripted", input=[*CONTEXT, question])
        compacted = client.responses.compact(model="scripted", input=CONTEXT)
        summarizing = engine.prompts[-1]
        kept = [item.model_dump(exclude_none=True) for item in compacted.output]
        continued = client.responses.create(model="scripted", input=[*kept, question])
    assert original.usage is not None and original.usage.input_tokens > 4000
    # the output: the system message verbatim, then one compaction item
    assert compacted.object == "response.compaction"
    assert [item.type for item in compacted.output] == ["message", "compaction"]
    system, item = kept
    assert system["role"] == "system" and system["content"][0]["text"] == "You are terse."
    check_item(item)
    assert item["id"].startswith("cmp_") and item["encrypted_content"].startswith("rtc1.")
    assert compacted.usage.input_tokens > 4000 and compacted.usage.output_tokens > 0
    # the summarizing prompt: the instructions, every turn but the last, the request
    assert summarizing.startswith("system: " + COMPACT_INSTRUCTIONS)
    assert turn_text(0, "user") in summarizing and turn_text(18, "assistant") in summarizing
    assert turn_text(19, "user") not in summarizing  # the last turn is kept verbatim
    assert summarizing.endswith(COMPACT_REQUEST_END + "\nassistant: ")
    # the continuation: system, the summary, the last turn, the new question
    prompt = engine.prompts[-1]
    assert prompt.startswith("system: You are terse.\nuser: A summary of the conversation so far:")
    assert SUMMARY in prompt and turn_text(19, "assistant") in prompt
    assert turn_text(0, "user") not in prompt and turn_text(18, "assistant") not in prompt
    assert prompt.endswith("user: next question\nassistant: ")
    assert continued.output_text == "Answered."
    assert continued.usage is not None
    assert continued.usage.input_tokens < 0.3 * original.usage.input_tokens, (
        continued.usage.input_tokens,
        original.usage.input_tokens,
    )


def test_context_management_compacts_past_its_threshold(scripted: RunningServer) -> None:
    engine: ScriptedEngine = scripted.engine  # type: ignore[assignment]
    question = {"role": "user", "content": "next question"}
    with sdk(scripted) as client:
        small = client.responses.create(
            model="scripted",
            input=[question],
            context_management=[{"type": "compaction", "compact_threshold": 1000}],
        )
        stream = client.responses.create(
            model="scripted",
            input=[*CONTEXT, question],
            context_management=[{"type": "compaction", "compact_threshold": 1000}],
            stream=True,
        )
        events = list(stream)
        first = events[-1].response
        prompt = engine.prompts[-1]
        again = client.responses.create(
            model="scripted", input="next question", previous_response_id=first.id
        )
    assert [item.type for item in small.output] == ["message"]  # under the threshold
    assert [item.type for item in first.output] == ["compaction", "message"]
    assert first.output_text == "Answered."
    kinds = [e.type for e in events]
    assert kinds[2:4] == ["response.output_item.added", "response.output_item.done"]
    assert events[2].item.type == "compaction" and events[4].output_index == 1
    assert SUMMARY in prompt and turn_text(0, "user") not in prompt
    # the last turn is the new question, kept verbatim; turn 19 is in the summary now
    assert turn_text(19, "user") not in prompt
    assert prompt.endswith("\nuser: next question\nassistant: ")
    # the continuation renders the chain from the compaction item on
    follow = engine.prompts[-1]
    assert turn_text(0, "user") not in follow and SUMMARY in follow
    assert follow.endswith("assistant: Answered.\nuser: next question\nassistant: ")
    assert again.usage is not None and first.usage is not None
    assert again.usage.input_tokens < 0.3 * 4000


@pytest.mark.parametrize(
    ("path", "body", "param", "code"),
    [
        ("compact", {"input": "x"}, "model", "missing_required_parameter"),
        ("compact", {"model": "scripted", "input": "x", "tools": []}, "tools", "unknown_field"),
        ("compact", {"model": "nope", "input": "x"}, "model", "model_not_found"),
        ("compact", {"model": "scripted", "input": [{"role": "system", "content": "s"}]},
         "input", None),
        ("compact", {"model": "scripted", "input": "x", "previous_response_id": "resp_0"},
         "previous_response_id", "previous_response_not_found"),
        ("compact", {"model": "scripted", "input": [{"type": "compaction"}]},
         "input.0.encrypted_content", "missing_required_parameter"),
        ("compact", {"model": "scripted",
                     "input": [{"type": "compaction", "encrypted_content": "gAAAAB-openai"}]},
         "input.0.encrypted_content", "invalid_value"),
        ("create", {"input": [{"type": "compaction", "encrypted_content": "rtc1.!!"}]},
         "input.0.encrypted_content", "invalid_value"),
        ("create", {"input": "x", "context_management": [{"type": "compaction"}] * 2},
         "context_management", None),
        ("create", {"input": "x", "context_management": [{"type": "truncate"}]},
         "context_management.0.type", "invalid_value"),
        ("create", {"input": "x", "context_management": [{"type": "compaction",
                                                         "compact_threshold": 0}]},
         "context_management.0.compact_threshold", "invalid_value"),
        ("create", {"input": "x", "context_management": [{"type": "compaction",
                                                         "compact_threshold": "9"}]},
         "context_management.0.compact_threshold", "invalid_type"),
        ("create", {"input": "x", "context_management": [{"type": "compaction", "n": 1}]},
         "context_management.0.n", "unknown_field"),
    ],
)  # fmt: skip
def test_bad_compaction_input_is_a_400_naming_the_field(
    scripted: RunningServer, path: str, body: dict[str, Any], param: str, code: str | None
) -> None:
    url = scripted.http_url + ("/v1/responses/compact" if path == "compact" else "/v1/responses")
    if path == "create":
        body = {"model": "scripted", **body}
    answer = httpx.post(url, json=body, timeout=30)
    error = answer.json()["error"]
    assert answer.status_code == (404 if code == "model_not_found" else 400), answer.text
    assert error["param"] == param, error
    if code is not None:
        assert error["code"] == code, error
