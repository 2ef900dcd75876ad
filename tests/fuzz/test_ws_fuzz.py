"""Property-based fuzzing of /v1/realtime against a real server.

Hypothesis generates sequences of frames - random bytes, truncated and invalid
UTF-8, deep and huge JSON, wrong types in every request field, unknown frame
types, cancels of unknown ids, binary frames - and sends each sequence on a new
socket to a real uvicorn server, then a probe request. Properties:

* the socket either answers the probe (it kept working) or ends with a
  documented close code for a client-caused fault (1000, 1003, 1007, 1009);
  JSON that is deep, wide or oddly typed (`hostile_json`) never ends it;
* no frame and no close reason carries traceback text, and no error frame is an
  `internal_error`;
* every request the server accepted gets exactly one terminal frame;
* meanwhile a well-behaved client on another socket completes every request
  correctly, and the server never breaks its own state machine.

The run is derandomized (a fixed seed, no example database) and bounded so the
whole test takes well under a minute.
"""

from __future__ import annotations

import json
import re
import threading
from collections import Counter
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import ClientConnection, connect

from realtime.config import ServerConfig
from tests.conftest import RunningServer, scrape_metrics, start_server
from tests.fuzz.hostile_json import deep_chat, every_deep_chat, many_stops, odd_chat

MAX_FRAME = 16 * 1024
CLIENT_FAULT_CLOSES = {1000, 1003, 1007, 1009}
TRACEBACK_MARKERS = ("Traceback", 'File "', "Error:", "site-packages", "realtime/")
EXAMPLES = 500

REQUEST_FIELDS = (
    "model messages max_tokens max_completion_tokens temperature top_p n seed presence_penalty"
    " frequency_penalty logit_bias stop stream stream_options logprobs top_logprobs"
    " response_format tools tool_choice parallel_tool_calls user metadata store service_tier"
    " reasoning_effort verbosity prompt_cache_key safety_identifier modalities audio prediction"
    " web_search_options functions function_call top_k min_p repetition_penalty min_tokens"
    " ignore_eos stop_token_ids include_stop_str_in_output skip_special_tokens"
    " chat_template_kwargs cache_salt nvext request_id type"
).split()

# --- strategies -----------------------------------------------------------------

scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**64)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=20)
)
json_values = st.recursive(
    scalars,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)
ids = st.sampled_from(["a", "b", "c", "req_1", "req_2", "x" * 129, ""]) | st.text(max_size=6)
texts = st.text(max_size=40)


@st.composite
def valid_requests(draw: st.DrawFn) -> dict[str, Any]:
    frame: dict[str, Any] = {
        "model": "echo",
        "messages": [{"role": "user", "content": draw(texts)}],
    }
    if draw(st.booleans()):
        frame["request_id"] = draw(ids)
    if draw(st.booleans()):
        frame["stream"] = draw(st.booleans())
    if draw(st.booleans()):
        frame["max_tokens"] = draw(st.integers(min_value=1, max_value=8))
    return frame


@st.composite
def mutated_requests(draw: st.DrawFn) -> dict[str, Any]:
    """A valid request with one to three fields set to values of any type."""
    frame = draw(valid_requests())
    for name in draw(st.lists(st.sampled_from(REQUEST_FIELDS), min_size=1, max_size=3)):
        frame[name] = draw(json_values)
    return frame


def _text(obj: Any) -> tuple[str, Any]:
    return ("text", json.dumps(obj))


