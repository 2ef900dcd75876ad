"""Property-based fuzzing of the HTTP API against a real server.

Hypothesis sends deep, wide and oddly typed JSON bodies (`hostile_json`) to
`/v1/chat/completions` and `/v1/completions`, streamed and not, on one keep-alive
connection. Properties:

* no answer is a 5xx: every refusal is a 4xx with an OpenAI error body;
* no body or SSE event carries an `internal_error` or traceback text;
* the keep-alive connection keeps working, and so does a well-behaved client on
  another connection;
* the server logs no ERROR line and no traceback.

Bodies include agents' output limits far beyond the context (clamped, or refused
under the error policy), Responses' `reasoning` of any shape, and agent session
headers of any bytes on every generation route.

Derandomized and bounded (a few hundred bodies) so the test takes seconds.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Iterator
from typing import Any
from urllib.parse import quote

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from realtime.config import ServerConfig
from tests.conftest import RunningServer, start_server
from tests.fuzz.hostile_json import (
    every_deep_chat,
    hostile_chat_bodies,
    hostile_compaction_bodies,
    hostile_completion_bodies,
    hostile_conversation_bodies,
    hostile_messages_bodies,
    hostile_responses_bodies,
    json_values,
)

EXAMPLES = 300
TRACEBACK_MARKERS = ("Traceback", 'File "', "site-packages", "realtime/")
ERROR_KEYS = {"message", "type", "param", "code"}


@pytest.fixture(scope="module")
def fuzz_server() -> Iterator[RunningServer]:
    server = start_server(ServerConfig(log_level="warning", tool_parser="hermes"))
    yield server
    server.stop()


class ErrorLog(logging.Handler):
    """Every record at ERROR or above, from any logger (the server runs in this process)."""

    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@pytest.fixture
def error_log() -> Iterator[ErrorLog]:
    handler = ErrorLog()
    loggers = [logging.getLogger(), *(logging.getLogger(n) for n in ("uvicorn", "uvicorn.error"))]
    for logger in loggers:
        logger.addHandler(handler)
    yield handler
    for logger in loggers:
        logger.removeHandler(handler)


class Neighbour(threading.Thread):
    """Short chat requests on another connection, each answer checked."""

    def __init__(self, base_url: str):
        super().__init__(daemon=True)
        self.base_url, self.stop, self.done, self.failures = base_url, threading.Event(), 0, []

    def run(self) -> None:
        try:
            with httpx.Client(base_url=self.base_url, timeout=30) as client:
                while not self.stop.is_set():
                    text = f"neighbour {self.done}"
                    body = {"model": "echo", "messages": [{"role": "user", "content": text}]}
                    response = client.post("/v1/chat/completions", json=body)
                    assert response.status_code == 200, response.text
                    assert response.json()["choices"][0]["message"]["content"] == text
                    self.done += 1
        except Exception as exc:  # reported by the test
            self.failures.append(repr(exc))


def _check_clean(text: str) -> None:
    assert "internal_error" not in text, text[:300]
    for marker in TRACEBACK_MARKERS:
        assert marker not in text, f"server internals reached the client: {text[:300]!r}"


def _check_answer(response: httpx.Response, stats: dict[str, int]) -> None:
    assert response.status_code < 500, (response.status_code, response.text[:300])
    stats[str(response.status_code)] = stats.get(str(response.status_code), 0) + 1
    if response.status_code >= 400:
        error = response.json()["error"]
        assert set(error) == ERROR_KEYS, error
        _check_clean(error["message"])
        return
    if response.headers["content-type"].startswith("text/event-stream"):
        for line in response.text.splitlines():
            if line.startswith("data: {"):
                event = json.loads(line[len("data: ") :])
                assert "error" not in event, event
                assert event.get("type") not in ("error", "response.failed"), event
    else:
        assert response.json()["object"] in (
            "chat.completion",
            "text_completion",
            "response",
            "response.compaction",
        )


def test_fuzzed_bodies_never_get_a_5xx(fuzz_server: RunningServer, error_log: ErrorLog) -> None:
    neighbour = Neighbour(fuzz_server.http_url)
    neighbour.start()
    stats: dict[str, int] = {}
    client = httpx.Client(base_url=fuzz_server.http_url, timeout=30)
    bodies = st.one_of(
        st.tuples(st.just("/v1/chat/completions"), hostile_chat_bodies),
        st.tuples(st.just("/v1/completions"), hostile_completion_bodies),
    )

    @settings(
        max_examples=EXAMPLES,
        derandomize=True,
        database=None,
        deadline=None,
        print_blob=True,
        suppress_health_check=list(HealthCheck),
    )
    @given(bodies)
    def one_body(path_and_body: tuple[str, str]) -> None:
        path, body = path_and_body
        response = client.post(path, content=body, headers={"content-type": "application/json"})
        _check_answer(response, stats)

    try:
        for body in every_deep_chat():
            headers = {"content-type": "application/json"}
            _check_answer(client.post("/v1/chat/completions", content=body, headers=headers), stats)
        for path in ("/v1/chat/completions", "/v1/completions"):  # the success paths, always
            one_body.hypothesis.inner_test((path, json.dumps(_GENERATION_BODIES[path])))
        one_body()
        # The keep-alive connection that carried every hostile body still serves.
        ok = client.post(
            "/v1/chat/completions",
            json={"model": "echo", "messages": [{"role": "user", "content": "after"}]},
        )
        assert ok.json()["choices"][0]["message"]["content"] == "after"
    finally:
        client.close()
        neighbour.stop.set()
        neighbour.join(30)
    assert not neighbour.failures, neighbour.failures
    assert neighbour.done > 0
    assert stats.get("400", 0) > EXAMPLES // 2 and stats.get("200", 0) >= 2, stats
    assert not error_log.records, [r.getMessage() for r in error_log.records]


_COMPACT_FIELDS = {"model", "input", "instructions", "previous_response_id", "service_tier"}


def _compact_fields(body: str) -> str:
    """A Responses body cut to the fields `responses.compact` takes, so the fuzz reaches
    its input items (a body too deep to decode here is sent as it is)."""
    try:
        data = json.loads(body)
    except (ValueError, RecursionError):
        return body
    if not isinstance(data, dict):
        return body
    return json.dumps({k: v for k, v in data.items() if k in _COMPACT_FIELDS})


def test_fuzzed_responses_bodies_never_get_a_5xx(
    fuzz_server: RunningServer, error_log: ErrorLog
) -> None:
    """/v1/responses and /v1/responses/compact: odd items, tools and fields, and deep JSON
    in every free-form place."""
    neighbour = Neighbour(fuzz_server.http_url)
    neighbour.start()
    stats: dict[str, int] = {}
    client = httpx.Client(base_url=fuzz_server.http_url, timeout=30)
    headers = {"content-type": "application/json"}

    @settings(
        max_examples=EXAMPLES,
        derandomize=True,
        database=None,
        deadline=None,
        print_blob=True,
        suppress_health_check=list(HealthCheck),
    )
    @given(
        st.sampled_from(["/v1/responses", "/v1/responses/compact"]),
        hostile_responses_bodies | hostile_compaction_bodies,
    )
    def one_body(path: str, body: str) -> None:
        if path.endswith("/compact"):
            body = _compact_fields(body)
        _check_answer(client.post(path, content=body, headers=headers), stats)

    try:
        valid = _GENERATION_BODIES["/v1/responses"]
        for body in (valid, {**valid, "stream": True}):  # the success paths, always
            one_body.hypothesis.inner_test("/v1/responses", json.dumps(body))
        one_body()
        ok = client.post("/v1/responses", json={"model": "echo", "input": "after"})
        assert ok.json()["output"][0]["content"][0]["text"] == "after"
    finally:
        client.close()
        neighbour.stop.set()
        neighbour.join(30)
    assert not neighbour.failures, neighbour.failures
    assert neighbour.done > 0
    assert stats.get("400", 0) > EXAMPLES // 2 and stats.get("200", 0) >= 2, stats
    assert not error_log.records, [r.getMessage() for r in error_log.records]


def _check_messages_answer(response: httpx.Response, stats: dict[str, int]) -> None:
    """Anthropic's shapes: its error body, named SSE events, no error event."""
    assert response.status_code < 500, (response.status_code, response.text[:300])
    stats[str(response.status_code)] = stats.get(str(response.status_code), 0) + 1
    body_text = response.text
    _check_clean(body_text)
    if response.status_code >= 400:
        body = response.json()
        assert set(body) == {"type", "error"} and body["type"] == "error", body
        assert set(body["error"]) == {"type", "message"}, body
        return
    if response.headers["content-type"].startswith("text/event-stream"):
        frames = [frame for frame in body_text.split("\n\n") if frame.strip()]
        for frame in frames:
            name, data = frame.split("\n")
            event = json.loads(data.removeprefix("data: "))
            assert name == "event: " + event["type"] and event["type"] != "error", event
        assert frames[-1].startswith("event: message_stop")
    else:
        assert response.json()["type"] == "message"


