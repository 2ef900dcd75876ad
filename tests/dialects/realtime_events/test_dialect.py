"""The Realtime event dialect's codec, without a socket: commands out, frames back."""

from __future__ import annotations

from typing import Any

import orjson

from realtime.app import event_limits
from realtime.config import ServerConfig
from realtime.dialects.realtime_events.dialect import RealtimeEventDialect
from realtime.dialects.realtime_events.limits import DEFAULT_EVENT_LIMITS
from realtime.engine.echo import EchoEngine
from realtime.pipeline import ChatPipeline
from realtime.pipeline.events import Step
from realtime.protocol.conversation import Message
from realtime.protocol.errors import TooManyRequestsInFlightError
from realtime.protocol.input_limits import InputLimits
from realtime.session.commands import Cancel, Reply, Submit
from realtime.session.dialect import DialectContext
from realtime.session.record import RequestRecord
from tests.dialects.realtime_events.sdk_types import check_server_event

#: The dialect's responses would run on it (these tests never run one).
PIPELINE = ChatPipeline(EchoEngine(), tool_parser="none", reasoning_parser="none")
USER = {"type": "conversation.item.create",
        "item": {"type": "message", "role": "user",
                 "content": [{"type": "input_text", "text": "hi"}]}}  # fmt: skip


class View:
    state = "open"

    def in_flight(self, request_id: str) -> bool:
        return False

    def lane_busy(self, lane: str) -> bool:
        return False


def dialect(config: ServerConfig | None = None) -> RealtimeEventDialect:
    """The dialect of a socket whose handshake asked for "echo", with the limits the app
    gives it for `config`."""
    limits = event_limits(config) if config is not None else DEFAULT_EVENT_LIMITS
    make = RealtimeEventDialect.factory(PIPELINE, "echo", limits)
    context = DialectContext("sess_0123", "echo", InputLimits(), lambda m, e: None)
    made = make(context)
    assert isinstance(made, RealtimeEventDialect)
    return made


def parse(d: RealtimeEventDialect, event: dict[str, Any]) -> Any:
    return d.parse(orjson.dumps(event).decode(), View())


def record(submit: Submit, dialect: RealtimeEventDialect | None = None) -> RequestRecord:
    """The core's record of a submitted response; with `dialect`, the job it made for it,
    never prepared (its output items, chat chunks here, pass through as they are)."""
    assert submit.request_id is not None
    made = RequestRecord(submit.request_id, None, submit.request, None, 0, 0.0, submit.context)
    if dialect is not None:
        made.job = dialect.job(made)
    return made


def test_opened_parse_and_labels() -> None:
    d = dialect()
    [created] = d.opened()
    check_server_event(created)
    reply = parse(d, USER)
    assert isinstance(reply, Reply) and reply.kind == "event"
    assert reply.label == "conversation.item.create"
    refused = parse(d, {"type": "nope"})
    assert isinstance(refused, Reply) and (refused.kind, refused.label) == ("error", "rejected")
    submit = parse(d, {"type": "response.create", "event_id": "evt_1"})
    assert isinstance(submit, Submit) and submit.label == "response.create"
    assert isinstance(submit.request.conversation[0], Message)
    assert submit.request.conversation[0].role == "user" and submit.lane is None
    cancel = parse(d, {"type": "response.cancel"})
    assert cancel == Cancel(submit.request_id, label="response.cancel")
    binary = d.parse_binary(b"\x00")
    assert isinstance(binary, Reply)
    assert binary.frames[0]["error"]["code"] == "binary_frame"


def test_limits_come_from_the_server_config() -> None:
    d = dialect(ServerConfig(realtime_max_items=1, max_concurrent_per_socket=3))
    parse(d, USER)
    full = parse(d, USER)
    assert full.frames[0]["error"]["code"] == "conversation_full"
    assert d.session.limits.max_active_responses == 3


def test_a_response_the_core_refused_frees_the_conversation() -> None:
    d = dialect()
    parse(d, USER)
    submit = parse(d, {"type": "response.create", "event_id": "evt_1"})
    frames = d.render_error(submit.request_id, TooManyRequestsInFlightError("full"), None)
    assert [f["type"] for f in frames] == ["error"]
    assert frames[0]["error"]["event_id"] == "evt_1"
    assert isinstance(parse(d, {"type": "response.create"}), Submit)


def test_a_response_cancelled_while_queued_is_created_then_done() -> None:
    d = dialect()
    parse(d, USER)
    submit = parse(d, {"type": "response.create"})
    frames = d.render_done(record(submit), "cancelled")
    assert [f["type"] for f in frames] == ["response.created", "response.done"]
    assert frames[-1]["response"]["status"] == "cancelled"
    for frame in frames:
        check_server_event(frame)
    assert not d.session.active


def test_a_started_response_streams_and_ends() -> None:
    d = dialect()
    parse(d, USER)
    submit = parse(d, {"type": "response.create"})
    rec = record(submit, d)
    [created] = d.render_started(rec)
    step = Step([1], "hi", None)  # one pipeline step of plain text
    events = [created, *d.render_output(rec, step), *d.render_done(rec, "completed")]
    for event in events:
        check_server_event(event)
    assert events[-1]["response"]["status"] == "completed"
    assert events[-1]["response"]["usage"]["total_tokens"] == 0  # never prepared
    d.ended()
    assert not d.session.active
