"""The Messages API on the cpu engine (the tiny random-weight model): Claude-Code-shaped
sessions keep the prefix cache warm across sessions.

Claude Code's first system text (`x-anthropic-billing-header: cc_version=...`)
changes every session. The server leaves it out of the prompt, so a second session
begins with the same tokens as the first, and with the engine's shared scope
(`cache_scope=salt`) its first request reads the shared system prompt from the
cache: at least 90% of it, reported as `cache_read_input_tokens`. Each session is
named by `x-claude-code-session-id`, scoped per API key: a session of another key
reads nothing. With `--keep-billing-header` the changed line ends the shared
prefix at once, which shows what leaving it out buys.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

import anthropic  # noqa: E402

from realtime.config import ServerConfig  # noqa: E402
from realtime.engine.cpu.engine import CpuEngine  # noqa: E402
from tests.conftest import RunningServer, start_server  # noqa: E402

MODEL = "tiny"
KEYS = ("sk-alice", "sk-bob")
#: Stands in for Claude Code's system prompt and tools (the real ones are its own text).
SYSTEM_PROMPT = "\n".join(
    f"Rule {n}: read the files before you change them, keep each change small, and say"
    f" what you did and why in one short line at the end of the turn."
    for n in range(40)
)
TOOLS: list[Any] = [
    {
        "name": name,
        "description": f"The {name} tool: {purpose}.",
        "input_schema": {
            "type": "object",
            "properties": {"argument": {"type": "string", "description": purpose}},
            "required": ["argument"],
        },
    }
    for name, purpose in (
        ("Bash", "run a shell command and return its output"),
        ("Read", "read a file from the working directory"),
        ("Edit", "replace a string in a file"),
    )
]


def claude_code_request(session: str, version: str, question: str) -> dict[str, Any]:
    """A first request of a Claude Code session, in its shape (billing line, cache
    markers, a mid-conversation system message, thinking, context management)."""
    return {
        "model": MODEL,
        "max_tokens": 32000,
        "system": [
            {"type": "text", "text": f"x-anthropic-billing-header: cc_version={version};"},
            {
                "type": "text",
                "text": "You are a coding agent.",
                "cache_control": {"type": "ephemeral"},
            },
            {"type": "text", "text": SYSTEM_PROMPT, "cache_control": {"type": "ephemeral"}},
        ],
        "tools": TOOLS,
        "messages": [
            {"role": "user", "content": [{"type": "text", "text": question}]},
            {"role": "system", "content": [{"type": "text", "text": "Working directory: /src"}]},
        ],
        "thinking": {"type": "adaptive"},
        "output_config": {"effort": "high"},
        "context_management": {"edits": [{"type": "clear_thinking_20251015", "keep": "all"}]},
        "metadata": {"user_id": f'{{"session_id": "{session}"}}'},
    }


def start(model_dir: Path, **config: Any) -> RunningServer:
    engine = CpuEngine(model_dir, model_name=MODEL, cache_scope="salt")
    settings = ServerConfig(log_level="warning", api_keys=KEYS, tool_parser="llama3_json", **config)
    return start_server(settings, engine)  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def model_dir(tiny_model_factory: Any) -> Path:
    # Llama 3's template renders a system message wherever it is sent.
    return tiny_model_factory(template="llama3")  # type: ignore[no-any-return]


@pytest.fixture(scope="module")
def server(model_dir: Path) -> Iterator[RunningServer]:
    running = start(model_dir)
    yield running
    running.stop()


def first_request(server: RunningServer, key: str, session: str, version: str) -> Any:
    body = claude_code_request(session, version, "What does this repository do?")
    body["max_tokens"] = 4  # a random-weight model's answer is noise: keep it short
    with anthropic.Anthropic(base_url=server.http_url, api_key=key, max_retries=0) as client:
        # The beta client, as Claude Code (`?beta=true`): it takes `context_management`.
        with client.beta.messages.stream(
            extra_headers={"x-claude-code-session-id": session}, **body
        ) as stream:
            message = stream.get_final_message()
    return message.usage  # type: ignore[return-value]


def shared_prompt_tokens(server: RunningServer) -> int:
    """The tokens of the system prompt and tools every session shares."""
    body = claude_code_request("count", "0", "")
    body["messages"] = [{"role": "user", "content": "x"}]
    with anthropic.Anthropic(base_url=server.http_url, api_key=KEYS[0], max_retries=0) as client:
        counted = client.messages.count_tokens(
            model=MODEL, system=body["system"], tools=body["tools"], messages=body["messages"]
        )
    return counted.input_tokens


def test_a_second_session_reads_the_shared_prompt_from_the_cache(server: RunningServer) -> None:
    shared = shared_prompt_tokens(server)
    assert shared > 500  # a prompt worth caching
    first = first_request(server, KEYS[0], "session-one", "2.1.332.aaa")
    assert first.cache_read_input_tokens == 0
    second = first_request(server, KEYS[0], "session-two", "2.1.332.bbb")
    assert second.cache_read_input_tokens is not None
    assert second.cache_read_input_tokens >= 0.9 * shared, (second, shared)
    total = second.input_tokens + second.cache_read_input_tokens
    assert total == first.input_tokens  # the same prompt, billing line left out
    # Another key's session reads nothing of it: the scope is per key.
    other = first_request(server, KEYS[1], "session-two", "2.1.332.bbb")
    assert other.cache_read_input_tokens == 0


def test_keeping_the_billing_line_ends_the_shared_prefix(model_dir: Path) -> None:
    running = start(model_dir, keep_billing_header=True)
    try:
        first_request(running, KEYS[0], "session-one", "2.1.332.aaa")
        second = first_request(running, KEYS[0], "session-two", "2.1.332.bbb")
    finally:
        running.stop()
    assert (second.cache_read_input_tokens or 0) < 50


def test_tool_choice_and_output_format_are_enforced_by_the_grammar(server: RunningServer) -> None:
    """A random-weight model obeys them only because every token is masked."""
    ask: Any = [{"role": "user", "content": "Look at the files."}]
    # Closed and short: a random-weight model would otherwise add properties until max_tokens.
    short = {
        "type": "object",
        "properties": {"path": {"type": "string", "maxLength": 8}},
        "additionalProperties": False,
    }
    tools: Any = [
        {
            "name": "Read",
            "description": "Read a file.",
            "input_schema": {**short, "required": ["path"]},
        },
        {"name": "Bash", "description": "Run a command.", "input_schema": short},
    ]
    with anthropic.Anthropic(base_url=server.http_url, api_key=KEYS[0], max_retries=0) as client:
        called = client.messages.create(
            model=MODEL,
            max_tokens=200,
            tools=tools,
            # one call: a random-weight model may otherwise write two
            tool_choice={"type": "tool", "name": "Read", "disable_parallel_tool_use": True},
            messages=ask,
        )
        schema = {
            "type": "object",
            "properties": {"answer": {"type": "string", "maxLength": 20}},
            "required": ["answer"],
            "additionalProperties": False,
        }
        shaped = client.messages.create(
            model=MODEL,
            max_tokens=200,
            output_config={"format": {"type": "json_schema", "schema": schema}},
            messages=ask,
        )
    assert called.stop_reason == "tool_use", called
    [call] = [block for block in called.content if block.type == "tool_use"]
    assert call.name == "Read" and isinstance(call.input.get("path"), str)  # type: ignore[union-attr]
    assert shaped.stop_reason == "end_turn", shaped
    text = "".join(block.text for block in shaped.content if block.type == "text")
    assert set(json.loads(text)) == {"answer"}
