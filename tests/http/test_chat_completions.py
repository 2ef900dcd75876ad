"""POST /v1/chat/completions against a real uvicorn server over real TCP.

The echo model answers with the last user message, streamed back one tokenizer
piece per step, so every expected answer, chunk split and token count here is
computed from `EchoTokenizer` rather than hard-coded.
"""

from __future__ import annotations

import asyncio
import json
import re
import time
from collections.abc import Iterator
from http.client import HTTPConnection
from typing import Any

import httpx
import openai
import pytest

from realtime.config import ServerConfig
from realtime.engine.echo import EchoTokenizer
from tests.conftest import wait_until

TOKENIZER = EchoTokenizer()
ERROR_KEYS = {"message", "type", "param", "code"}

TEXT = "Hello there, wonderful world! Ünïcödé 日本語 ok"


def pieces(text: str) -> list[str]:
    """The pieces the echo engine streams back for `text`, one per token."""
    return [TOKENIZER.token_text(t) for t in TOKENIZER.encode(text)]


def user(text: str) -> list[dict[str, Any]]:
    return [{"role": "user", "content": text}]


def long_text(words: int = 200) -> str:
    return " ".join(f"word{i}" for i in range(words))


def slow_config(**overrides: Any) -> ServerConfig:
    return ServerConfig(**{"echo_delay": 0.05, "log_level": "warning", **overrides})


# --- raw SSE helpers -------------------------------------------------------

SSE_BODY = re.compile(rb"(?:data: [^\n]+\n\n|: keep-alive\n\n)*data: \[DONE\]\n\n")


def split_events(body: bytes) -> list[str]:
    """A complete SSE body -> its events (without the blank-line terminator)."""
    assert SSE_BODY.fullmatch(body), f"not a well-formed SSE body: {body[-300:]!r}"
    return [e.decode() for e in body.split(b"\n\n")[:-1]]


def data_events(events: list[str]) -> list[str]:
    return [e[len("data: ") :] for e in events if e.startswith("data: ")]


def iter_events(response: httpx.Response) -> Iterator[str]:
    """Events of a streaming response, as they arrive."""
    lines: list[str] = []
    for line in response.iter_lines():
        if line == "":
            if lines:
                yield "\n".join(lines)
                lines = []
            continue
        lines.append(line)


def chunk_text(chunks: list[dict[str, Any]]) -> str:
    return "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"])


def assert_openai_error(response: httpx.Response, status: int, **expected: Any) -> dict[str, Any]:
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/json")
    assert "Traceback" not in response.text
    body = response.json()
    assert set(body) == {"error"}
    error = body["error"]
    assert set(error) == ERROR_KEYS
    assert isinstance(error["message"], str) and error["message"]
    for key, value in expected.items():
        assert error[key] == value, (key, error)
    return error


# --- fixtures --------------------------------------------------------------


@pytest.fixture
def http(server):
    with httpx.Client(base_url=server.http_url, timeout=30) as client:
        yield client


@pytest.fixture
def sdk(server):
    with openai.OpenAI(base_url=server.http_url + "/v1", api_key="x", max_retries=0) as client:
        yield client


def async_sdk(server) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=server.http_url + "/v1", api_key="x", max_retries=0)


# --- 1. the openai SDK -----------------------------------------------------


@pytest.mark.parametrize("text", [TEXT, "hi", "one two three four five six seven"])
def test_sdk_sync_non_streaming_echoes_the_last_user_message(sdk, text):
    messages = [
        {"role": "system", "content": "You are an echo."},
        {"role": "user", "content": "an earlier question"},
        {"role": "assistant", "content": "an earlier answer"},
        {"role": "user", "content": text},
    ]
    completion = sdk.chat.completions.create(model="echo", messages=messages)

    n = len(TOKENIZER.encode(text))
    assert completion.object == "chat.completion"
    assert completion.id.startswith("chatcmpl-")
    assert completion.model == "echo"
    assert len(completion.choices) == 1
    choice = completion.choices[0]
    assert choice.index == 0
    assert choice.message.role == "assistant"
    assert choice.message.content == text
    assert choice.finish_reason == "stop"
    assert choice.logprobs is None
    assert completion.usage is not None
    assert completion.usage.prompt_tokens == n
    assert completion.usage.completion_tokens == n
    assert completion.usage.total_tokens == 2 * n


