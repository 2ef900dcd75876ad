"""WebSocket mode's codec without a socket: every client event the SDK defines is served
or refused by name, lanes are checked as the SDK checks them, events carry their lane."""

from __future__ import annotations

import json
from typing import Any

import pytest
from openai.types.responses.responses_server_event import ResponseWsError

from realtime.dialects.responses.socket_codec import (
    Create,
    Refuse,
    ResponsesSocketCodec,
)
from realtime.dialects.responses.steering import Steer, SteerRefused
from realtime.protocol.errors import InvalidRequestError
from realtime.protocol.input_limits import InputLimits


def create(**fields: Any) -> str:
    return json.dumps({"type": "response.create", "model": "echo", "input": "hi", **fields})


def refused(command: Create | Refuse) -> Refuse:
    assert isinstance(command, Refuse), command
    # every refusal is the SDK's error event, with the lane when it names one
    ResponseWsError.model_validate(command.frame)
    assert command.frame.get("stream_id") == command.stream_id
    return command


def test_a_create_is_the_http_body_with_its_lane() -> None:
    codec = ResponsesSocketCodec()
    command = codec.parse(create(stream_id="lane-1", store=False, max_output_tokens=5))
    assert isinstance(command, Create)
    assert command.stream_id == "lane-1" and command.event.stream_id == "lane-1"
    assert command.event.items[0]["content"][0]["text"] == "hi"
    assert command.event.stores is False and command.event.max_output_tokens == 5
    default = codec.parse(create())
    assert isinstance(default, Create) and default.stream_id is None


def test_stream_fields_are_accepted_on_the_socket() -> None:
    """Every socket response streams: `stream` and `stream_options` change nothing, and
    `stream_options` without `stream` (refused over HTTP) is fine here."""
    codec = ResponsesSocketCodec()
    command = codec.parse(create(stream_options={"include_obfuscation": False}))
    assert isinstance(command, Create)
    assert isinstance(codec.parse(create(stream=False)), Create)


@pytest.mark.parametrize(
    ("frame", "code", "param"),
    [
        ("{not json", "invalid_json", None),
        ("[1, 2]", "invalid_event", None),
        ('{"model": "echo"}', "invalid_event", "type"),
        ('{"type": "session.update"}', "invalid_event", "type"),
        ('{"type": 5}', "invalid_event", "type"),
        ('{"type": "response.cancel", "response_id": "resp_1"}', "invalid_event", "type"),
        ("[" * 100 + "]" * 100, "json_too_deep", "0.0.0.0"),
    ],
)
def test_bad_frames_are_refused_by_name(frame: str, code: str, param: str | None) -> None:
    command = refused(ResponsesSocketCodec().parse(frame))
    assert command.error.code == code and command.error.param == param
    assert command.stream_id is None


def test_an_invalid_request_names_its_field_and_its_lane() -> None:
    command = refused(ResponsesSocketCodec().parse(create(stream_id="a", temperature=9)))
    assert command.error.param == "temperature" and command.stream_id == "a"
    command = refused(ResponsesSocketCodec().parse(create(stream_id="a", colour="red")))
    assert command.error.code == "unknown_field" and command.error.param == "colour"
    command = refused(ResponsesSocketCodec().parse(create(background=True)))
    assert command.error.code == "unsupported"


@pytest.mark.parametrize("stream_id", ["", "has space", "x" * 257, "é", 7, ["a"]])
def test_a_stream_id_the_sdk_would_not_send_is_invalid(stream_id: Any) -> None:
    command = refused(ResponsesSocketCodec().parse(create(stream_id=stream_id)))
    assert command.error.code == "invalid_stream_id" and command.error.param == "stream_id"
    assert command.stream_id is None  # no lane of the client's can have that name


def test_distinct_named_lanes_are_limited_per_socket() -> None:
    codec = ResponsesSocketCodec(max_streams=2)
    assert isinstance(codec.parse(create(stream_id="a")), Create)
    assert isinstance(codec.parse(create(stream_id="b")), Create)
    assert isinstance(codec.parse(create(stream_id="a")), Create)  # reused: fine
    assert isinstance(codec.parse(create()), Create)  # the default lane does not count
    command = refused(codec.parse(create(stream_id="c")))
    assert command.error.code == "websocket_stream_limit_reached" and command.stream_id == "c"


def test_a_steer_is_parsed_for_the_dialect_and_a_bad_one_refused_as_invalid_input() -> None:
    codec = ResponsesSocketCodec()
    steer = {"type": "response.steer", "previous_response_id": "resp_1", "input": "faster"}
    command = codec.parse(json.dumps(steer))
    assert isinstance(command, Steer)
    assert command.previous_response_id == "resp_1" and command.input == "faster"
    bad = codec.parse(json.dumps({**steer, "input": [{"role": "developer", "content": "x"}]}))
    assert isinstance(bad, SteerRefused) and bad.failure.code == "invalid_input"


def test_an_expired_connection_refuses_new_responses() -> None:
    codec = ResponsesSocketCodec()
    codec.expired = True
    command = refused(codec.parse(create(stream_id="a")))
    assert command.error.code == "websocket_connection_limit_reached"
    assert command.stream_id == "a" and command.frame["status"] == 400


def test_binary_frames_are_refused() -> None:
    command = refused(ResponsesSocketCodec().parse_binary())
    assert command.error.code == "binary_frame"


def test_json_limits_are_the_servers() -> None:
    codec = ResponsesSocketCodec(InputLimits(max_json_values=10))
    command = refused(codec.parse(create(input=[{"role": "user", "content": "x"}] * 10)))
    assert command.error.code == "too_many_json_values"


def test_events_carry_their_lane_and_errors_are_the_sdks() -> None:
    event = ResponsesSocketCodec.render({"type": "response.created", "sequence_number": 0}, "a")
    assert event["stream_id"] == "a"
    assert "stream_id" not in ResponsesSocketCodec.render({"type": "x"}, None)
    frame = ResponsesSocketCodec.error(InvalidRequestError("bad", param="input"), "b")
    parsed = ResponseWsError.model_validate(frame)
    assert parsed.stream_id == "b" and parsed.error.param == "input" and parsed.status == 400