def test_fuzzed_messages_bodies_never_get_a_5xx(
    fuzz_server: RunningServer, error_log: ErrorLog
) -> None:
    """/v1/messages and count_tokens: odd turns, blocks, tools and fields, deep JSON in every
    free-form place; every refusal a specific 4xx in Anthropic's body."""
    neighbour = Neighbour(fuzz_server.http_url)
    neighbour.start()
    stats: dict[str, int] = {}
    client = httpx.Client(base_url=fuzz_server.http_url, timeout=30)
    headers = {"content-type": "application/json"}
    paths = st.sampled_from(["/v1/messages", "/v1/messages?beta=true", "/v1/messages/count_tokens"])

    @settings(
        max_examples=EXAMPLES,
        derandomize=True,
        database=None,
        deadline=None,
        print_blob=True,
        suppress_health_check=list(HealthCheck),
    )
    @given(paths, hostile_messages_bodies)
    def one_body(path: str, body: str) -> None:
        response = client.post(path, content=body, headers=headers)
        if path.endswith("count_tokens") and response.status_code == 200:
            assert set(response.json()) == {"input_tokens"}
            stats["200"] = stats.get("200", 0) + 1
            return
        _check_messages_answer(response, stats)

    try:
        # The success paths, whatever the examples: a plain answer, a streamed one, a count.
        # (How many of the fuzzed bodies happen to be valid changes with the examples,
        # which change with any edit to this test.)
        valid = {"model": "echo", "max_tokens": 8, "messages": [{"role": "user", "content": "x"}]}
        for path, body in (
            ("/v1/messages", valid),
            ("/v1/messages?beta=true", {**valid, "stream": True}),
            ("/v1/messages/count_tokens", {"model": "echo", "messages": valid["messages"]}),
        ):
            one_body.hypothesis.inner_test(path, json.dumps(body))
        one_body()
        ok = client.post(
            "/v1/messages",
            json={
                "model": "echo",
                "max_tokens": 8,
                "messages": [{"role": "user", "content": "after"}],
            },
        )
        assert ok.json()["content"][0]["text"] == "after"
    finally:
        client.close()
        neighbour.stop.set()
        neighbour.join(30)
    assert not neighbour.failures, neighbour.failures
    assert neighbour.done > 0
    assert stats.get("400", 0) > EXAMPLES // 2 and stats.get("200", 0) >= 3, stats
    assert not error_log.records, [r.getMessage() for r in error_log.records]


