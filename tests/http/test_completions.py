"""POST /v1/completions against a real server, with the real openai SDK and raw SSE."""

from __future__ import annotations

import httpx
import openai
import pytest

from realtime.config import ServerConfig
from realtime.engine.echo import EchoTokenizer
from tests.conftest import wait_until

TEXT = "Once upon a time, there lived a tokenizer"


@pytest.fixture
def sdk(server):
    client = openai.OpenAI(base_url=server.http_url + "/v1", api_key="unused", max_retries=0)
    yield client
    client.close()


def pieces(text: str) -> list[str]:
    tok = EchoTokenizer()
    return [tok.token_text(t) for t in tok.encode(text)]


def test_a_string_prompt_completes_with_openais_shape_and_default_16_tokens(sdk):
    long_text = " ".join(f"w{i}" for i in range(40))
    result = sdk.completions.create(model="echo", prompt=long_text)
    assert result.object == "text_completion" and result.id.startswith("cmpl-")
    (choice,) = result.choices
    assert choice.text == "".join(pieces(long_text)[:16]) and choice.finish_reason == "length"
    assert result.usage.completion_tokens == 16
    assert result.usage.prompt_tokens == len(pieces(long_text))


def test_several_prompts_and_token_id_prompts_are_one_choice_each(sdk):
    ids = EchoTokenizer().encode("from token ids")
    result = sdk.completions.create(model="echo", prompt=["first one", "second"], max_tokens=50)
    assert [c.index for c in result.choices] == [0, 1]
    assert [c.text for c in result.choices] == ["first one", "second"]
    by_ids = sdk.completions.create(model="echo", prompt=ids, max_tokens=50)
    assert by_ids.choices[0].text == "from token ids"
    batch = sdk.completions.create(model="echo", prompt=[ids, ids[:1]], max_tokens=50)
    assert [c.text for c in batch.choices] == ["from token ids", "from"]


def test_streaming_interleaves_choices_and_ends_with_usage(sdk):
    stream = sdk.completions.create(
        model="echo",
        prompt=["a b c d", "x y"],
        max_tokens=50,
        stream=True,
        stream_options={"include_usage": True},
    )
    texts = {0: "", 1: ""}
    finishes = {}
    chunks = list(stream)
    for chunk in chunks[:-1]:
        (choice,) = chunk.choices
        texts[choice.index] += choice.text
        if choice.finish_reason:
            finishes[choice.index] = choice.finish_reason
    assert texts == {0: "a b c d", 1: "x y"} and finishes == {0: "stop", 1: "stop"}
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == 6


def test_echo_stop_and_logprobs(sdk):
    echoed = sdk.completions.create(model="echo", prompt="say it", echo=True, max_tokens=50)
    assert echoed.choices[0].text == "say itsay it"
    stopped = sdk.completions.create(model="echo", prompt=TEXT, stop=["time"], max_tokens=50)
    assert stopped.choices[0].text == "Once upon a " and stopped.choices[0].finish_reason == "stop"
    scored = sdk.completions.create(model="echo", prompt="a b c", logprobs=1, max_tokens=50)
    logprobs = scored.choices[0].logprobs
    assert logprobs.tokens == ["a", " b", " c"] and logprobs.text_offset == [0, 1, 3]
    assert logprobs.token_logprobs == [0.0, 0.0, 0.0]
    assert logprobs.top_logprobs == [{"a": 0.0}, {" b": 0.0}, {" c": 0.0}]


@pytest.mark.parametrize(
    ("body", "status", "param", "code"),
    [
        ({"prompt": "x", "n": 2}, 400, "n", "unsupported"),
        ({"prompt": "x", "best_of": 3}, 400, "best_of", "unsupported"),
        ({"prompt": "x", "suffix": "y"}, 400, "suffix", "unsupported"),
        ({"prompt": "x", "echo": True, "logprobs": 1}, 400, "echo", "unsupported"),
        ({"prompt": ""}, 400, "prompt", None),
        ({"prompt": []}, 400, "prompt", None),
        ({"prompt": "x", "max_tokenz": 2}, 400, "max_tokenz", "unknown_field"),
        ({"prompt": "x", "logprobs": 9}, 400, "logprobs", None),
        ({"prompt": "x", "model": "nope"}, 404, "model", "model_not_found"),
    ],
)
def test_bad_requests_get_openai_errors(server, body, status, param, code):
    response = httpx.post(server.http_url + "/v1/completions", json={"model": "echo", **body})
    assert response.status_code == status
    error = response.json()["error"]
    assert error["param"] == param and error["code"] == code
    assert "Traceback" not in response.text


def test_a_client_that_disconnects_stops_the_engine(server_factory):
    server = server_factory(ServerConfig(echo_delay=0.05, log_level="warning"))
    prompt = " ".join(f"w{i}" for i in range(200))
    body = {"model": "echo", "prompt": prompt, "max_tokens": 500, "stream": True}
    with httpx.stream("POST", server.http_url + "/v1/completions", json=body) as response:
        lines = response.iter_lines()
        while not next(lines).startswith("data: {"):
            pass
    stats = server.engine.stats
    wait_until(lambda: stats.active == 0)
    assert stats.requests_cancelled == 1 and stats.tokens_generated < 50


def test_max_tokens_cap_applies_to_completions_too(server_factory):
    config = ServerConfig(max_tokens_cap=3, max_tokens_policy="error", log_level="warning")
    server = server_factory(config)
    url = server.http_url + "/v1/completions"
    capped = httpx.post(url, json={"model": "echo", "prompt": TEXT}).json()
    assert capped["usage"]["completion_tokens"] == 3
    refused = httpx.post(url, json={"model": "echo", "prompt": TEXT, "max_tokens": 5})
    assert refused.status_code == 400 and refused.json()["error"]["code"] == "max_tokens_exceeded"
    beyond = {"model": "echo", "prompt": "x", "max_tokens": 10_000_000}
    refused = httpx.post(url, json=beyond)
    assert refused.status_code == 400
    error = refused.json()["error"]
    assert (error["param"], error["code"]) == ("max_tokens", "context_length_exceeded")