def check_stream_with_usage(chunks: list[Any], text: str) -> None:
    """The OpenAI chunk rules for a streamed answer with include_usage."""
    expected_pieces = pieces(text)
    n = len(expected_pieces)
    assert len(chunks) >= 3
    ids = {c.id for c in chunks}
    assert len(ids) == 1
    assert ids.pop().startswith("chatcmpl-")
    assert {c.object for c in chunks} == {"chat.completion.chunk"}
    assert {c.created for c in chunks} == {chunks[0].created}
    assert {c.model for c in chunks} == {"echo"}

    *choice_chunks, usage_chunk = chunks
    # The usage chunk: no choices, usage equal to the echo's token counts.
    assert usage_chunk.choices == []
    assert usage_chunk.usage is not None
    assert usage_chunk.usage.prompt_tokens == n
    assert usage_chunk.usage.completion_tokens == n
    assert usage_chunk.usage.total_tokens == 2 * n
    # Every earlier chunk has one choice and usage None.
    for chunk in choice_chunks:
        assert chunk.usage is None
        assert len(chunk.choices) == 1
    # Role only on the first chunk.
    assert choice_chunks[0].choices[0].delta.role == "assistant"
    assert all(c.choices[0].delta.role is None for c in choice_chunks[1:])
    # finish_reason only on the last choice chunk.
    assert choice_chunks[-1].choices[0].finish_reason == "stop"
    assert all(c.choices[0].finish_reason is None for c in choice_chunks[:-1])
    # One content chunk per echo piece, in order.
    contents = [c.choices[0].delta.content for c in choice_chunks if c.choices[0].delta.content]
    assert contents == expected_pieces
    assert "".join(contents) == text


def test_sdk_sync_streaming_with_usage(sdk):
    stream = sdk.chat.completions.create(
        model="echo",
        messages=user(TEXT),
        stream=True,
        stream_options={"include_usage": True},
    )
    with stream:
        chunks = list(stream)
    check_stream_with_usage(chunks, TEXT)


def test_sdk_sync_streaming_without_usage_has_no_usage_chunk(sdk):
    with sdk.chat.completions.create(model="echo", messages=user(TEXT), stream=True) as stream:
        chunks = list(stream)
    assert all(len(c.choices) == 1 for c in chunks)
    assert all(c.usage is None for c in chunks)
    assert chunks[0].choices[0].delta.role == "assistant"
    assert chunks[-1].choices[0].finish_reason == "stop"
    assert "".join(c.choices[0].delta.content or "" for c in chunks) == TEXT


@pytest.mark.anyio
async def test_sdk_async_non_streaming(server):
    async with async_sdk(server) as client:
        completion = await client.chat.completions.create(model="echo", messages=user(TEXT))
    n = len(TOKENIZER.encode(TEXT))
    assert completion.object == "chat.completion"
    assert completion.id.startswith("chatcmpl-")
    assert completion.choices[0].message.content == TEXT
    assert completion.choices[0].finish_reason == "stop"
    assert completion.usage.prompt_tokens == completion.usage.completion_tokens == n


@pytest.mark.anyio
async def test_sdk_async_streaming_with_usage(server):
    async with async_sdk(server) as client:
        stream = await client.chat.completions.create(
            model="echo",
            messages=user(TEXT),
            stream=True,
            stream_options={"include_usage": True},
        )
        chunks = [chunk async for chunk in stream]
    check_stream_with_usage(chunks, TEXT)


@pytest.mark.anyio
async def test_sdk_async_concurrent_requests_get_their_own_answers(server):
    texts = [f"request number {i} says {'hi ' * i}".strip() for i in range(8)]
    async with async_sdk(server) as client:

        async def one(text: str) -> tuple[str, set[str]]:
            stream = await client.chat.completions.create(
                model="echo", messages=user(text), stream=True
            )
            chunks = [c async for c in stream]
            return "".join(c.choices[0].delta.content or "" for c in chunks), {c.id for c in chunks}

        results = await asyncio.gather(*(one(t) for t in texts))
    assert [r[0] for r in results] == texts
    ids = [r[1] for r in results]
    assert all(len(i) == 1 for i in ids)
    assert len(set().union(*ids)) == len(texts)  # every request has its own id


def test_sdk_max_tokens_gives_length_and_exactly_that_many_tokens(sdk):
    expected = "".join(pieces(TEXT)[:2])
    completion = sdk.chat.completions.create(model="echo", messages=user(TEXT), max_tokens=2)
    assert completion.choices[0].finish_reason == "length"
    assert completion.choices[0].message.content == expected
    assert completion.usage.completion_tokens == 2
    assert completion.usage.prompt_tokens == len(TOKENIZER.encode(TEXT))

    stream = sdk.chat.completions.create(
        model="echo",
        messages=user(TEXT),
        max_tokens=2,
        stream=True,
        stream_options={"include_usage": True},
    )
    with stream:
        chunks = list(stream)
    assert chunks[-1].usage.completion_tokens == 2
    assert chunks[-2].choices[0].finish_reason == "length"
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == expected


def test_sdk_max_completion_tokens_is_honoured(sdk):
    completion = sdk.chat.completions.create(
        model="echo", messages=user(TEXT), max_completion_tokens=3
    )
    assert completion.choices[0].finish_reason == "length"
    assert completion.usage.completion_tokens == 3
    assert completion.choices[0].message.content == "".join(pieces(TEXT)[:3])