#: Query parameters the stored-response routes know, and some they do not.
_QUERY_NAMES = ("after", "limit", "order", "include", "include[]", "stream", "starting_after", "x")
_QUERY_VALUES = st.one_of(
    st.sampled_from(["asc", "desc", "0", "1", "100", "101", "-1", "1e9", "true", "false"]),
    st.sampled_from(["message.output_text.logprobs", "reasoning.encrypted_content"]),
    st.text(max_size=40),
)


def test_fuzzed_stored_response_routes_never_get_a_5xx(
    fuzz_server: RunningServer, error_log: ErrorLog
) -> None:
    """GET, DELETE and cancel of stored responses and their input items: odd ids (real,
    unknown, huge, percent-encoded), odd query strings, every method; a background
    response's resume (`stream`, `starting_after`) and cancel among them."""
    client = httpx.Client(base_url=fuzz_server.http_url, timeout=30)
    real = [
        client.post("/v1/responses", json={"model": "echo", "input": f"kept {i}"}).json()["id"]
        for i in range(3)
    ]
    background = {"model": "echo", "input": "in the background", "background": True}
    real.append(client.post("/v1/responses", json=background).json()["id"])
    stats: dict[str, int] = {}
    ids = st.one_of(
        st.sampled_from(real),
        st.text(alphabet=st.characters(codec="utf-8"), min_size=1, max_size=300),
        st.just("resp_" + "0" * 5000),
    )
    routes = st.sampled_from(
        [("GET", ""), ("GET", "/input_items"), ("DELETE", ""), ("POST", "/cancel")]
    )
    resumes = st.lists(
        st.sampled_from([("stream", "true")])
        | st.tuples(st.just("starting_after"), st.sampled_from(["0", "3", "-1", "99", "x", ""])),
        min_size=1,
        max_size=2,
    )
    queries = (
        st.lists(st.tuples(st.sampled_from(_QUERY_NAMES), _QUERY_VALUES), max_size=4) | resumes
    )

    @settings(
        max_examples=EXAMPLES,
        derandomize=True,
        database=None,
        deadline=None,
        print_blob=True,
        suppress_health_check=list(HealthCheck),
    )
    @given(ids, routes, queries)
    def one_call(response_id: str, route: tuple[str, str], query: list[tuple[str, str]]) -> None:
        method, suffix = route
        url = "/v1/responses/" + quote(response_id, safe="") + suffix
        answer = client.request(method, url, params=query)
        assert answer.status_code < 500, (answer.status_code, answer.text[:300])
        stats[str(answer.status_code)] = stats.get(str(answer.status_code), 0) + 1
        if answer.headers["content-type"].startswith("text/event-stream"):  # a resume
            stats["resumed"] = stats.get("resumed", 0) + 1
            events = [
                json.loads(line.removeprefix("data: "))
                for line in answer.text.splitlines()
                if line.startswith("data: ")
            ]
            assert events and events[-1]["type"] == "response.completed", events[-1:]
            return
        body = answer.json()
        if answer.status_code >= 400:
            assert set(body["error"]) == ERROR_KEYS, body
            _check_clean(body["error"]["message"])
        else:
            assert body["object"] in ("response", "list"), body

    try:
        # A resume, whatever the examples (they may delete or cancel the background
        # response before any of them streams it): a fresh one, from its first event.
        fresh = client.post("/v1/responses", json=background).json()["id"]
        resume = [("stream", "true"), ("starting_after", "0")]
        one_call.hypothesis.inner_test(fresh, ("GET", ""), resume)
        one_call()
    finally:
        client.close()
    assert stats.get("404", 0) > 10 and stats.get("400", 0) > 10 and "200" in stats, stats
    assert stats.get("resumed", 0) > 0, stats  # a background response was streamed again
    assert not error_log.records, [r.getMessage() for r in error_log.records]