#: Frames the socket survives: it answers with frames and keeps working.
survivable = st.one_of(
    valid_requests().map(_text),
    mutated_requests().map(_text),
    mutated_requests().map(_text),
    st.builds(lambda rid, body: ("text", body), ids, deep_chat()),
    ids.flatmap(lambda rid: deep_chat(request_id=rid)).map(lambda t: ("text", t)),
    odd_chat().map(lambda t: ("text", t)),
    many_stops().map(lambda t: ("text", t)),
    st.builds(lambda rid: _text({"type": "response.cancel", "request_id": rid}), ids),
    st.builds(lambda t: _text({"type": t}), st.sampled_from(["response.update", "", "x", 1])),
    json_values.map(_text),  # any JSON at all, objects or not
)
#: Frames that end the socket (a documented close code) - or, for some, do not.
fatal = st.one_of(
    st.just(_text({"type": "session.close"})),
    st.binary(max_size=64).map(lambda b: ("binary", b)),
    st.binary(min_size=1, max_size=64).map(lambda b: ("raw_text", b)),  # often invalid UTF-8
    st.builds(
        lambda r, cut: ("raw_text", json.dumps(r).encode()[:cut]),
        valid_requests(),
        st.integers(min_value=1, max_value=60),
    ),
    st.text(max_size=30).map(lambda t: ("text", t)),  # mostly not JSON
    st.integers(min_value=MAX_FRAME - 64, max_value=MAX_FRAME + 256).map(
        lambda n: ("text", json.dumps({"model": "echo", "messages": [], "user": "u" * n}))
    ),
)
frames = st.one_of(*([survivable] * 9), fatal)


# --- the run ---------------------------------------------------------------------------


class GoodClient(threading.Thread):
    """Sends valid requests one after another and checks every answer."""

    def __init__(self, url: str):
        super().__init__(name="good-client", daemon=True)
        self.url = url
        self.stop = threading.Event()
        self.completed = 0
        self.failures: list[str] = []

    def run(self) -> None:
        try:
            # No keepalive pings: they draw from `random`, which hypothesis watches.
            with connect(self.url, max_size=None, ping_interval=None) as ws:
                while not self.stop.is_set():
                    rid = f"good-{self.completed}"
                    text = f"steady answer number {self.completed}"
                    ws.send(json.dumps(_chat(text, rid)))
                    got, done = [], None
                    while done is None:
                        frame = json.loads(ws.recv(timeout=10))
                        assert frame["request_id"] == rid, frame
                        if frame.get("type") in ("response.done", "error"):
                            done = frame
                        else:
                            got.append(frame["choices"][0]["delta"].get("content") or "")
                    assert done["type"] == "response.done" and done["status"] == "completed", done
                    assert "".join(got) == text, got
                    self.completed += 1
        except Exception as exc:  # reported by the test, not lost in the thread
            self.failures.append(repr(exc))


def _chat(text: str, request_id: str) -> dict[str, Any]:
    return {
        "model": "echo",
        "messages": [{"role": "user", "content": text}],
        "request_id": request_id,
    }


def _send(ws: ClientConnection, kind: str, payload: Any) -> None:
    if kind == "binary":
        ws.send(payload, text=False)
    elif kind == "raw_text":
        ws.send(payload, text=True)
    else:
        ws.send(payload)


def _request_ids(sequence: list[tuple[str, Any]]) -> tuple[Counter[str], int]:
    """How many request frames named each id, and how many named none."""
    named: Counter[str] = Counter()
    unnamed = 0
    for kind, payload in sequence:
        if kind != "text":
            continue
        try:
            frame = json.loads(payload)
        except (ValueError, RecursionError):
            continue
        if not isinstance(frame, dict) or frame.get("type", "response.create") != "response.create":
            continue
        rid = frame.get("request_id")
        if isinstance(rid, str):
            named[rid] += 1
        elif rid is None:
            unnamed += 1
    return named, unnamed


def _check_text(text: str) -> None:
    for marker in TRACEBACK_MARKERS:
        assert marker not in text, f"server internals reached the client: {text[:300]!r}"


@pytest.fixture(scope="module")
def fuzz_server() -> Any:
    server = start_server(
        ServerConfig(max_frame_bytes=MAX_FRAME, log_level="critical", idle_timeout_seconds=0)
    )
    yield server
    server.stop()