@pytest.mark.parametrize(
    ("text", "stop", "expected"),
    [
        ("hello brave new world again", ["world"], "hello brave new "),
        # "abcdefghij" is streamed as "abcdef" + "ghij": the stop string spans both.
        ("abcdefghij klm", ["efgh"], "abcd"),
        ("stop right here", "right", "stop "),
        ("world comes first", ["world"], ""),
        ("no match in this one", ["zzz", "qqq"], "no match in this one"),
        # A held-back partial match is released when the answer ends without a match.
        ("hello wor", ["world"], "hello wor"),
    ],
)
def test_sdk_stop_strings_cut_the_answer(sdk, text, stop, expected):
    completion = sdk.chat.completions.create(model="echo", messages=user(text), stop=stop)
    assert completion.choices[0].message.content == expected
    assert completion.choices[0].finish_reason == "stop"

    with sdk.chat.completions.create(
        model="echo", messages=user(text), stop=stop, stream=True
    ) as stream:
        chunks = list(stream)
    streamed = [c.choices[0].delta.content or "" for c in chunks]
    assert "".join(streamed) == expected
    stops = [stop] if isinstance(stop, str) else stop
    assert not any(s in piece for piece in streamed for s in stops)
    assert chunks[-1].choices[0].finish_reason == "stop"


def test_sdk_include_stop_str_in_output(sdk):
    completion = sdk.chat.completions.create(
        model="echo",
        messages=user("hello brave new world again"),
        stop=["world"],
        extra_body={"include_stop_str_in_output": True},
    )
    assert completion.choices[0].message.content == "hello brave new world"
    assert completion.choices[0].finish_reason == "stop"


def test_sdk_logprobs_tokens_concatenate_to_the_answer(sdk):
    completion = sdk.chat.completions.create(
        model="echo", messages=user(TEXT), logprobs=True, top_logprobs=1
    )
    content = completion.choices[0].logprobs.content
    assert [e.token for e in content] == pieces(TEXT)
    assert "".join(e.token for e in content) == completion.choices[0].message.content == TEXT
    for entry in content:
        assert entry.logprob == 0.0
        assert entry.bytes == list(entry.token.encode("utf-8"))
        assert len(entry.top_logprobs) == 1
        assert entry.top_logprobs[0].token == entry.token

    with sdk.chat.completions.create(
        model="echo", messages=user(TEXT), logprobs=True, top_logprobs=1, stream=True
    ) as stream:
        chunks = list(stream)
    streamed: list[str] = []
    for chunk in chunks:
        choice = chunk.choices[0]
        if choice.delta.content:
            # Each content chunk carries the logprobs of exactly the tokens it contains.
            tokens = [e.token for e in choice.logprobs.content]
            assert "".join(tokens) == choice.delta.content
            streamed.extend(tokens)
    assert "".join(streamed) == TEXT


def test_sdk_without_logprobs_has_none(sdk):
    completion = sdk.chat.completions.create(model="echo", messages=user("a b"))
    assert completion.choices[0].logprobs is None


def test_sdk_content_parts_are_joined_one_per_line(sdk):
    completion = sdk.chat.completions.create(
        model="echo",
        messages=[
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "part a"},
                    {"type": "text", "text": "part b"},
                ],
            }
        ],
    )
    # Not "part apart b": the rule is vLLM's and llama.cpp's (docs/protocol.md).
    assert completion.choices[0].message.content == "part a\npart b"


# --- 2. SSE on the wire ------------------------------------------------------


def test_sse_headers_and_framing(http):
    response = http.post(
        "/v1/chat/completions",
        json={
            "model": "echo",
            "messages": user(TEXT),
            "stream": True,
            "stream_options": {"include_usage": True},
        },
    )
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/event-stream")
    assert response.headers["cache-control"] == "no-cache"
    assert response.headers["x-accel-buffering"] == "no"

    body = response.content
    assert body.startswith(b"data: {")
    assert body.endswith(b"data: [DONE]\n\n")
    events = split_events(body)
    assert all(e.startswith("data: ") for e in events)
    payloads = data_events(events)
    assert payloads[-1] == "[DONE]"
    assert payloads.count("[DONE]") == 1
    chunks = [json.loads(p) for p in payloads[:-1]]
    assert all(c["object"] == "chat.completion.chunk" for c in chunks)
    assert chunk_text(chunks) == TEXT
    assert chunks[-1]["choices"] == []
    assert chunks[-1]["usage"]["completion_tokens"] == len(TOKENIZER.encode(TEXT))
    assert all("usage" in c and c["usage"] is None for c in chunks[:-1])


def test_sse_continuous_usage_stats_counts_up(http):
    response = http.post(
        "/v1/chat/completions",
        json={
            "model": "echo",
            "messages": user(TEXT),
            "stream": True,
            "stream_options": {"include_usage": True, "continuous_usage_stats": True},
        },
    )
    chunks = [json.loads(p) for p in data_events(split_events(response.content))[:-1]]
    n = len(TOKENIZER.encode(TEXT))
    content_chunks = [c for c in chunks if c["choices"] and c["choices"][0]["delta"].get("content")]
    assert [c["usage"]["completion_tokens"] for c in content_chunks] == list(range(1, n + 1))
    assert all(c["usage"]["prompt_tokens"] == n for c in content_chunks)
    assert chunks[-1]["choices"] == []
    assert chunks[-1]["usage"]["completion_tokens"] == n