def _check_conversation_answer(answer: httpx.Response, stats: dict[str, int]) -> None:
    assert answer.status_code < 500, (answer.status_code, answer.text[:300])
    stats[str(answer.status_code)] = stats.get(str(answer.status_code), 0) + 1
    body = answer.json()
    if answer.status_code >= 400:
        assert set(body["error"]) == ERROR_KEYS, body
        _check_clean(body["error"]["message"])
    elif "object" not in body:  # one item (`GET .../items/{item_id}`)
        assert body["id"] and body["type"] == "message", body
    else:
        assert body["object"] in ("conversation", "conversation.deleted", "list", "response")


def test_fuzzed_conversation_bodies_never_get_a_5xx(
    fuzz_server: RunningServer, error_log: ErrorLog
) -> None:
    """POST /v1/conversations, its update and its items' create: odd fields, odd items,
    too many, odd metadata, deep JSON; and responses whose `conversation` is odd."""
    client = httpx.Client(base_url=fuzz_server.http_url, timeout=30)
    real = client.post("/v1/conversations", json={}).json()["id"]
    headers = {"content-type": "application/json"}
    stats: dict[str, int] = {}
    paths = st.sampled_from(
        ["/v1/conversations", f"/v1/conversations/{real}", f"/v1/conversations/{real}/items"]
    )
    conversations = st.sampled_from([real, {"id": real}, "conv_x", "", {"id": ""}]) | json_values

    @settings(
        max_examples=EXAMPLES,
        derandomize=True,
        database=None,
        deadline=None,
        print_blob=True,
        suppress_health_check=list(HealthCheck),
    )
    @given(paths, hostile_conversation_bodies, conversations, st.booleans())
    def one_body(path: str, body: str, conversation: Any, respond: bool) -> None:
        if respond:  # a response in a conversation, odd or real
            data = {"model": "echo", "input": "x", "max_output_tokens": 2}
            answer = client.post("/v1/responses", json={**data, "conversation": conversation})
        else:
            answer = client.post(path, content=body, headers=headers)
        _check_conversation_answer(answer, stats)

    try:
        # the success paths, always: a conversation created, and a response in the real one
        one_body.hypothesis.inner_test("/v1/conversations", "{}", real, False)
        one_body.hypothesis.inner_test("/v1/conversations", "{}", real, True)
        one_body()
        listed = client.get(f"/v1/conversations/{real}/items", params={"limit": 100})
        assert listed.status_code == 200, listed.text
    finally:
        client.close()
    assert stats.get("400", 0) > EXAMPLES // 3 and stats.get("200", 0) >= 2, stats
    assert not error_log.records, [r.getMessage() for r in error_log.records]


