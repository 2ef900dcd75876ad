"""Hostile request input through a real `realtime serve` process, on both transports.

Deep JSON, wrong types, too many or too long stop strings: each gets its own 400 or
`error` frame naming the field; the same socket and other connections carry on;
and the server's log has no traceback and no ERROR line. Content parts reach the
model one per line.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from websockets.sync.client import ClientConnection, connect

from tests.conftest import ServerProcess, spawn_server

HTTP_TIMEOUT = 30


def nested(depth: int, opener: str = '{"a":', closer: str = "}") -> str:
    return opener * depth + "1" + closer * depth


def body_with(field_json: str, extra: str = "") -> str:
    """A valid chat body; `field_json` is spliced in as `"key": value` text."""
    base = '"model": "echo", "messages": [{"role": "user", "content": "hi"}]'
    return "{" + base + ", " + field_json + extra + "}"


@pytest.fixture(scope="module")
def server() -> Iterator[ServerProcess]:
    process = spawn_server("--tool-parser", "hermes", "--log-level", "info")
    yield process
    if process.proc.poll() is None:
        process.stop()


@pytest.fixture(scope="module", autouse=True)
def quiet_log(server: ServerProcess) -> Iterator[None]:
    """After every test of the module: nothing in the server log is an error or traceback."""
    yield
    assert server.stop() == 0
    log = server.stderr()
    assert "Traceback" not in log, log[-3000:]
    bad = [line for line in log.splitlines() if line.startswith(("ERROR", "CRITICAL"))]
    assert not bad, bad


def post(server: ServerProcess, path: str, body: str) -> httpx.Response:
    return httpx.post(
        server.http_url + path,
        content=body.encode(),
        headers={"content-type": "application/json"},
        timeout=HTTP_TIMEOUT,
    )


def assert_error(response: httpx.Response, code: str | None, param: str | None) -> str:
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["type"] == "invalid_request_error"
    assert (error["code"], error["param"]) == (code, param), error
    assert "Traceback" not in error["message"]
    message: str = error["message"]
    return message


def answer(ws: ClientConnection, request_id: str) -> tuple[str, dict[str, Any]]:
    """The text and the terminal frame of one request."""
    text = ""
    while True:
        frame = json.loads(ws.recv(timeout=HTTP_TIMEOUT))
        assert frame["request_id"] == request_id, frame
        if frame.get("type") in ("response.done", "error"):
            return text, frame
        text += frame["choices"][0]["delta"].get("content") or ""


def chat_frame(text: str, request_id: str, **extra: Any) -> str:
    frame = {"model": "echo", "messages": [{"role": "user", "content": text}]}
    return json.dumps({**frame, "request_id": request_id, **extra})


class Neighbour(threading.Thread):
    """Another connection sending good requests while the hostile ones run."""

    def __init__(self, url: str):
        super().__init__(daemon=True)
        self.url, self.stop, self.done, self.failures = url, threading.Event(), 0, []

    def run(self) -> None:
        try:
            with connect(self.url) as ws:
                while not self.stop.is_set():
                    rid = f"n{self.done}"
                    ws.send(chat_frame(f"neighbour {self.done}", rid))
                    text, terminal = answer(ws, rid)
                    assert terminal["type"] == "response.done" and text == f"neighbour {self.done}"
                    self.done += 1
        except Exception as exc:
            self.failures.append(repr(exc))


@pytest.fixture
def neighbour(server: ServerProcess) -> Iterator[Neighbour]:
    other = Neighbour(server.ws_url)
    other.start()
    yield other
    other.stop.set()
    other.join(HTTP_TIMEOUT)
    assert not other.failures, other.failures
    assert other.done > 0


# --- deep JSON ---------------------------------------------------------------------

DEEP_FIELDS = [
    # (field JSON at depth N, param named in the error)
    (lambda n: '"messages": [{"role": "user", "content": "hi", "x": ' + nested(n) + "}]",
     "messages.0.x.a"),
    (lambda n: '"tools": [{"type": "function", "function": {"name": "f", "parameters": '
     + nested(n) + "}}]", "tools.0.function.parameters"),
    (lambda n: '"chat_template_kwargs": ' + nested(n), "chat_template_kwargs.a.a.a"),
    (lambda n: '"response_format": {"type": "json_schema", "json_schema": {"name": "n", '
     '"schema": ' + nested(n) + "}}", "response_format.json_schema.schema.a"),
    (lambda n: '"metadata": ' + nested(n), "metadata.a.a.a"),
    (lambda n: '"nvext": {"x": ' + nested(n) + "}", "nvext.x.a.a"),
    (lambda n: '"stop": ' + nested(n, "[", "]"), "stop.0.0.0"),
]  # fmt: skip


def _deep_body(field: Any, depth: int) -> str:
    base = '"model": "echo", "messages": [{"role": "user", "content": "hi"}]'
    text = field(depth)
    if text.startswith('"messages"'):
        return '{"model": "echo", ' + text + "}"
    return "{" + base + ", " + text + "}"


@pytest.mark.parametrize("depth", [65, 500, 1000])
@pytest.mark.parametrize(("field", "param"), DEEP_FIELDS)
def test_http_deep_json_is_a_400_naming_the_field(
    server: ServerProcess, field: Any, param: str, depth: int
) -> None:
    message = assert_error(
        post(server, "/v1/chat/completions", _deep_body(field, depth)), "json_too_deep", param
    )
    assert "deeper than 64 levels" in message and "--max-json-depth" in message


def test_http_json_deeper_than_the_decoder_goes_is_a_400_too(server: ServerProcess) -> None:
    body = _deep_body(DEEP_FIELDS[0][0], 5000)
    assert_error(post(server, "/v1/chat/completions", body), "json_too_deep", None)
    prompt = '{"model": "echo", "prompt": ' + nested(3000, "[", "]") + "}"
    assert_error(post(server, "/v1/completions", prompt), "json_too_deep", None)


def test_http_completions_deep_json_is_a_400(server: ServerProcess) -> None:
    body = '{"model": "echo", "prompt": "x", "nvext": {"x": ' + nested(100) + "}}"
    assert_error(post(server, "/v1/completions", body), "json_too_deep", "nvext.x.a.a")


def test_http_json_at_the_limit_is_served(server: ServerProcess) -> None:
    # The body is level 1, `tools` 2, the tool 3, `function` 4, `parameters` 5.
    body = _deep_body(DEEP_FIELDS[1][0], 64 - 4)
    response = post(server, "/v1/chat/completions", body)
    assert response.status_code == 200, response.text
    assert response.json()["choices"][0]["message"]["content"] == "hi"


def test_socket_deep_json_is_an_error_frame_and_the_socket_carries_on(
    server: ServerProcess, neighbour: Neighbour
) -> None:
    with connect(server.ws_url, max_size=None) as ws:
        for index, (field, param) in enumerate(DEEP_FIELDS):
            for depth in (65, 1000):
                rid = f"deep-{index}-{depth}"
                frame = _deep_body(field, depth)[:-1] + f', "request_id": "{rid}"}}'
                ws.send(frame)
                ws.send(chat_frame(f"after {rid}", f"ok-{rid}"))
                _, terminal = answer(ws, rid)
                assert terminal["type"] == "error", terminal
                error = terminal["error"]
                assert (error["code"], error["param"]) == ("json_too_deep", param)
                text, done = answer(ws, f"ok-{rid}")
                assert done["status"] == "completed" and text == f"after {rid}"
        # Deeper than the decoder goes: no request_id can be read, so the error has none.
        ws.send('{"request_id": "lost", "x": ' + nested(5000, "[", "]") + "}")
        frame = json.loads(ws.recv(timeout=HTTP_TIMEOUT))
        assert frame["type"] == "error" and frame["request_id"] is None
        assert frame["error"]["code"] == "json_too_deep"
        ws.send(chat_frame("still here", "last"))
        text, done = answer(ws, "last")
        assert done["status"] == "completed" and text == "still here"


def test_deep_tool_call_arguments_reach_the_template_as_a_string(server: ServerProcess) -> None:
    arguments = json.dumps(nested(3000, "[", "]"))  # valid JSON text, far too deep to decode
    body = (
        '{"model": "echo", "messages": [{"role": "user", "content": "q"}, {"role": "assistant",'
        ' "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "f",'
        f' "arguments": {arguments}}}}}]}}, {{"role": "user", "content": "next"}}]}}'
    )
    response = post(server, "/v1/chat/completions", body)
    assert response.status_code == 200, response.text
    assert response.json()["choices"][0]["message"]["content"] == "next"


def test_a_deep_tool_call_in_the_model_output_is_no_internal_error(server: ServerProcess) -> None:
    # The echo model writes what it is sent, so its "output" can be any tool call at all.
    for arguments in (nested(3000, "[", "]"), json.dumps(nested(3000, "[", "]"))):
        call = '<tool_call>{"name": "f", "arguments": ' + arguments + "}</tool_call>"
        body = {
            "model": "echo",
            "messages": [{"role": "user", "content": call}],
            "tools": [{"type": "function", "function": {"name": "f"}}],
        }
        response = httpx.post(
            server.http_url + "/v1/chat/completions", json=body, timeout=HTTP_TIMEOUT
        )
        assert response.status_code == 200, response.text


# --- wide JSON ---------------------------------------------------------------------

ZEROS = ",".join(["0"] * 200_000)
WIDE = '"messages": [{"role": "user", "content": "hi", "zeros": [' + ZEROS + "]}]"


def test_http_too_many_json_values_is_a_400_naming_the_field(server: ServerProcess) -> None:
    body = '{"model": "echo", ' + WIDE + "}"
    message = assert_error(post(server, "/v1/chat/completions", body), "too_many_json_values",
                           "messages")  # fmt: skip
    assert "more than 131072 JSON values" in message and "--max-json-values" in message
    prompt = '{"model": "echo", "prompt": [' + ",".join(["1"] * 200_000) + "]}"
    assert_error(post(server, "/v1/completions", prompt), "too_many_json_values", "prompt")


def test_socket_too_many_json_values_is_an_error_frame_and_the_socket_carries_on(
    server: ServerProcess, neighbour: Neighbour
) -> None:
    with connect(server.ws_url, max_size=None) as ws:
        ws.send('{"request_id": "wide", "model": "echo", ' + WIDE + "}")
        _, terminal = answer(ws, "wide")
        assert terminal["type"] == "error"
        assert (terminal["error"]["code"], terminal["error"]["param"]) == (
            "too_many_json_values",
            "messages",
        )
        ws.send(chat_frame("narrow again", "narrow"))
        text, done = answer(ws, "narrow")
        assert done["status"] == "completed" and text == "narrow again"


# --- strict types -------------------------------------------------------------------

WRONG_TYPES = [
    ('"stream": "yes"', "stream", "expected a boolean, but got a string instead"),
    ('"stream": 1', "stream", "expected a boolean, but got an integer instead"),
    ('"n": "2"', "n", "expected an integer, but got a string instead"),
    ('"max_tokens": 1.5', "max_tokens", "expected an integer, but got a decimal number instead"),
    ('"max_tokens": 2.0', "max_tokens", "expected an integer, but got a decimal number instead"),
    ('"temperature": "1"', "temperature", "expected a number, but got a string instead"),
    ('"logprobs": "true"', "logprobs", "expected a boolean, but got a string instead"),
    ('"stop": ["a", 5]', "stop.1", "expected a string, but got an integer instead"),
    ('"stream": true, "stream_options": {"include_usage": 1}', "stream_options.include_usage",
     "expected a boolean, but got an integer instead"),
    ('"nvext": {"ignore_eos": "false"}', "nvext.ignore_eos",
     "expected a boolean, but got a string instead"),
]  # fmt: skip


@pytest.mark.parametrize(("field", "param", "wording"), WRONG_TYPES)
def test_http_wrong_types_are_refused_by_name(
    server: ServerProcess, field: str, param: str, wording: str
) -> None:
    message = assert_error(
        post(server, "/v1/chat/completions", body_with(field)), "invalid_type", param
    )
    assert message == f"Invalid type for '{param}': {wording}."


def test_http_completions_types_are_strict(server: ServerProcess) -> None:
    for field, param in (('"max_tokens": 1.5', "max_tokens"), ('"echo": "yes"', "echo")):
        body = '{"model": "echo", "prompt": "x", ' + field + "}"
        assert_error(post(server, "/v1/completions", body), "invalid_type", param)


def test_an_integer_is_a_valid_number(server: ServerProcess) -> None:
    response = post(server, "/v1/chat/completions", body_with('"temperature": 1, "top_p": 1'))
    assert response.status_code == 200, response.text


def test_socket_wrong_types_are_error_frames_and_the_socket_carries_on(
    server: ServerProcess, neighbour: Neighbour
) -> None:
    with connect(server.ws_url) as ws:
        for index, (field, param, wording) in enumerate(WRONG_TYPES):
            rid = f"type-{index}"
            frame = body_with(field)[:-1] + f', "request_id": "{rid}"}}'
            ws.send(frame)
            _, terminal = answer(ws, rid)
            assert terminal["type"] == "error"
            assert terminal["error"]["code"] == "invalid_type"
            assert terminal["error"]["param"] == param
            assert terminal["error"]["message"] == f"Invalid type for '{param}': {wording}."
        ws.send(chat_frame("fine after all that", "good"))
        text, done = answer(ws, "good")
        assert done["status"] == "completed" and text == "fine after all that"


# --- stop strings ------------------------------------------------------------------


def test_http_too_many_or_too_long_stop_strings_are_refused(server: ServerProcess) -> None:
    many = json.dumps([f"s{i}" for i in range(10_000)])
    message = assert_error(
        post(server, "/v1/chat/completions", body_with(f'"stop": {many}')), None, "stop"
    )
    assert "at most 64 stop strings" in message and "got 10000" in message
    long = json.dumps(["x" * 257])
    message = assert_error(
        post(server, "/v1/chat/completions", body_with(f'"stop": {long}')), None, "stop"
    )
    assert "at most 256 characters" in message
    body = '{"model": "echo", "prompt": "x", "stop": ' + many + "}"
    assert_error(post(server, "/v1/completions", body), None, "stop")


def test_socket_stop_limits_and_a_full_stop_list_that_matches(
    server: ServerProcess, neighbour: Neighbour
) -> None:
    stops = [f"never{i:03d}" + "z" * 240 for i in range(63)] + ["three"]
    with connect(server.ws_url) as ws:
        ws.send(chat_frame("one two", "many", stop=[f"s{i}" for i in range(10_000)]))
        _, terminal = answer(ws, "many")
        assert terminal["type"] == "error" and terminal["error"]["param"] == "stop"
        ws.send(chat_frame("one two three four", "allowed", stop=stops))
        text, done = answer(ws, "allowed")
        assert (text, done["finish_reason"]) == ("one two ", "stop")


# --- content parts -----------------------------------------------------------------


def test_content_parts_are_joined_one_per_line_on_both_transports(server: ServerProcess) -> None:
    content = [{"type": "text", "text": "part a"}, {"type": "text", "text": "part b"}]
    body = {"model": "echo", "messages": [{"role": "user", "content": content}]}
    response = httpx.post(server.http_url + "/v1/chat/completions", json=body, timeout=HTTP_TIMEOUT)
    assert response.json()["choices"][0]["message"]["content"] == "part a\npart b"
    with connect(server.ws_url) as ws:
        ws.send(json.dumps({**body, "request_id": "parts"}))
        text, _ = answer(ws, "parts")
        assert text == "part a\npart b"