def test_sse_keepalive_comments_during_a_slow_stream(server_factory):
    server = server_factory(
        ServerConfig(sse_keepalive_seconds=0.05, echo_delay=0.2, log_level="warning")
    )
    text = "slow words here"
    with httpx.Client(base_url=server.http_url, timeout=30) as client:
        response = client.post(
            "/v1/chat/completions",
            json={"model": "echo", "messages": user(text), "stream": True},
        )
    assert response.status_code == 200
    events = split_events(response.content)
    comments = [e for e in events if not e.startswith("data: ")]
    assert comments, "no keep-alive comment during a slow stream"
    assert set(comments) == {": keep-alive"}
    payloads = data_events(events)
    assert payloads[-1] == "[DONE]"
    chunks = [json.loads(p) for p in payloads[:-1]]
    assert chunk_text(chunks) == text
    assert chunks[-1]["choices"][0]["finish_reason"] == "stop"

    # The SDK ignores the comments and still assembles the answer.
    with openai.OpenAI(base_url=server.http_url + "/v1", api_key="x", max_retries=0) as sdk:
        with sdk.chat.completions.create(model="echo", messages=user(text), stream=True) as stream:
            assert "".join(c.choices[0].delta.content or "" for c in stream) == text


def test_no_keepalive_comments_when_chunks_flow(http):
    response = http.post(
        "/v1/chat/completions",
        json={"model": "echo", "messages": user(long_text(50)), "stream": True},
    )
    events = split_events(response.content)
    assert all(e.startswith("data: ") for e in events)


def test_engine_failure_mid_stream_ends_with_error_chunk_error_event_and_done(http, server):
    server.engine.fail_after_tokens = 2
    response = http.post(
        "/v1/chat/completions",
        json={"model": "echo", "messages": user(TEXT), "stream": True},
    )
    # The stream had started, so the status is already 200; the failure is in-band.
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/event-stream")
    payloads = data_events(split_events(response.content))
    assert payloads[-1] == "[DONE]"
    error_event = json.loads(payloads[-2])
    assert set(error_event) == {"error"}
    assert set(error_event["error"]) == ERROR_KEYS
    assert error_event["error"]["type"] == "engine_error"
    assert error_event["error"]["code"] == "engine_error"
    assert "Traceback" not in payloads[-2]

    chunks = [json.loads(p) for p in payloads[:-2]]
    assert chunks[-1]["choices"][0]["finish_reason"] == "error"
    assert all(c["choices"][0]["finish_reason"] is None for c in chunks[:-1])
    assert chunk_text(chunks) == "".join(pieces(TEXT)[:2])
    assert {c["id"] for c in chunks} == {chunks[0]["id"]}
    wait_until(lambda: server.engine.stats.active == 0)


def test_engine_failure_mid_stream_raises_api_error_in_the_sdk(sdk, server):
    server.engine.fail_after_tokens = 2
    received: list[str] = []
    with pytest.raises(openai.APIError) as info:
        with sdk.chat.completions.create(model="echo", messages=user(TEXT), stream=True) as stream:
            for chunk in stream:
                received.append(chunk.choices[0].delta.content or "")
    assert "".join(received) == "".join(pieces(TEXT)[:2])
    assert info.value.body["type"] == "engine_error"
    assert "injected failure" in info.value.message


def test_engine_failure_non_streaming_is_a_500_openai_error(http, server):
    server.engine.fail_after_tokens = 2
    response = http.post("/v1/chat/completions", json={"model": "echo", "messages": user(TEXT)})
    error = assert_openai_error(response, 500, type="engine_error", code="engine_error")
    assert "injected failure" in error["message"]
    wait_until(lambda: server.engine.stats.active == 0)
    # A client-facing engine error leaves the keep-alive connection usable.
    server.engine.fail_after_tokens = None
    response = http.post("/v1/chat/completions", json={"model": "echo", "messages": user(TEXT)})
    assert response.status_code == 200
    assert response.json()["choices"][0]["message"]["content"] == TEXT


def broken_generate(request):
    """An engine `generate` that fails with a non-client-facing exception."""

    async def fail():
        raise RuntimeError("secret internal detail")
        yield  # pragma: no cover - makes this an async generator

    return fail()


def test_unexpected_exception_is_a_detail_free_500(server, monkeypatch):
    monkeypatch.setattr(server.engine, "generate", broken_generate)
    with httpx.Client(base_url=server.http_url, timeout=30) as http:
        response = http.post("/v1/chat/completions", json={"model": "echo", "messages": user("x")})
    error = assert_openai_error(response, 500, type="server_error", code="internal_error")
    assert error["message"] == "internal server error"
    assert "secret" not in response.text
    assert "RuntimeError" not in response.text


def test_unexpected_exception_mid_stream_is_a_detail_free_error_event(server, monkeypatch):
    monkeypatch.setattr(server.engine, "generate", broken_generate)
    with httpx.Client(base_url=server.http_url, timeout=30) as http:
        response = http.post(
            "/v1/chat/completions", json={"model": "echo", "messages": user("x"), "stream": True}
        )
    assert response.status_code == 200
    payloads = data_events(split_events(response.content))
    assert payloads[-1] == "[DONE]"
    error = json.loads(payloads[-2])["error"]
    assert set(error) == ERROR_KEYS
    assert error["code"] == "internal_error"
    assert error["type"] == "server_error"
    assert "secret" not in response.text
    assert "Traceback" not in response.text