def test_fuzzed_conversation_routes_never_get_a_5xx(
    fuzz_server: RunningServer, error_log: ErrorLog
) -> None:
    """Every conversation route with odd ids (real, unknown, huge, percent-encoded) and odd
    query strings."""
    client = httpx.Client(base_url=fuzz_server.http_url, timeout=30)
    real = [
        client.post(
            "/v1/conversations", json={"items": [{"role": "user", "content": f"kept {i}"}]}
        ).json()["id"]
        for i in range(3)
    ]
    item_ids = [client.get(f"/v1/conversations/{c}/items").json()["data"][0]["id"] for c in real]
    stats: dict[str, int] = {}
    odd = st.text(alphabet=st.characters(codec="utf-8"), min_size=1, max_size=300)
    ids = st.one_of(st.sampled_from(real), odd, st.just("conv_" + "0" * 5000))
    items = st.one_of(st.sampled_from(item_ids), odd)
    routes = st.sampled_from(
        [("GET", ""), ("DELETE", ""), ("GET", "/items"), ("GET", "/items/"),
         ("DELETE", "/items/")]
    )  # fmt: skip
    queries = st.lists(st.tuples(st.sampled_from(_QUERY_NAMES), _QUERY_VALUES), max_size=4)

    @settings(
        max_examples=EXAMPLES,
        derandomize=True,
        database=None,
        deadline=None,
        print_blob=True,
        suppress_health_check=list(HealthCheck),
    )
    @given(ids, items, routes, queries)
    def one_call(
        conversation_id: str, item_id: str, route: tuple[str, str], query: list[tuple[str, str]]
    ) -> None:
        method, suffix = route
        url = "/v1/conversations/" + quote(conversation_id, safe="") + suffix
        if suffix.endswith("/"):
            url += quote(item_id, safe="")
        _check_conversation_answer(client.request(method, url, params=query), stats)

    try:
        one_call.hypothesis.inner_test(real[0], item_ids[0], ("GET", "/items/"), [])  # a 200
        one_call()
    finally:
        client.close()
    assert stats.get("404", 0) > 10 and stats.get("400", 0) > 10 and "200" in stats, stats
    assert not error_log.records, [r.getMessage() for r in error_log.records]


