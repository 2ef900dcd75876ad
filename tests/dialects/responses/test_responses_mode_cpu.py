"""WebSocket mode on the cpu engine (the tiny random-weight model): a continuation sends only
its new items, the server rebuilds the prompt, and the engine's prefix cache makes it
warm; `generate: false` and the warm-next-turn hint warm it further."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

import openai  # noqa: E402

from realtime.config import ServerConfig  # noqa: E402
from tests.conftest import RunningServer, start_server, wait_until  # noqa: E402
from tests.served_engines import CPU_MODES, cpu_engine  # noqa: E402

MODEL = "tiny"
FIRST = "Tell me a long story about the sea, the wind, the boats and the harbour at night. " * 3
TERMINAL = {"response.completed", "response.incomplete", "response.failed", "error"}


@pytest.fixture(scope="module", params=CPU_MODES)
def server(request: pytest.FixtureRequest, tiny_model_dir: Path) -> Iterator[RunningServer]:
    engine = cpu_engine(tiny_model_dir, request.param, model_name=MODEL)
    running = start_server(ServerConfig(log_level="warning"), engine)  # type: ignore[arg-type]
    yield running
    running.stop()


async def turn(connection: Any, **fields: Any) -> Any:
    await connection.send({"type": "response.create", "model": MODEL, **fields})
    async for event in connection:
        if event.type in TERMINAL:
            assert event.type != "error", event
            return event.response
    raise AssertionError("the socket closed")


def sdk(server: RunningServer) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=server.http_url + "/v1", api_key="x", max_retries=0)


def test_a_continuation_with_only_new_items_is_served_from_the_cache(
    server: RunningServer,
) -> None:
    async def go() -> tuple[Any, Any]:
        async with sdk(server) as client, client.responses.connect() as connection:
            first = await turn(connection, input=FIRST, max_output_tokens=8, temperature=0)
            second = await turn(
                connection,
                input="And then?",
                previous_response_id=first.id,
                max_output_tokens=4,
                temperature=0,
                store=False,
            )
        return first, second

    first, second = asyncio.run(go())
    cached = second.usage.input_tokens_details.cached_tokens
    assert second.usage.input_tokens > first.usage.input_tokens
    assert cached >= first.usage.input_tokens - 1, (cached, first.usage.input_tokens)
    assert cached > second.usage.input_tokens / 2, (cached, second.usage.input_tokens)


def test_a_warm_up_prefills_the_input_and_returns_no_output(server: RunningServer) -> None:
    """`generate: false` (the SDK's warm-up): no output, and the turn that continues it
    finds the warmed input in the cache."""

    async def go() -> tuple[Any, Any]:
        async with sdk(server) as client, client.responses.connect() as connection:
            warm = await turn(
                connection, input="Warm this first. " + FIRST, instructions="Be brief.",
                generate=False,
            )  # fmt: skip
            answer = await turn(
                connection,
                input="Now answer.",
                instructions="Be brief.",
                previous_response_id=warm.id,
                max_output_tokens=2,
            )
        return warm, answer

    warm, answer = asyncio.run(go())
    assert warm.status == "completed" and warm.output == []
    assert warm.usage.output_tokens == 0 and warm.usage.input_tokens > 50
    # all of it but the assistant header its prompt ends with (the next prompt has the
    # next user message there instead)
    cached = answer.usage.input_tokens_details.cached_tokens
    assert warm.usage.input_tokens - 8 <= cached < warm.usage.input_tokens, cached
    assert cached > answer.usage.input_tokens / 2


def test_a_response_can_warm_its_next_turn(server: RunningServer) -> None:
    """`nvext.agent_hints.speculative_prefill` on the socket: the warm-up runs in the
    socket's cache session, and the next turn finds the answer cached too."""
    speculative = server.app.state.pipeline.speculative

    async def go() -> tuple[Any, Any, Any]:
        async with sdk(server) as client, client.responses.connect() as connection:
            done = speculative.stats.completed
            first = await turn(
                connection, input=FIRST + " Warm next.", max_output_tokens=8, temperature=0,
                nvext={"agent_hints": {"speculative_prefill": True}},
            )  # fmt: skip
            await asyncio.to_thread(
                wait_until, lambda: speculative.stats.completed > done, timeout=30
            )
            warmed = speculative.stats.recent[-1]
            second = await turn(
                connection, input="Go on.", previous_response_id=first.id, max_output_tokens=2
            )
        return first, warmed, second

    first, warmed, second = asyncio.run(go())
    assert warmed.outcome == "completed" and warmed.session_id is not None
    assert warmed.prompt_tokens > first.usage.input_tokens  # the answer is in it
    assert second.usage.input_tokens_details.cached_tokens == warmed.prompt_tokens
