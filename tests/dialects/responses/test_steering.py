"""`response.steer` without sockets: parsing, the per-response queue, the answer marks."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from realtime.dialects.responses.request import ResponseCreateEvent, parse_responses_request
from realtime.dialects.responses.socket_job import ResponseJob
from realtime.dialects.responses.steering import (
    MAX_STEER_ITEMS,
    AnswerMarks,
    Steer,
    Steering,
    SteerRefused,
    parse_steer,
    steer_items,
)
from realtime.pipeline.items import OutputItem
from realtime.protocol.conversation import FunctionCall, Message, Reasoning
from realtime.store import MemoryResponseStore
from tests.dialects.responses.test_service import make_service


def steer(text: str = "go on") -> Steer:
    parsed = parse_steer({"type": "response.steer", "previous_response_id": "r", "input": text})
    assert isinstance(parsed, Steer)
    return parsed


def test_a_string_or_user_messages_are_accepted_in_normal_form() -> None:
    parsed = parse_steer(
        {
            "type": "response.steer",
            "previous_response_id": "resp_1",
            "input": [{"role": "user", "content": [{"type": "input_text", "text": "hi"}]}],
        }
    )
    assert isinstance(parsed, Steer)
    (item,) = parsed.input
    assert item["type"] == "message" and item["role"] == "user" and item["id"].startswith("msg_")
    assert steer_items([parsed, steer("more")]) == (
        Message("user", ("hi",)),
        Message("user", ("more",)),
    )


def test_bad_steers_are_refused_as_invalid_input_naming_what() -> None:
    cases = {
        "previous_response_id": {"input": "x"},
        "unknown field 'extra'": {"previous_response_id": "r", "input": "x", "extra": 1},
        "must not be empty": {"previous_response_id": "r", "input": ""},
        "non-empty": {"previous_response_id": "r", "input": []},
        "user role": {"previous_response_id": "r", "input": [{"role": "system", "content": "x"}]},
        "input_text": {
            "previous_response_id": "r",
            "input": [{"role": "user", "content": [{"type": "input_image"}]}],
        },
        f"at most {MAX_STEER_ITEMS}": {
            "previous_response_id": "r",
            "input": [{"role": "user", "content": "x"}] * (MAX_STEER_ITEMS + 1),
        },
        "characters": {"previous_response_id": "r", "input": "x" * 40_000},
    }
    for expected, fields in cases.items():
        refused = parse_steer({"type": "response.steer", **fields})
        assert isinstance(refused, SteerRefused), expected
        assert refused.failure.code == "invalid_input"
        assert expected in refused.failure.message, (expected, refused.failure.message)
        assert refused.input == (fields["input"] if isinstance(fields["input"], str) else [])


def test_the_queue_bounds_pending_and_total_steers_and_closes() -> None:
    steering = Steering(max_pending=2, max_steers=3)
    assert steering.offer(steer()) is None and steering.offer(steer()) is None
    full = steering.offer(steer())
    assert full is not None and full.code == "too_many_pending_steers"
    assert len(steering.take()) == 2 and steering.offer(steer("c")) is None
    total = steering.offer(steer())
    assert total is not None and total.code == "too_many_pending_steers"
    assert [s.input for s in steering.close()] == ["c"]
    ended = steering.offer(steer())
    assert ended is not None and ended.code == "response_already_completed"
    assert [item["content"][0]["text"] for item in steering.items] == ["go on", "go on"]
    refused = Steering(unsupported="no").offer(steer())
    assert refused is not None and refused.code == "steering_not_supported"


def test_each_pass_gets_the_answer_written_since_the_last() -> None:
    marks = AnswerMarks()
    thought = OutputItem("reasoning", 0, "rs_1", pieces=["hmm"], status="completed")
    message = OutputItem("message", 1, "msg_1", pieces=["Once", " upon"])
    assert marks.since([thought, message]) == (
        Reasoning("hmm"),
        Message("assistant", ("Once upon",)),
    )
    message.pieces.append(" a time")
    call = OutputItem("function_call", 2, "fc_1", "call_1", "f", ["{}"], status="completed")
    assert marks.since([thought, message, call]) == (
        Message("assistant", (" a time",)),
        FunctionCall("call_1", "f", "{}"),
    )
    assert marks.since([thought, message, call]) == ()


@pytest.mark.parametrize(
    ("fields", "why"),
    [
        ({"generate": False}, "warm-up"),
        ({"context_management": [{"type": "compaction"}]}, "context_management"),
        ({"text": {"format": {"type": "json_object"}}}, "text.format"),
    ],
)
def test_responses_that_cannot_be_resumed_take_no_steers(fields: dict[str, Any], why: str) -> None:
    service = make_service()
    body = {"type": "response.create", "model": "echo", "input": "x", **fields}
    event = parse_responses_request(body, model=ResponseCreateEvent)
    assert isinstance(event, ResponseCreateEvent)
    job = ResponseJob(
        service, event, owner=None, local=MemoryResponseStore(), session_id="s", size=0
    )
    asyncio.run(job.prepare())
    refused = job.steer(steer())
    assert refused is not None and refused.code == "steering_not_supported"
    assert why in refused.message
    plain = ResponseJob(
        service,
        parse_responses_request({**body, **{k: None for k in fields}}, model=ResponseCreateEvent),  # type: ignore[arg-type]
        owner=None,
        local=MemoryResponseStore(),
        session_id="s",
        size=0,
    )
    asyncio.run(plain.prepare())
    assert plain.steer(steer()) is None
