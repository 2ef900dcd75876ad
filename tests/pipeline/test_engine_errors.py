"""Engine errors reach clients as the same OpenAI errors as before engines had their own.

Engines raise `realtime.engine.errors`; `pipeline/engine_errors.py` alone decides
the status, code and param. Checked on the mapping itself, through the pipeline
(chat and completions), and on a real server over HTTP and the socket.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator
from typing import Any

import httpx
import pytest
from websockets.asyncio.client import connect

from realtime.dialects.chat.completion_run import CompletionRun
from realtime.dialects.chat.completions import parse_completion_request
from realtime.dialects.chat.request import parse_chat_request
from realtime.dialects.chat.run import ChatRun
from realtime.engine.base import EngineOutput, EngineRequest
from realtime.engine.echo import EchoEngine
from realtime.engine.errors import (
    EngineFailure,
    EngineRequestError,
    EngineUnavailable,
    GenerationError,
    RequestPart,
)
from realtime.pipeline import ChatPipeline, CompletionPipeline
from realtime.pipeline.engine_errors import client_error
from realtime.protocol.close_codes import CloseCode
from realtime.protocol.errors import (
    EngineError,
    EngineUnavailableError,
    InvalidRequestError,
    RealtimeError,
)
from tests.ws.wsclient import chat, collect_until_terminal

CASES: list[tuple[GenerationError, type[RealtimeError], int, str | None, str | None]] = [
    (
        EngineRequestError("the prompt is empty", part=RequestPart.PROMPT),
        InvalidRequestError,
        400,
        None,
        "messages",
    ),
    (
        EngineRequestError("the prompt is 9 tokens", part=RequestPart.PROMPT, exceeds_context=True),
        InvalidRequestError,
        400,
        "context_length_exceeded",
        "messages",
    ),
    (
        EngineRequestError("prompt token ids must be in 0..9", part=RequestPart.PROMPT_TOKEN_IDS),
        InvalidRequestError,
        400,
        None,
        "nvext.token_data",
    ),
    (
        EngineRequestError("min_p must be in [0, 1]", part=RequestPart.SAMPLING),
        InvalidRequestError,
        400,
        None,
        None,
    ),
    (
        EngineRequestError("the engine cannot run this request: too big"),
        InvalidRequestError,
        400,
        None,
        None,
    ),
    (
        EngineUnavailable("engine unavailable: gone"),
        EngineUnavailableError,
        503,
        "engine_unavailable",
        None,
    ),
    (EngineFailure("echo engine: injected failure"), EngineError, 500, "engine_error", None),
]


@pytest.mark.parametrize(("raised", "kind", "status", "code", "param"), CASES)
def test_each_engine_error_has_one_client_form(
    raised: GenerationError,
    kind: type[RealtimeError],
    status: int,
    code: str | None,
    param: str | None,
) -> None:
    error = client_error(raised)
    assert type(error) is kind
    assert (error.status, error.code, error.param, error.message) == (
        status,
        code,
        param,
        raised.message,
    )


def test_only_an_unavailable_engine_ends_a_socket() -> None:
    closes = {type(raised).__name__: client_error(raised).close_code for raised, *_ in CASES}
    assert closes == {
        "EngineRequestError": None,
        "EngineUnavailable": CloseCode.INTERNAL_ERROR,
        "EngineFailure": None,
    }


class RaisingEngine(EchoEngine):
    """An echo engine whose requests raise `error` after `after` outputs."""

    def __init__(self, error: GenerationError, after: int = 0):
        super().__init__()
        self.error = error
        self.after = after

    async def generate(self, request: EngineRequest) -> AsyncGenerator[EngineOutput, None]:
        produced = 0
        async for output in super().generate(request):
            if produced == self.after:
                raise self.error
            produced += 1
            yield output


def _pipelines(engine: EchoEngine) -> tuple[ChatPipeline, CompletionPipeline]:
    asyncio.run(engine.start())
    chat_pipeline = ChatPipeline(engine)
    return chat_pipeline, CompletionPipeline(chat_pipeline)


async def _drain(chunks: AsyncGenerator[dict[str, Any], None]) -> list[dict[str, Any]]:
    seen = []
    async for chunk in chunks:
        seen.append(chunk)
    return seen


@pytest.mark.parametrize(("raised", "kind", "status", "code", "param"), CASES)
def test_both_pipelines_raise_the_client_form(
    raised: GenerationError,
    kind: type[RealtimeError],
    status: int,
    code: str | None,
    param: str | None,
) -> None:
    chat_pipeline, completions = _pipelines(RaisingEngine(raised))
    body = {"model": "echo", "messages": [{"role": "user", "content": "a b c"}]}
    prepared = ChatRun.prepare(chat_pipeline, parse_chat_request(body))
    with pytest.raises(kind) as from_chat:
        asyncio.run(_drain(prepared.stream()))
    run = CompletionRun.prepare(
        completions, parse_completion_request({"model": "echo", "prompt": "a b c"})
    )
    with pytest.raises(kind) as from_completions:
        asyncio.run(_drain(run.stream()))
    assert (from_chat.value.code, from_chat.value.param) == (code, param)
    # Each API's error names the field its client sent: text completions' prompt is `prompt`.
    text_param = "prompt" if param == "messages" else param
    assert (from_completions.value.code, from_completions.value.param) == (code, text_param)
    for error in (from_chat.value, from_completions.value):
        assert error.message == raised.message


def test_a_failure_mid_answer_still_ends_the_chat_stream_with_an_error_finish() -> None:
    chat_pipeline, _ = _pipelines(RaisingEngine(EngineFailure("broke"), after=2))
    body = {"model": "echo", "messages": [{"role": "user", "content": "a b c d"}], "stream": True}
    prepared = ChatRun.prepare(chat_pipeline, parse_chat_request(body))
    seen: list[dict[str, Any]] = []

    async def run() -> None:
        async for chunk in prepared.stream():
            seen.append(chunk)

    with pytest.raises(EngineError, match="broke"):
        asyncio.run(run())
    assert [c["choices"][0]["finish_reason"] for c in seen if c["choices"]][-1] == "error"


def test_an_engine_refusal_on_http_is_the_same_400(server_factory: Any) -> None:
    refusal = EngineRequestError(
        "prompt token ids must be in 0..9", part=RequestPart.PROMPT_TOKEN_IDS
    )
    server = server_factory(engine=RaisingEngine(refusal))
    body = {"model": "echo", "messages": [{"role": "user", "content": "hi"}]}
    response = httpx.post(server.http_url + "/v1/chat/completions", json=body, timeout=10)
    assert response.status_code == 400
    assert response.json() == {
        "error": {
            "message": "prompt token ids must be in 0..9",
            "type": "invalid_request_error",
            "param": "nvext.token_data",
            "code": None,
        }
    }


@pytest.mark.anyio
async def test_an_engine_refusal_on_the_socket_is_an_error_frame_and_the_socket_stays(
    server_factory: Any,
) -> None:
    refusal = EngineRequestError(
        "the prompt is 9 tokens", part=RequestPart.PROMPT, exceeds_context=True
    )
    server = server_factory(engine=RaisingEngine(refusal))
    async with connect(server.ws_url) as ws:
        await ws.send(chat("hi", request_id="a"))
        first = await collect_until_terminal(ws)
        await ws.send(chat("again", request_id="b"))
        second = await collect_until_terminal(ws)
    for frames in (first, second):
        error = frames[-1]["error"]
        assert error["code"] == "context_length_exceeded" and error["param"] == "messages"
        assert error["message"] == "the prompt is 9 tokens"