#: Agent session headers (`x-session-id`...) and what they may carry: empty, long,
#: spaces, control characters, bytes that are not ASCII.
SESSION_HEADER_NAMES = (
    "x-session-id", "session-id", "x-session-affinity", "x-claude-code-session-id",
    "x-dynamo-session-id", "X-Session-Id",
)  # fmt: skip
#: Bytes an HTTP client may send in a header value: visible ASCII, obs-text, inner blanks.
_HEADER_BYTES = [*range(0x21, 0x7F), *range(0x80, 0x100), 0x20, 0x09]
session_values = st.one_of(
    st.lists(st.sampled_from(_HEADER_BYTES), max_size=40).map(lambda b: bytes(b).strip()),
    st.sampled_from([b"", b"a" * 256, b"a" * 257, b"a" * 20_000, b"two words", b"\xff\xfe"]),
)
_GENERATION_BODIES = {
    "/v1/chat/completions": {"model": "echo", "messages": [{"role": "user", "content": "s"}]},
    "/v1/completions": {"model": "echo", "prompt": "s", "max_tokens": 4},
    "/v1/responses": {"model": "echo", "input": "s", "max_output_tokens": 4},
    "/v1/messages": {
        "model": "echo",
        "max_tokens": 4,
        "messages": [{"role": "user", "content": "s"}],
    },
}


def test_fuzzed_session_headers_never_get_a_5xx(
    fuzz_server: RunningServer, error_log: ErrorLog
) -> None:
    """Every generation route with one or more agent session headers of any bytes: a 200,
    a 400 naming the header, or the header limits' 431; never a 5xx."""
    client = httpx.Client(base_url=fuzz_server.http_url, timeout=30)
    stats: dict[str, int] = {}
    headers = st.lists(
        st.tuples(st.sampled_from(SESSION_HEADER_NAMES), session_values), min_size=1, max_size=3
    )

    @settings(
        max_examples=EXAMPLES,
        derandomize=True,
        database=None,
        deadline=None,
        print_blob=True,
        suppress_health_check=list(HealthCheck),
    )
    @given(st.sampled_from(sorted(_GENERATION_BODIES)), headers)
    def one_call(path: str, sent: list[tuple[str, bytes]]) -> None:
        answer = client.post(path, json=_GENERATION_BODIES[path], headers=sent)
        assert answer.status_code < 500, (answer.status_code, answer.text[:300])
        key = f"{path} {answer.status_code}"
        stats[key] = stats.get(key, 0) + 1
        if answer.status_code == 400:
            assert "session" in answer.text or "affinity" in answer.text, answer.text[:300]
        for _, value in sent:
            if len(value) > 8 and answer.status_code != 200:
                assert value.decode("latin-1") not in answer.text  # the value is never echoed

    try:
        for path in _GENERATION_BODIES:  # per route an answer and a refusal, always
            one_call.hypothesis.inner_test(path, [("x-session-id", b"session-1")])
            one_call.hypothesis.inner_test(path, [("x-session-id", b"a" * 257)])
        one_call()
    finally:
        client.close()
    for path in _GENERATION_BODIES:  # every route reads the headers: answers and refusals
        assert stats.get(f"{path} 200", 0) >= 1 and stats.get(f"{path} 400", 0) >= 1, stats
    assert not error_log.records, [r.getMessage() for r in error_log.records]


def test_the_error_log_handler_sees_server_errors(
    fuzz_server: RunningServer, error_log: ErrorLog
) -> None:
    """The check above could pass by never seeing a record; prove it would see one."""
    logging.getLogger("realtime.http").error("a probe error record")
    assert [r.getMessage() for r in error_log.records] == ["a probe error record"]