def test_keepalive_connection_survives_an_internal_server_error(server, monkeypatch):
    # An HTTP/1.1 response without `Connection: close` promises that the connection
    # stays usable. http.client (unlike httpx's pool) never silently reconnects on a
    # socket it believes is open, so this checks that promise deterministically: if
    # the 500 says `Connection: close`, http.client opens a new connection by itself
    # and the second request succeeds; if it does not, the same socket must answer.
    monkeypatch.setattr(server.engine, "generate", broken_generate)
    body = json.dumps({"model": "echo", "messages": user("x")})
    headers = {"Content-Type": "application/json"}
    conn = HTTPConnection("127.0.0.1", server.port, timeout=10)
    try:
        conn.request("POST", "/v1/chat/completions", body=body, headers=headers)
        failed = conn.getresponse()
        failed_body = json.loads(failed.read())
        assert failed.status == 500
        assert failed_body["error"]["code"] == "internal_error"
        monkeypatch.undo()

        body = json.dumps({"model": "echo", "messages": user("hi")})
        conn.request("POST", "/v1/chat/completions", body=body, headers=headers)
        response = conn.getresponse()
        assert response.status == 200
        assert json.loads(response.read())["choices"][0]["message"]["content"] == "hi"
    finally:
        conn.close()


# --- 3. errors ---------------------------------------------------------------


def post_raw(http: httpx.Client, content: bytes) -> httpx.Response:
    return http.post(
        "/v1/chat/completions", content=content, headers={"content-type": "application/json"}
    )


@pytest.mark.parametrize(
    "content", [b"{not json", b"", b'{"model": "echo", "messages": [', b"\xff\xfe"]
)
def test_invalid_json_body_is_400(http, content):
    assert_openai_error(post_raw(http, content), 400, type="invalid_request_error")


@pytest.mark.parametrize("content", [b"[1, 2]", b'"a string"', b"42", b"null"])
def test_non_object_body_is_400(http, content):
    error = assert_openai_error(post_raw(http, content), 400, type="invalid_request_error")
    assert "object" in error["message"]


GOOD = {"model": "echo", "messages": user("hi")}


@pytest.mark.parametrize(
    ("body", "param", "code"),
    [
        ({"model": "echo"}, "messages", None),
        ({"model": "echo", "messages": []}, "messages", None),
        ({"messages": user("hi")}, "model", None),
        ({**GOOD, "temperature": 5}, "temperature", None),
        ({**GOOD, "top_p": 0}, "top_p", None),
        ({**GOOD, "max_tokens": 0}, "max_tokens", None),
        ({**GOOD, "max_tokenz": 3}, "max_tokenz", "unknown_field"),
        ({**GOOD, "nvext": {"bogus": 1}}, "nvext.bogus", "unknown_field"),
        (
            {**GOOD, "stream": True, "stream_options": {"bogus": 1}},
            "stream_options.bogus",
            "unknown_field",
        ),
        ({**GOOD, "n": 2}, "n", "unsupported"),
        ({**GOOD, "response_format": {"type": "json_object"}}, "response_format", "unsupported"),
        ({**GOOD, "tool_choice": "required"}, "tool_choice", "unsupported"),
    ],
)
def test_bad_parameters_are_400_naming_the_param(http, body, param, code):
    response = http.post("/v1/chat/completions", json=body)
    error = assert_openai_error(response, 400, type="invalid_request_error", param=param, code=code)
    assert param.split(".")[-1] in error["message"]


def test_max_tokens_beyond_the_context_is_400_under_the_error_policy(server_factory):
    server = server_factory(ServerConfig(max_tokens_policy="error", log_level="warning"))
    body = {**GOOD, "max_tokens": server.engine.info.context_length + 1}
    response = httpx.post(server.http_url + "/v1/chat/completions", json=body, timeout=30)
    assert_openai_error(response, 400, param="max_tokens", code="context_length_exceeded")
    assert server.engine.stats.requests_started == 0


def test_max_tokens_beyond_the_context_is_clamped_by_default(http, server):
    body = {**GOOD, "max_tokens": server.engine.info.context_length + 1}
    response = http.post("/v1/chat/completions", json=body)
    assert response.status_code == 200
    assert server.engine.stats.requests_started == 1


def test_top_logprobs_without_logprobs_is_400(http):
    response = http.post("/v1/chat/completions", json={**GOOD, "top_logprobs": 2})
    error = assert_openai_error(response, 400, type="invalid_request_error")
    assert "logprobs" in error["message"]


def test_stream_options_without_stream_is_400(http):
    response = http.post(
        "/v1/chat/completions", json={**GOOD, "stream_options": {"include_usage": True}}
    )
    error = assert_openai_error(response, 400, type="invalid_request_error")
    assert "stream" in error["message"]


def test_bad_streaming_request_is_a_json_400_not_a_stream(http, server):
    response = http.post("/v1/chat/completions", json={**GOOD, "stream": True, "temperature": 5})
    assert_openai_error(response, 400, param="temperature")
    assert server.engine.stats.requests_started == 0


