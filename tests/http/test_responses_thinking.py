"""`reasoning.effort` on `/v1/responses` switches a thinking model's thinking, on the cpu engine.

The tiny model's ChatML template has Qwen 3's switch: with `enable_thinking` false
its generation prompt ends with an empty `<think>` block, so the rendered prompt is
longer by those tokens. `none` and `minimal` turn thinking off (the longer prompt);
`low`, `medium`, `high` turn it on, which renders as the template's default does;
`reasoning.summary` is accepted and changes nothing. The same holds on the socket
(WebSocket mode), which builds the request the same way.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

import openai
from websockets.sync.client import connect

from realtime.config import ServerConfig
from realtime.dialects.responses.build import thinking_of
from realtime.dialects.responses.request import ReasoningConfig
from realtime.model.model_dir import load_model_dir
from tests.conftest import RunningServer, start_server
from tests.served_engines import IN_PROCESS, cpu_engine

MODEL = "tiny"
#: What the template adds to the prompt when thinking is off.
EMPTY_THINKING = "<think>\n\n</think>\n\n"


@pytest.fixture(scope="module")
def server(tiny_model_dir: Path) -> Iterator[RunningServer]:
    engine = cpu_engine(tiny_model_dir, IN_PROCESS, model_name=MODEL)
    running = start_server(ServerConfig(log_level="warning"), engine)
    yield running
    running.stop()


def prompt_tokens(server: RunningServer, **fields: Any) -> int:
    with openai.OpenAI(base_url=server.http_url + "/v1", api_key="x", max_retries=0) as client:
        response = client.responses.create(
            model=MODEL, input="Think, then answer.", max_output_tokens=1, **fields
        )
    assert response.usage is not None
    return response.usage.input_tokens


def test_effort_none_and_minimal_turn_thinking_off(
    server: RunningServer, tiny_model_dir: Path
) -> None:
    default = prompt_tokens(server)
    extra = len(load_model_dir(tiny_model_dir).tokenizer.encode(EMPTY_THINKING))
    assert extra > 0
    for effort in ("none", "minimal"):
        assert prompt_tokens(server, reasoning={"effort": effort}) == default + extra, effort
    for effort in ("low", "medium", "high"):
        assert prompt_tokens(server, reasoning={"effort": effort}) == default, effort
    summarized = prompt_tokens(server, reasoning={"effort": "none", "summary": "auto"})
    assert summarized == default + extra
    assert prompt_tokens(server, reasoning={"summary": "detailed"}) == default


def test_websocket_mode_reads_the_effort_too(server: RunningServer) -> None:
    counts = []
    with connect(f"ws://127.0.0.1:{server.port}/v1/responses") as ws:
        for reasoning in ({"effort": "high"}, {"effort": "none"}):
            body = {"model": MODEL, "input": "Think, then answer.", "max_output_tokens": 1}
            ws.send(json.dumps({"type": "response.create", **body, "reasoning": reasoning}))
            while True:
                event = json.loads(ws.recv(timeout=60))
                assert event["type"] not in ("error", "response.failed"), event
                if event["type"] in ("response.completed", "response.incomplete"):
                    counts.append(event["response"]["usage"]["input_tokens"])
                    break
    assert counts[1] > counts[0]


@pytest.mark.parametrize(
    ("effort", "thinking"),
    [(None, None), ("none", False), ("minimal", False), ("low", True), ("xhigh", True)],
)
def test_thinking_of(effort: str | None, thinking: bool | None) -> None:
    assert thinking_of(ReasoningConfig(effort=effort)) is thinking
    assert thinking_of(None) is None
