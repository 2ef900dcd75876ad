"""Speculative next-turn prefill behind the real server, on both transports: the hint
in a request makes the server warm the next turn, and that turn's usage shows it."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest_plugins = ["tests.model_fixtures"]

torch = pytest.importorskip("torch")

import openai  # noqa: E402
from websockets.asyncio.client import connect  # noqa: E402

from realtime.config import ServerConfig  # noqa: E402
from realtime.pipeline import ChatPipeline  # noqa: E402
from tests.conftest import RunningServer, start_server, wait_until  # noqa: E402
from tests.served_engines import CPU_MODES, cpu_engine  # noqa: E402

MODEL = "tiny"
HINT = {"agent_hints": {"speculative_prefill": True}}
DOC = "Tool output: disk 71% used, 12 services up, 0 alerts, last backup 03:00. " * 5


@pytest.fixture(scope="module", params=CPU_MODES)
def server(request: pytest.FixtureRequest, tiny_model_dir: Path) -> Iterator[RunningServer]:
    engine = cpu_engine(tiny_model_dir, request.param, model_name=MODEL)
    running = start_server(ServerConfig(log_level="warning"), engine)  # type: ignore[arg-type]
    yield running
    running.stop()


def pipeline_of(server: RunningServer) -> ChatPipeline:
    pipeline: ChatPipeline = server.app.state.pipeline
    return pipeline


def engine_of(server: RunningServer) -> Any:
    """The served cpu engine: `CpuEngine`, or the `EngineProxy` of one in its own process."""
    return server.engine


def warmed(server: RunningServer, count: int) -> Any:
    """The newest warm-up record, once `count` warm-ups have completed."""
    stats = pipeline_of(server).speculative.stats
    wait_until(lambda: stats.completed >= count, timeout=30)
    return stats.recent[-1]


def test_http_answers_warm_their_next_turn(server: RunningServer) -> None:
    done = pipeline_of(server).speculative.stats.completed
    messages: list[Any] = [{"role": "user", "content": "HTTP check. " + DOC}]
    with openai.OpenAI(base_url=server.http_url + "/v1", api_key="x", max_retries=0) as sdk:
        first = sdk.chat.completions.create(
            model=MODEL,
            messages=messages,
            temperature=0,
            max_tokens=8,
            extra_body={"ignore_eos": True, "nvext": HINT},
        )
        record = warmed(server, done + 1)
        messages += [
            {"role": "assistant", "content": first.choices[0].message.content},
            {"role": "user", "content": "And the alerts?"},
        ]
        second = sdk.chat.completions.create(
            model=MODEL, messages=messages, temperature=0, max_tokens=2
        )
    assert second.usage is not None and second.usage.prompt_tokens_details is not None
    assert second.usage.prompt_tokens_details.cached_tokens == record.prompt_tokens
    assert engine_of(server).stats.request(second.id).prefill_reused == record.prompt_tokens


@pytest.mark.anyio
async def test_socket_answers_warm_their_next_turn(server: RunningServer) -> None:
    done = pipeline_of(server).speculative.stats.completed
    messages: list[Any] = [{"role": "user", "content": "Socket check. " + DOC}]

    async def ask(ws: Any, request_id: str, **extra: Any) -> tuple[str, dict[str, Any]]:
        frame = {"type": "response.create", "request_id": request_id, "model": MODEL}
        await ws.send(json.dumps({**frame, "messages": messages, "temperature": 0, **extra}))
        text = ""
        while True:
            got = json.loads(await ws.recv())
            if got.get("object") == "chat.completion.chunk" and got["choices"]:
                text += got["choices"][0]["delta"].get("content") or ""
            if got.get("type") == "response.done":
                return text, got

    async with connect(server.ws_url) as ws:
        text, _ = await ask(ws, "t1", max_tokens=8, ignore_eos=True, nvext=HINT)
        record = await asyncio.to_thread(warmed, server, done + 1)
        messages += [
            {"role": "assistant", "content": text},
            {"role": "user", "content": "Anything else?"},
        ]
        _, done_frame = await ask(ws, "t2", max_tokens=2)
    usage = done_frame["usage"]
    assert usage["prompt_tokens_details"]["cached_tokens"] == record.prompt_tokens