@pytest.mark.parametrize("stream", [False, True])
def test_unknown_model_is_404(http, server, stream):
    response = http.post(
        "/v1/chat/completions",
        json={"model": "gpt-nope", "messages": user("hi"), "stream": stream},
    )
    error = assert_openai_error(
        response, 404, type="invalid_request_error", code="model_not_found", param="model"
    )
    assert "gpt-nope" in error["message"]
    assert server.engine.stats.requests_started == 0


@pytest.mark.parametrize(
    ("method", "path"),
    [("GET", "/v1/nothing"), ("GET", "/no-such-page.html"), ("POST", "/v1/chat")],
)
def test_unknown_routes_are_openai_404(http, method, path):
    response = http.request(method, path)
    assert_openai_error(response, 404, code="not_found")


def test_get_on_chat_completions_is_405(http):
    response = http.get("/v1/chat/completions")
    assert_openai_error(response, 405, code="method_not_allowed")
    assert "POST" in response.headers["allow"]


@pytest.mark.parametrize("stream", [False, True])
def test_engine_unavailable_is_503_before_any_stream(http, server, stream):
    server.engine.unavailable = "maintenance"
    body = {"model": "echo", "messages": user("hi"), "stream": stream}
    response = http.post("/v1/chat/completions", json=body)
    assert_openai_error(response, 503, type="service_unavailable", code="engine_unavailable")
    assert not response.headers["content-type"].startswith("text/event-stream")
    assert server.engine.stats.requests_started == 0

    server.engine.unavailable = None
    response = http.post("/v1/chat/completions", json=body)
    assert response.status_code == 200
    if stream:
        assert (
            chunk_text([json.loads(p) for p in data_events(split_events(response.content))[:-1]])
            == "hi"
        )
    else:
        assert response.json()["choices"][0]["message"]["content"] == "hi"


def test_sdk_unknown_model_raises_not_found(sdk):
    with pytest.raises(openai.NotFoundError) as info:
        sdk.chat.completions.create(model="gpt-nope", messages=user("hi"))
    assert info.value.status_code == 404
    assert info.value.code == "model_not_found"
    assert info.value.param == "model"


def test_sdk_unknown_model_when_streaming_raises_not_found(sdk):
    with pytest.raises(openai.NotFoundError):
        sdk.chat.completions.create(model="gpt-nope", messages=user("hi"), stream=True)


def test_sdk_bad_parameters_raise_bad_request(sdk):
    with pytest.raises(openai.BadRequestError) as info:
        sdk.chat.completions.create(model="echo", messages=user("hi"), temperature=5)
    assert info.value.status_code == 400
    assert info.value.param == "temperature"

    with pytest.raises(openai.BadRequestError) as info:
        sdk.chat.completions.create(model="echo", messages=user("hi"), extra_body={"max_tokenz": 3})
    assert info.value.code == "unknown_field"
    assert info.value.param == "max_tokenz"

    with pytest.raises(openai.BadRequestError) as info:
        sdk.chat.completions.create(model="echo", messages=user("hi"), n=2)
    assert info.value.code == "unsupported"


def test_sdk_engine_unavailable_raises_internal_server_error(sdk, server):
    server.engine.unavailable = "maintenance"
    with pytest.raises(openai.InternalServerError) as info:
        sdk.chat.completions.create(model="echo", messages=user("hi"), stream=True)
    assert info.value.status_code == 503
    assert info.value.code == "engine_unavailable"


# --- 4. disconnects stop the engine -------------------------------------------


def assert_engine_stopped_early(server, total_pieces: int) -> None:
    stats = server.engine.stats
    wait_until(lambda: stats.requests_cancelled == 1)
    wait_until(lambda: stats.active == 0)
    assert stats.requests_started == 1
    assert stats.requests_finished == 0
    assert stats.requests_cancelled == 1
    (generated,) = stats.tokens_by_request.values()
    assert generated == stats.tokens_generated
    assert 1 <= generated < total_pieces // 4, (generated, total_pieces)
    # ... and it stays stopped.
    before = stats.tokens_generated
    time.sleep(0.3)
    assert stats.tokens_generated == before


def test_client_disconnect_mid_stream_stops_the_engine(server_factory):
    server = server_factory(slow_config())
    text = long_text(200)
    total = len(TOKENIZER.encode(text))
    assert total >= 200
    with httpx.Client(base_url=server.http_url, timeout=30) as client:
        with client.stream(
            "POST",
            "/v1/chat/completions",
            json={"model": "echo", "messages": user(text), "stream": True},
        ) as response:
            assert response.status_code == 200
            events = iter_events(response)
            first = json.loads(next(events)[len("data: ") :])
            second = json.loads(next(events)[len("data: ") :])
            assert first["choices"][0]["delta"]["content"] == pieces(text)[0]
            assert second["choices"][0]["delta"]["content"] == pieces(text)[1]
            assert server.engine.stats.active == 1
        # Only the response is closed (which drops its unfinished connection);
        # the client is still open.
        assert_engine_stopped_early(server, total)


def test_sdk_stream_close_stops_the_engine(server_factory):
    server = server_factory(slow_config())
    text = long_text(200)
    with openai.OpenAI(base_url=server.http_url + "/v1", api_key="x", max_retries=0) as sdk:
        stream = sdk.chat.completions.create(model="echo", messages=user(text), stream=True)
        iterator = iter(stream)
        assert next(iterator).choices[0].delta.content == pieces(text)[0]
        assert next(iterator).choices[0].delta.content == pieces(text)[1]
        stream.close()
        assert_engine_stopped_early(server, len(TOKENIZER.encode(text)))