def test_fuzzed_frames_never_break_the_server(fuzz_server: RunningServer) -> None:
    server = fuzz_server
    good = GoodClient(server.ws_url)
    good.start()
    stats: Counter[str] = Counter()

    @settings(
        max_examples=EXAMPLES,
        derandomize=True,
        database=None,
        deadline=None,
        print_blob=True,
        suppress_health_check=list(HealthCheck),
    )
    @given(st.lists(frames, min_size=1, max_size=20))
    def one_socket(sequence: list[tuple[str, Any]]) -> None:
        probe = f"probe-{stats['sockets']}"
        stats["sockets"] += 1
        received: list[dict[str, Any]] = []
        with connect(server.ws_url, max_size=None, close_timeout=2) as ws:
            try:
                for kind, payload in sequence:
                    _send(ws, kind, payload)
                    stats["frames"] += 1
                ws.send(json.dumps(_chat("probe", probe)))
                stats["frames"] += 1
                while True:
                    raw = ws.recv(timeout=10)
                    assert isinstance(raw, str), "server frames are text"
                    frame = json.loads(raw)
                    if frame.get("type") == "error":  # chunks only echo the client's text
                        _check_text(raw)
                        assert frame["error"]["code"] != "internal_error", (frame, sequence)
                    received.append(frame)
                    if frame.get("request_id") == probe and frame.get("type") in (
                        "response.done",
                        "error",
                    ):
                        stats["kept_working"] += 1
                        break
            except ConnectionClosed as closed:
                assert closed.rcvd is not None, "closed without a Close frame"
                assert closed.rcvd.code in CLIENT_FAULT_CLOSES, (closed.rcvd, sequence)
                _check_text(closed.rcvd.reason)
                stats[f"closed_{closed.rcvd.code}"] += 1
        terminals = Counter(
            f["request_id"]
            for f in received
            if f.get("type") in ("response.done", "error") and f.get("request_id") is not None
        )
        # Ids may be reused once answered, so: never more terminal frames than requests.
        sent_ids, unnamed = _request_ids(sequence)
        for rid, n in terminals.items():
            auto = unnamed if re.fullmatch(r"req_\d+", rid) else 0
            assert n <= sent_ids[rid] + auto + (rid == probe), (rid, n, sequence)

    try:
        one_socket()
    finally:
        good.stop.set()
        good.join(15)
    assert not good.failures, good.failures
    assert good.completed > 20, "the well-behaved client made no progress"
    assert stats["frames"] >= 2000, stats
    assert stats["kept_working"] > 0 and len([k for k in stats if k.startswith("closed_")]) >= 3
    metrics = scrape_metrics(server.http_url)
    assert not any(k.startswith("realtime_state_violations_total") for k in metrics)
    assert server.thread.is_alive()


def test_deep_json_in_every_free_form_field_keeps_the_socket(fuzz_server: RunningServer) -> None:
    """The sweep random draws may miss: each place deep JSON can go, at each depth."""
    with connect(fuzz_server.ws_url, max_size=None, ping_interval=None) as ws:
        sent = 0
        sweep = [body for body in every_deep_chat() if len(body) < MAX_FRAME - 64]
        for sent, body in enumerate(sweep):
            ws.send(body[:-1] + f', "request_id": "deep-{sent}"}}')
            while True:
                raw = ws.recv(timeout=10)
                assert isinstance(raw, str)
                frame = json.loads(raw)
                if frame.get("type") == "error":
                    _check_text(raw)
                    assert frame["error"]["code"] != "internal_error", (frame, body[:200])
                if frame.get("type") in ("response.done", "error") and frame.get("request_id") in (
                    f"deep-{sent}",
                    None,
                ):
                    break
        ws.send(json.dumps(_chat("after the sweep", "last")))
        frames = [json.loads(ws.recv(timeout=10))]
        while frames[-1].get("type") != "response.done":
            frames.append(json.loads(ws.recv(timeout=10)))
        assert frames[-1]["status"] == "completed" and sent > 100
