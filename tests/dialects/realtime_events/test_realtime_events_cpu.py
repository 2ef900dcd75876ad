"""The Realtime event dialect on the CPU engine: a session's second response reuses the
KV prefix of its first (`cached_tokens` in `response.done`'s usage)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest_plugins = ["tests.model_fixtures"]

pytest.importorskip("torch")
pytest.importorskip("transformers")

import openai  # noqa: E402

from realtime.config import ServerConfig  # noqa: E402
from tests.conftest import RunningServer, start_server  # noqa: E402
from tests.dialects.realtime_events.sdk_types import check_server_event  # noqa: E402
from tests.served_engines import CPU_MODES, cpu_engine  # noqa: E402

pytestmark = pytest.mark.anyio
MODEL = "tiny"


@pytest.fixture(scope="module", params=CPU_MODES)
def server(request: pytest.FixtureRequest, tiny_model_dir: Path) -> Iterator[RunningServer]:
    engine = cpu_engine(tiny_model_dir, request.param, model_name=MODEL)
    running = start_server(ServerConfig(log_level="warning"), engine)  # type: ignore[arg-type]
    yield running
    running.stop()


async def response(conn: Any, text: str) -> Any:
    await conn.conversation.item.create(
        item={"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]}
    )
    await conn.response.create(response={"max_output_tokens": 8, "temperature": 0})
    while True:
        event = await conn.recv()
        check_server_event(event.to_dict())
        if event.type == "response.done":
            return event.response


async def test_the_second_response_reports_cached_tokens(server: RunningServer) -> None:
    async with (
        openai.AsyncOpenAI(base_url=server.http_url + "/v1", api_key="x", max_retries=0) as client,
        client.realtime.connect(model=MODEL) as conn,
    ):
        assert (await conn.recv()).type == "session.created"
        await conn.session.update(
            session={"type": "realtime", "instructions": "You are a helpful assistant."}
        )
        assert (await conn.recv()).type == "session.updated"
        first = await response(conn, "Tell me about the sea and the wind in a long sentence.")
        second = await response(conn, "And the mountains?")
    assert first.status in ("completed", "incomplete") and second.status in (
        "completed",
        "incomplete",
    )
    assert first.usage.input_token_details.cached_tokens == 0
    cached = second.usage.input_token_details.cached_tokens
    # the whole first exchange (instructions, question, answer) is the second's prefix
    assert cached >= first.usage.input_tokens, (cached, first.usage)
    assert cached < second.usage.input_tokens