@pytest.mark.anyio
async def test_async_sdk_stream_close_stops_the_engine(server_factory):
    server = server_factory(slow_config())
    text = long_text(200)
    async with async_sdk(server) as client:
        stream = await client.chat.completions.create(
            model="echo", messages=user(text), stream=True
        )
        received = []
        async for chunk in stream:
            received.append(chunk.choices[0].delta.content)
            if len(received) == 2:
                break
        await stream.close()
        assert received == pieces(text)[:2]
        assert_engine_stopped_early(server, len(TOKENIZER.encode(text)))


@pytest.mark.anyio
async def test_stream_running_when_the_shutdown_grace_ends_stops_the_engine(server_factory):
    server = server_factory(slow_config(shutdown_grace_seconds=0.3))
    text = long_text(200)
    payloads: list[str] = []
    stopper = None
    async with (
        httpx.AsyncClient(base_url=server.http_url, timeout=30) as client,
        client.stream(
            "POST",
            "/v1/chat/completions",
            json={"model": "echo", "messages": user(text), "stream": True},
        ) as response,
    ):
        async for line in response.aiter_lines():
            if line.startswith("data: "):
                payloads.append(line[len("data: ") :])
                if stopper is None:
                    stopper = asyncio.get_running_loop().run_in_executor(None, server.stop)
    assert stopper is not None
    await stopper
    assert payloads[-1] == "[DONE]"
    assert json.loads(payloads[-2])["error"]["code"] == "shutting_down"
    assert chunk_text([json.loads(p) for p in payloads[:-2]]) == "".join(
        pieces(text)[: len(payloads) - 2]
    )
    stats = server.engine.stats
    assert stats.requests_cancelled == 1 and stats.active == 0


def test_abandoned_non_streaming_request_stops_the_engine(server_factory):
    server = server_factory(slow_config())
    text = long_text(200)
    timeout = httpx.Timeout(30, read=0.5)
    with httpx.Client(base_url=server.http_url, timeout=timeout) as client:
        with pytest.raises(httpx.ReadTimeout):
            client.post("/v1/chat/completions", json={"model": "echo", "messages": user(text)})
        assert_engine_stopped_early(server, len(TOKENIZER.encode(text)))


@pytest.mark.anyio
async def test_cancelled_non_streaming_task_stops_the_engine(server_factory):
    server = server_factory(slow_config())
    stats = server.engine.stats
    text = long_text(200)
    async with httpx.AsyncClient(base_url=server.http_url, timeout=30) as client:
        task = asyncio.ensure_future(
            client.post("/v1/chat/completions", json={"model": "echo", "messages": user(text)})
        )
        deadline = time.monotonic() + 10
        while stats.tokens_generated < 2:
            assert time.monotonic() < deadline, "generation never started"
            assert not task.done()
            await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert_engine_stopped_early(server, len(TOKENIZER.encode(text)))


@pytest.mark.anyio
async def test_sdk_cancelled_non_streaming_call_stops_the_engine(server_factory):
    server = server_factory(slow_config())
    stats = server.engine.stats
    text = long_text(200)
    async with async_sdk(server) as client:
        task = asyncio.ensure_future(
            client.chat.completions.create(model="echo", messages=user(text))
        )
        deadline = time.monotonic() + 10
        while stats.tokens_generated < 2:
            assert time.monotonic() < deadline, "generation never started"
            await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert_engine_stopped_early(server, len(TOKENIZER.encode(text)))


# --- 5. bad input loses nothing else -----------------------------------------


def test_bad_request_on_another_connection_does_not_disturb_a_running_stream(server_factory):
    server = server_factory(slow_config())
    text = long_text(20)
    with (
        httpx.Client(base_url=server.http_url, timeout=30) as streaming,
        httpx.Client(base_url=server.http_url, timeout=30) as other,
    ):
        with streaming.stream(
            "POST",
            "/v1/chat/completions",
            json={
                "model": "echo",
                "messages": user(text),
                "stream": True,
                "stream_options": {"include_usage": True},
            },
        ) as response:
            events = iter_events(response)
            collected = [next(events)]
            assert server.engine.stats.active == 1

            assert_openai_error(post_raw(other, b"{broken"), 400)
            assert_openai_error(other.post("/v1/chat/completions", json={**GOOD, "n": 2}), 400)
            assert_openai_error(
                other.post("/v1/chat/completions", json={**GOOD, "model": "x"}), 404
            )
            assert_openai_error(other.get("/v1/chat/completions"), 405)
            # The stream was still running while those were answered.
            assert server.engine.stats.active == 1

            collected.extend(events)

    payloads = data_events(collected)
    assert payloads[-1] == "[DONE]"
    chunks = [json.loads(p) for p in payloads[:-1]]
    assert chunk_text(chunks) == text
    assert chunks[-2]["choices"][0]["finish_reason"] == "stop"
    assert chunks[-1]["usage"]["completion_tokens"] == len(TOKENIZER.encode(text))
    assert server.engine.stats.requests_finished == 1
    assert server.engine.stats.requests_cancelled == 0


