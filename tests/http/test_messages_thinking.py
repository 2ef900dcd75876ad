"""`thinking: {type: "enabled", budget_tokens: N}` on the cpu engine, through the
`anthropic` SDK: the grammar closes the reasoning block after N tokens.

The tiny model's template is Qwen 3's kind: the model opens `<think>` itself, and a
random-weight model almost never does, nor closes it. So without a budget there is
no thinking block at all; with one, the block is there, at most N tokens long, and
the answer goes on after it. Both the engine in the server's process and in its own.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

import anthropic

from realtime.config import ServerConfig
from realtime.model.model_dir import load_model_dir
from tests.conftest import RunningServer, start_server
from tests.served_engines import CPU_MODES, cpu_engine

MODEL = "tiny"
KEY = "sk-think"
ASK: Any = [{"role": "user", "content": "Think about it, then answer."}]


@pytest.fixture(scope="module", params=CPU_MODES)
def server(tiny_model_dir: Path, request: pytest.FixtureRequest) -> Iterator[RunningServer]:
    engine = cpu_engine(tiny_model_dir, request.param, model_name=MODEL)
    running = start_server(ServerConfig(log_level="warning", api_keys=(KEY,)), engine)
    yield running
    running.stop()


def longest_token(model_dir: Path) -> int:
    """Characters in the longest token's text: N tokens decode to at most N times it."""
    tokenizer = load_model_dir(model_dir).tokenizer
    return max(len(tokenizer.decode([i])) for i in range(tokenizer.backend.get_vocab_size()))


def ask(server: RunningServer, **fields: Any) -> Any:
    with anthropic.Anthropic(base_url=server.http_url, api_key=KEY, max_retries=0) as client:
        return client.messages.create(model=MODEL, max_tokens=40, messages=ASK, **fields)


@pytest.mark.parametrize("budget", [3, 8])
def test_the_budget_closes_the_thinking_block(
    server: RunningServer, tiny_model_dir: Path, budget: int
) -> None:
    message = ask(server, thinking={"type": "enabled", "budget_tokens": budget})
    kinds = [block.type for block in message.content]
    assert kinds[0] == "thinking", message
    thought = message.content[0].thinking
    # At most the budget's tokens (a re-encoding of the text may differ in count).
    assert 0 < len(thought.strip()) <= budget * longest_token(tiny_model_dir), thought
    # The answer went on after the block, up to the request's limit.
    assert message.usage.output_tokens > budget + 2
    assert message.stop_reason in ("max_tokens", "end_turn", "tool_use")


def test_the_stream_shows_the_same_block(server: RunningServer) -> None:
    with anthropic.Anthropic(base_url=server.http_url, api_key=KEY, max_retries=0) as client:
        with client.messages.stream(
            model=MODEL,
            max_tokens=30,
            messages=ASK,
            thinking={"type": "enabled", "budget_tokens": 4},
        ) as stream:
            events = [event.type for event in stream]
            final = stream.get_final_message()
    assert final.content[0].type == "thinking"
    assert "thinking" in [block.type for block in final.content]
    assert events.count("content_block_stop") == len(final.content)


def test_without_a_budget_the_model_is_free(server: RunningServer) -> None:
    """The control: adaptive thinking sets no budget, and this model does not think."""
    message = ask(server, thinking={"type": "adaptive"})
    assert "thinking" not in [block.type for block in message.content]
