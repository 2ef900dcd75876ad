"""The chat-frame dialect on its own: each client frame's command, each server frame's shape."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import pytest

from realtime.chat.delta import DeltaGenerator
from realtime.dialects.chat.dialect import ORDERED_LANE, ChatFrameDialect
from realtime.dialects.chat.job import ChatJob
from realtime.dialects.chat.request import parse_chat_request
from realtime.engine.echo import EchoEngine
from realtime.pipeline import ChatPipeline
from realtime.protocol.errors import InvalidRequestError
from realtime.session.commands import Cancel, CloseGracefully, CloseWith, Reply, Submit
from realtime.session.record import RequestRecord

CHAT = {"model": "echo", "messages": [{"role": "user", "content": "hi"}]}
#: The dialect's requests would run on it (these tests never run one).
PIPELINE = ChatPipeline(EchoEngine(), tool_parser="none", reasoning_parser="none")


class NoView:
    state = "open"

    def in_flight(self, request_id: str) -> bool:
        return False

    def lane_busy(self, lane: str) -> bool:
        return False


@dataclass
class Prepared:
    delta: DeltaGenerator


def parse(dialect: ChatFrameDialect, payload: Any) -> Any:
    text = payload if isinstance(payload, str) else json.dumps(payload)
    return dialect.parse(text, NoView())


def record(request_id: str = "r", prepared: Any = None) -> RequestRecord:
    """A request's record and its job (one that did not stream: its output is rendered as
    it is); with `prepared`, the job's prompt was built."""
    request = RequestRecord(request_id, None, None, None, 0, 0.0)
    body = parse_chat_request({**CHAT, "stream": False})
    request.job = ChatJob(PIPELINE, body, session_id="sess_t", size=0)
    request.job.run = prepared
    return request


@pytest.fixture
def dialect() -> ChatFrameDialect:
    return ChatFrameDialect(PIPELINE, model_name="echo", session_id="sess_t")


def test_requests_with_an_id_have_no_lane_and_without_one_share_the_ordered_lane(
    dialect: ChatFrameDialect,
) -> None:
    with_id = parse(dialect, {**CHAT, "request_id": "a"})
    without = parse(dialect, CHAT)
    assert isinstance(with_id, Submit) and with_id.request_id == "a" and with_id.lane is None
    assert isinstance(without, Submit) and without.request_id is None
    assert without.lane == ORDERED_LANE and without.request.stream is True  # streams by default
    assert with_id.label == without.label == "request"
    assert with_id.size == len(json.dumps({**CHAT, "request_id": "a"}))


def test_an_invalid_request_is_a_submit_with_its_rejection(dialect: ChatFrameDialect) -> None:
    command = parse(dialect, {**CHAT, "request_id": "a", "temperature": "hot"})
    assert isinstance(command, Submit) and command.request is None
    assert command.rejection is not None and command.rejection.param == "temperature"


def test_control_frames_and_faults(dialect: ChatFrameDialect) -> None:
    assert parse(dialect, {"type": "response.cancel", "request_id": "a"}) == Cancel("a")
    assert parse(dialect, {"type": "session.close"}) == CloseGracefully()
    malformed = parse(dialect, "{nope")
    assert isinstance(malformed, CloseWith) and malformed.label == "malformed"
    assert malformed.error.close_code == 1007
    binary = dialect.parse_binary(b"\x00")
    assert isinstance(binary, CloseWith) and binary.error.close_code == 1003
    unknown = parse(dialect, {"type": "what"})
    assert isinstance(unknown, Reply) and unknown.label == "rejected"
    assert unknown.frames[0]["request_id"] is None and unknown.frames[0]["error"]["param"] == "type"


def test_session_setup_once_then_too_late(dialect: ChatFrameDialect) -> None:
    wrong = parse(dialect, {"type": "session.setup", "model": "other"})
    assert isinstance(wrong, Reply) and wrong.frames[0]["error"]["code"] == "model_not_found"
    ready = parse(dialect, {"type": "session.setup", "model": "echo", "defaults": {"seed": 3}})
    assert isinstance(ready, Reply) and ready.kind == "ready" and ready.label == "session_setup"
    assert ready.frames[0] == {
        "type": "session.ready",
        "request_id": None,
        "session_id": "sess_t",
        "model": "echo",
        "defaults": {"seed": 3},
    }
    assert parse(dialect, {"messages": CHAT["messages"]}).request.seed == 3
    again = parse(dialect, {"type": "session.setup", "model": "echo"})
    assert again.frames[0]["error"]["code"] == "session_already_set_up"
    dialect.ended()
    assert dialect.setup_state == "ended"


def test_server_frames(dialect: ChatFrameDialect) -> None:
    chunk: dict[str, Any] = {"object": "chat.completion.chunk", "choices": []}
    assert dialect.render_output(record("a"), chunk) == [{**chunk, "request_id": "a"}]
    delta = DeltaGenerator(model="echo", prompt_tokens=2)
    delta.finish_reason = "stop"
    (done,) = dialect.render_done(record("a", Prepared(delta)), "completed")
    assert done == {
        "type": "response.done",
        "request_id": "a",
        "id": delta.id,
        "status": "completed",
        "finish_reason": "stop",
        "usage": delta.usage(),
    }
    (cancelled,) = dialect.render_done(record("b", Prepared(delta)), "cancelled")
    assert cancelled["finish_reason"] is None and cancelled["usage"] == delta.usage()
    (never_ran,) = dialect.render_done(record("c"), "cancelled")
    assert never_ran["id"] is None and never_ran["usage"] is None
    (error,) = dialect.render_error("d", InvalidRequestError("bad", param="x"), None)
    assert error["type"] == "error" and error["request_id"] == "d"
    assert error["error"]["param"] == "x"
    assert dialect.render_expiring(30.0)[0]["close_in_seconds"] == 30.0
    assert dialect.opened() == () and dialect.render_started(record()) == ()