def test_connection_keeps_serving_after_an_error(http):
    for _ in range(3):
        assert_openai_error(post_raw(http, b"nope"), 400)
        response = http.post("/v1/chat/completions", json=GOOD)
        assert response.status_code == 200
        assert response.json()["choices"][0]["message"]["content"] == "hi"


def test_failed_stream_does_not_disturb_the_next_request(http, server):
    server.engine.fail_after_tokens = 1
    failed = http.post(
        "/v1/chat/completions", json={"model": "echo", "messages": user(TEXT), "stream": True}
    )
    assert '"error"' in failed.text
    server.engine.fail_after_tokens = None
    ok = http.post(
        "/v1/chat/completions", json={"model": "echo", "messages": user(TEXT), "stream": True}
    )
    chunks = [json.loads(p) for p in data_events(split_events(ok.content))[:-1]]
    assert chunk_text(chunks) == TEXT
    assert chunks[-1]["choices"][0]["finish_reason"] == "stop"


# --- 6. nvext -----------------------------------------------------------------

EXTRA = {"nvext": {"extra_fields": ["completion_token_ids"]}}


def test_nvext_completion_token_ids_on_the_final_chunk(http):
    response = http.post(
        "/v1/chat/completions",
        json={"model": "echo", "messages": user(TEXT), "stream": True, **EXTRA},
    )
    chunks = [json.loads(p) for p in data_events(split_events(response.content))[:-1]]
    final = chunks[-1]
    assert final["choices"][0]["finish_reason"] == "stop"
    assert final["nvext"]["completion_token_ids"] == TOKENIZER.encode(TEXT)
    assert all("nvext" not in c for c in chunks[:-1])


def test_nvext_completion_token_ids_with_include_usage(http):
    response = http.post(
        "/v1/chat/completions",
        json={
            "model": "echo",
            "messages": user(TEXT),
            "stream": True,
            "stream_options": {"include_usage": True},
            **EXTRA,
        },
    )
    chunks = [json.loads(p) for p in data_events(split_events(response.content))[:-1]]
    carrying = [c for c in chunks if "nvext" in c]
    assert len(carrying) == 1
    assert carrying[0]["nvext"]["completion_token_ids"] == TOKENIZER.encode(TEXT)
    assert chunks[-1]["usage"]["completion_tokens"] == len(TOKENIZER.encode(TEXT))


def test_nvext_completion_token_ids_non_streaming(http):
    response = http.post(
        "/v1/chat/completions", json={"model": "echo", "messages": user(TEXT), **EXTRA}
    )
    body = response.json()
    assert body["object"] == "chat.completion"
    assert body["choices"][0]["message"]["content"] == TEXT
    assert body["nvext"]["completion_token_ids"] == TOKENIZER.encode(TEXT)


def test_nvext_completion_token_ids_through_the_sdk(sdk):
    completion = sdk.chat.completions.create(model="echo", messages=user(TEXT), extra_body=EXTRA)
    assert completion.choices[0].message.content == TEXT
    assert completion.model_extra["nvext"]["completion_token_ids"] == TOKENIZER.encode(TEXT)

    with sdk.chat.completions.create(
        model="echo", messages=user(TEXT), stream=True, extra_body=EXTRA
    ) as stream:
        chunks = list(stream)
    assert chunks[-1].model_extra["nvext"]["completion_token_ids"] == TOKENIZER.encode(TEXT)

    truncated = sdk.chat.completions.create(
        model="echo", messages=user(TEXT), max_tokens=2, extra_body=EXTRA
    )
    assert truncated.model_extra["nvext"]["completion_token_ids"] == TOKENIZER.encode(TEXT)[:2]


def test_no_nvext_unless_asked(http):
    body = http.post("/v1/chat/completions", json=GOOD).json()
    assert "nvext" not in body


def test_nvext_token_data_skips_templating(sdk):
    prompt = "tokens skip the template — ok"
    ids = TOKENIZER.encode(prompt)
    completion = sdk.chat.completions.create(
        model="echo",
        messages=user("this message is not rendered"),
        extra_body={"nvext": {"token_data": ids}},
    )
    assert completion.choices[0].message.content == prompt
    assert completion.usage.prompt_tokens == len(ids)
    assert completion.usage.completion_tokens == len(ids)

    with sdk.chat.completions.create(
        model="echo",
        messages=user("this message is not rendered"),
        stream=True,
        extra_body={"nvext": {"token_data": ids, "extra_fields": ["completion_token_ids"]}},
    ) as stream:
        chunks = list(stream)
    assert "".join(c.choices[0].delta.content or "" for c in chunks) == prompt
    assert chunks[-1].model_extra["nvext"]["completion_token_ids"] == ids


def test_nvext_token_data_rejects_negative_ids(http):
    response = http.post("/v1/chat/completions", json={**GOOD, "nvext": {"token_data": [1, -5]}})
    error = assert_openai_error(response, 400, type="invalid_request_error")
    assert error["param"].startswith("nvext.token_data")
