"""Property-based fuzzing of the Realtime event dialect (`/v1/realtime?model=...`).

Hypothesis sends sequences of events - valid ones with fields set to values of
any type, unknown and audio event types, any JSON, text that is not JSON, invalid
UTF-8, binary frames, oversized frames - each sequence on a new socket of a real
server, then a probe (an out-of-band `response.create`). Properties:

* `session.created` comes first, always;
* the socket answers the probe, or (only for a frame over --max-frame-bytes, or
  invalid UTF-8, which the WebSocket layer refuses) ends with 1009 / 1007;
  nothing a client sends in a valid text frame closes it;
* no event carries traceback text and no error is an `internal_error`;
* every `response.created` gets exactly one `response.done`.

And browser-style subprotocol offers at the handshake (`realtime`, key carriers,
garbage): the socket opens selecting `realtime` exactly when it was offered, or is
refused with 401, never echoing a key.
"""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from websockets.exceptions import ConnectionClosed, InvalidStatus
from websockets.sync.client import ClientConnection, connect

from realtime.config import ServerConfig
from tests.conftest import RunningServer, scrape_metrics, start_server
from tests.fuzz.hostile_json import deep_chat

MAX_FRAME = 16 * 1024
TRACEBACK_MARKERS = ("Traceback", 'File "', "Error:", "site-packages", "realtime/")
EXAMPLES = 300
#: Closes the WebSocket layer itself makes: a message too big, text that is not UTF-8.
TRANSPORT_CLOSES = {1007, 1009}

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
texts = st.text(max_size=40)
ids = st.sampled_from(["item_a", "item_b", "root", "resp_x", "x" * 65, ""]) | st.text(max_size=6)


def user_item(text: str) -> dict[str, Any]:
    return {"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]}


@st.composite
def valid_events(draw: st.DrawFn) -> dict[str, Any]:
    kind = draw(st.sampled_from(["session", "create", "delete", "retrieve", "truncate",
                                 "response", "oob", "cancel"]))  # fmt: skip
    if kind == "session":
        session = {"type": "realtime", "instructions": draw(texts)}
        return {"type": "session.update", "session": session}
    if kind == "create":
        item = user_item(draw(texts))
        if draw(st.booleans()):
            item["id"] = draw(ids)
        return {"type": "conversation.item.create", "item": item}
    if kind in ("delete", "retrieve"):
        return {"type": f"conversation.item.{kind}", "item_id": draw(ids)}
    if kind == "truncate":
        return {"type": "conversation.item.truncate", "item_id": draw(ids), "content_index": 0,
                "audio_end_ms": 0}  # fmt: skip
    if kind == "response":
        return {"type": "response.create", "response": {"max_output_tokens": 4}}
    if kind == "oob":
        return {
            "type": "response.create",
            "response": {"conversation": "none", "input": [user_item(draw(texts))]},
        }
    return {"type": "response.cancel"}


@st.composite
def mutated_events(draw: st.DrawFn) -> dict[str, Any]:
    """A valid event with one or two fields (top level or one level down) of any type."""
    event = draw(valid_events())
    for _ in range(draw(st.integers(min_value=1, max_value=2))):
        inner = [k for k, v in event.items() if isinstance(v, dict)]
        target = event[draw(st.sampled_from(inner))] if inner and draw(st.booleans()) else event
        keys = [*target, "bogus", "event_id", "type"]
        target[draw(st.sampled_from(keys))] = draw(json_values)
    return event


def _text(obj: Any) -> tuple[str, Any]:
    return ("text", json.dumps(obj))


frames = st.one_of(
    valid_events().map(_text),
    valid_events().map(_text),
    mutated_events().map(_text),
    mutated_events().map(_text),
    mutated_events().map(_text),
    st.sampled_from(["input_audio_buffer.append", "output_audio_buffer.clear", "x", "", 3]).map(
        lambda t: _text({"type": t})
    ),
    json_values.map(_text),
    deep_chat().map(lambda t: ("text", t)),
    st.text(max_size=30).map(lambda t: ("text", t)),
    st.binary(max_size=64).map(lambda b: ("binary", b)),
    st.binary(min_size=1, max_size=64).map(lambda b: ("raw_text", b)),
    st.integers(min_value=MAX_FRAME - 64, max_value=MAX_FRAME + 256).map(
        lambda n: _text({"type": "conversation.item.create", "item": user_item("u" * n)})
    ),
)


def _send(ws: ClientConnection, kind: str, payload: Any) -> None:
    if kind == "binary":
        ws.send(payload, text=False)
    elif kind == "raw_text":
        ws.send(payload, text=True)
    else:
        ws.send(payload)


def _check_text(text: str) -> None:
    for marker in TRACEBACK_MARKERS:
        assert marker not in text, f"server internals reached the client: {text[:300]!r}"


PROBE = {"type": "response.create", "event_id": "probe",
         "response": {"conversation": "none", "metadata": {"probe": "1"},
                      "input": [user_item("probe")]}}  # fmt: skip


@pytest.fixture(scope="module")
def fuzz_server() -> Any:
    server = start_server(
        ServerConfig(max_frame_bytes=MAX_FRAME, log_level="critical", idle_timeout_seconds=0)
    )
    yield server
    server.stop()


def test_fuzzed_events_never_close_the_socket(fuzz_server: RunningServer) -> None:
    server = fuzz_server
    url = server.ws_url + "?model=echo"
    stats: Counter[str] = Counter()

    @settings(
        max_examples=EXAMPLES,
        derandomize=True,
        database=None,
        deadline=None,
        print_blob=True,
        suppress_health_check=list(HealthCheck),
    )
    @given(st.lists(frames, min_size=1, max_size=16))
    def one_socket(sequence: list[tuple[str, Any]]) -> None:
        stats["sockets"] += 1
        stats["drawn"] += len(sequence)
        events: list[dict[str, Any]] = []
        with connect(url, max_size=None, close_timeout=2, ping_interval=None) as ws:
            try:
                first = json.loads(ws.recv(timeout=10))
                assert first["type"] == "session.created", first
                for kind, payload in sequence:
                    _send(ws, kind, payload)
                    stats["frames"] += 1
                ws.send(json.dumps(PROBE))
                while True:
                    raw = ws.recv(timeout=10)
                    assert isinstance(raw, str), "server frames are text"
                    event = json.loads(raw)
                    events.append(event)
                    if event["type"] == "error":
                        _check_text(raw)
                        assert event["error"]["code"] != "internal_error", (event, sequence)
                    probe_done = event["type"] == "response.done" and (
                        event["response"]["metadata"] == {"probe": "1"}
                    )
                    probe_refused = event["type"] == "error" and (
                        event["error"]["event_id"] == "probe"
                    )
                    if probe_done or probe_refused:
                        stats["kept_working"] += 1
                        break
            except ConnectionClosed as closed:
                assert closed.rcvd is not None, "closed without a Close frame"
                assert closed.rcvd.code in TRANSPORT_CLOSES, (closed.rcvd, sequence)
                stats[f"closed_{closed.rcvd.code}"] += 1
                return
        created = Counter(e["response"]["id"] for e in events if e["type"] == "response.created")
        done = Counter(e["response"]["id"] for e in events if e["type"] == "response.done")
        # each response is created once and done at most once (one still running when
        # the probe answered finishes later), never done without being created
        assert all(n == 1 for n in done.values()), done
        assert all(n == 1 for n in created.values()), created
        assert set(done) <= set(created), (created, done)

    one_socket()
    # The draw made enough frames, and enough of them reached the server: how many are
    # sent before a socket's 1007/1009 close is noticed depends on timing and the draw
    # (1,152 to 1,645 sent in five runs here, 918 on a loaded clean-clone run), so the
    # bounds are loose.
    assert stats["drawn"] >= 900, stats
    assert stats["frames"] >= 500, stats
    # every socket kept working or met a transport limit (checked per socket above);
    # this only proves the draw reached the probe often enough to mean something
    assert stats["kept_working"] >= 100, stats
    metrics = scrape_metrics(server.http_url)
    assert not any(k.startswith("realtime_state_violations_total") for k in metrics)
    assert server.thread.is_alive()


#: RFC 7230 token characters: what a subprotocol may be made of.
_TOKEN_CHARS = "!#$%&'*+-.^_`|~0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
SUBPROTOCOL_KEY = "sk-fuzz-subprotocol"
subprotocols = st.lists(
    st.one_of(
        st.sampled_from(
            ["realtime", f"openai-insecure-api-key.{SUBPROTOCOL_KEY}", "openai-project.p",
             f"realtime-key.{SUBPROTOCOL_KEY}", "openai-insecure-api-key.", "realtime-key."]
        ),
        st.builds(
            lambda prefix, tail: prefix + tail,
            st.sampled_from(["openai-insecure-api-key.", "realtime-key.", "openai-beta.", ""]),
            st.text(alphabet=_TOKEN_CHARS, min_size=1, max_size=80),
        ),
    ),
    min_size=1,
    max_size=4,
)  # fmt: skip


def test_fuzzed_subprotocol_offers_open_or_are_refused_cleanly() -> None:
    """Browser-style offers (`realtime`, key carriers, routing protocols, garbage) on the
    Realtime events' URL of a keyed server: the socket opens (the right key offered),
    selecting `realtime` exactly when it was offered, or the handshake is refused with
    401; the key offered is never echoed."""
    server = start_server(ServerConfig(api_keys=(SUBPROTOCOL_KEY,), log_level="warning"))
    stats: Counter[str] = Counter()

    @settings(
        max_examples=100,
        derandomize=True,
        database=None,
        deadline=None,
        print_blob=True,
        suppress_health_check=list(HealthCheck),
    )
    @given(subprotocols)
    def one_offer(offered: list[str]) -> None:
        try:
            with connect(server.ws_url + "?model=echo", subprotocols=offered) as ws:  # type: ignore[arg-type]
                selected = ws.subprotocol
                assert json.loads(ws.recv(timeout=10))["type"] == "session.created"
        except InvalidStatus as refused:
            response = refused.response
            assert response.status_code == 401, (offered, response.status_code)
            assert SUBPROTOCOL_KEY not in (response.body or b"").decode("latin-1")
            stats["refused"] += 1
            return
        assert selected == ("realtime" if "realtime" in offered else None), (offered, selected)
        stats["opened"] += 1

    try:
        one_offer()
    finally:
        server.stop()
    assert stats["opened"] > 5 and stats["refused"] > 5, stats
