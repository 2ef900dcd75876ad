"""decode_client_frame and the server frame builders of /v1/realtime."""

from __future__ import annotations

import json
from typing import Any

import pytest

from realtime.dialects.chat.frames import (
    MAX_REQUEST_ID_CHARS,
    CancelFrame,
    CloseSessionFrame,
    FrameRejected,
    RequestFrame,
    decode_client_frame,
    done_frame,
    error_frame,
)
from realtime.protocol.errors import (
    InvalidRequestError,
    MalformedFrameError,
    ModelNotFoundError,
    UnknownFieldError,
)
from realtime.protocol.input_limits import InputLimits

MESSAGES = [{"role": "user", "content": "hi"}]


def frame(**fields: Any) -> str:
    return json.dumps(fields)


def rejected(text: str) -> FrameRejected:
    with pytest.raises(FrameRejected) as info:
        decode_client_frame(text)
    return info.value


# --- request frames ---


def test_request_frame_with_type_and_request_id() -> None:
    decoded = decode_client_frame(
        frame(type="response.create", request_id="r1", model="echo", messages=MESSAGES)
    )
    assert isinstance(decoded, RequestFrame)
    assert decoded.request_id == "r1"
    assert decoded.request.model == "echo"
    assert decoded.request.messages[0].role == "user"
    assert decoded.request.stream is True


def test_request_frame_without_type_or_request_id() -> None:
    """The plain /v1/chat/completions body is a request frame as it is."""
    decoded = decode_client_frame(frame(model="echo", messages=MESSAGES))
    assert isinstance(decoded, RequestFrame)
    assert decoded.request_id is None
    assert decoded.request.stream is True


def test_request_frame_keeps_stream_false() -> None:
    decoded = decode_client_frame(
        frame(request_id="r", model="echo", messages=MESSAGES, stream=False)
    )
    assert isinstance(decoded, RequestFrame)
    assert decoded.request.stream is False


def test_stream_options_allowed_without_explicit_stream() -> None:
    # stream defaults to true on the socket, so stream_options is valid without it.
    decoded = decode_client_frame(
        frame(model="echo", messages=MESSAGES, stream_options={"include_usage": True})
    )
    assert isinstance(decoded, RequestFrame)
    assert decoded.request.include_usage is True


def test_envelope_keys_do_not_reach_the_request() -> None:
    decoded = decode_client_frame(
        frame(type="response.create", request_id="r1", model="echo", messages=MESSAGES)
    )
    assert isinstance(decoded, RequestFrame)
    dumped = decoded.request.model_dump(exclude_none=True)
    assert "type" not in dumped
    assert "request_id" not in dumped


def test_request_id_at_max_length_is_accepted() -> None:
    rid = "x" * MAX_REQUEST_ID_CHARS
    decoded = decode_client_frame(frame(request_id=rid, model="echo", messages=MESSAGES))
    assert isinstance(decoded, RequestFrame)
    assert decoded.request_id == rid


def test_invalid_chat_request_is_rejected_in_place() -> None:
    error = rejected(frame(request_id="r9", model="echo", messages=MESSAGES, temperature=9))
    assert error.request_id == "r9"
    assert error.is_request is True
    assert type(error.error) is InvalidRequestError
    assert error.error.param == "temperature"
    assert str(error) == error.error.message


def test_unknown_request_field_is_rejected_in_place() -> None:
    error = rejected(frame(request_id="r2", model="echo", messages=MESSAGES, max_token=3))
    assert error.request_id == "r2"
    assert error.is_request is True
    assert isinstance(error.error, UnknownFieldError)
    assert error.error.code == "unknown_field"
    assert error.error.param == "max_token"
    assert error.error.message == "Unrecognized request argument supplied: max_token"


def test_invalid_request_without_request_id() -> None:
    error = rejected(frame(model="echo", messages=[]))
    assert error.request_id is None
    assert error.is_request is True
    assert error.error.param == "messages"


# --- control frames ---


def test_cancel_frame() -> None:
    decoded = decode_client_frame(frame(type="response.cancel", request_id="r1"))
    assert decoded == CancelFrame("r1")


def test_session_close_frame() -> None:
    assert decode_client_frame(frame(type="session.close")) == CloseSessionFrame()


def test_session_close_may_carry_a_request_id() -> None:
    assert decode_client_frame(frame(type="session.close", request_id="r")) == CloseSessionFrame()


def test_cancel_without_request_id() -> None:
    error = rejected(frame(type="response.cancel"))
    assert error.request_id is None
    assert error.is_request is False
    assert type(error.error) is InvalidRequestError
    assert error.error.param == "request_id"
    assert error.error.message == "response.cancel needs a request_id"


def test_cancel_with_extra_key() -> None:
    error = rejected(frame(type="response.cancel", request_id="r1", reason="bored"))
    assert error.request_id == "r1"
    assert error.is_request is False
    assert error.error.param == "reason"
    assert error.error.message == "unexpected field 'reason' in response.cancel frame"


def test_session_close_with_extra_keys_names_the_first_sorted() -> None:
    error = rejected(frame(type="session.close", zeta=1, alpha=2))
    assert error.request_id is None
    assert error.is_request is False
    assert error.error.param == "alpha"
    assert error.error.message == "unexpected field 'alpha' in session.close frame"


@pytest.mark.parametrize("frame_type", ["response.delete", "", None, 3])
def test_unknown_type(frame_type: Any) -> None:
    error = rejected(frame(type=frame_type, request_id="r5"))
    assert error.request_id == "r5"
    assert error.is_request is False
    assert type(error.error) is InvalidRequestError
    assert error.error.param == "type"
    assert error.error.message == (
        f"unknown frame type {frame_type!r}; expected one of "
        "'response.create', 'response.cancel', 'session.close', 'session.setup'"
    )


@pytest.mark.parametrize(
    "request_id", ["", "x" * (MAX_REQUEST_ID_CHARS + 1), 7, ["r"], {"id": "r"}, True]
)
@pytest.mark.parametrize("frame_type", ["response.create", "response.cancel", "session.close"])
def test_bad_request_id(request_id: Any, frame_type: str) -> None:
    error = rejected(
        json.dumps(
            {"type": frame_type, "request_id": request_id, "model": "echo", "messages": MESSAGES}
        )
    )
    # The bad id cannot be echoed back.
    assert error.request_id is None
    assert error.is_request is False
    assert type(error.error) is InvalidRequestError
    assert error.error.param == "request_id"
    assert error.error.message == "request_id must be a string of 1 to 128 characters"


@pytest.mark.parametrize("text", ["[]", "[1, 2]", '"hello"', "42", "null", "true"])
def test_non_object_json(text: str) -> None:
    error = rejected(text)
    assert error.request_id is None
    assert error.is_request is False
    assert type(error.error) is InvalidRequestError
    assert error.error.message == "a frame must be a JSON object"


@pytest.mark.parametrize("text", ["", "{", '{"model": }', "not json", "{'a': 1}", '{"a": 1} x'])
def test_malformed_json(text: str) -> None:
    with pytest.raises(MalformedFrameError) as info:
        decode_client_frame(text)
    error = info.value
    assert error.message.startswith("malformed JSON frame: ")
    assert error.code == "malformed_json"
    assert int(error.close_code or 0) == 1007


# --- server frames ---


def test_done_frame_shape() -> None:
    usage = {"prompt_tokens": 1, "completion_tokens": 2, "total_tokens": 3}
    assert done_frame("r1", "chatcmpl-1", "completed", "stop", usage) == {
        "type": "response.done",
        "request_id": "r1",
        "id": "chatcmpl-1",
        "status": "completed",
        "finish_reason": "stop",
        "usage": usage,
    }
    assert done_frame("r2", "chatcmpl-2", "cancelled", None, None) == {
        "type": "response.done",
        "request_id": "r2",
        "id": "chatcmpl-2",
        "status": "cancelled",
        "finish_reason": None,
        "usage": None,
    }


def test_error_frame_shape() -> None:
    error = ModelNotFoundError("The model `x` does not exist", param="model")
    assert error_frame("r1", error) == {
        "type": "error",
        "request_id": "r1",
        "error": {
            "message": "The model `x` does not exist",
            "type": "invalid_request_error",
            "param": "model",
            "code": "model_not_found",
        },
    }
    assert error_frame(None, InvalidRequestError("bad")) == {
        "type": "error",
        "request_id": None,
        "error": {"message": "bad", "type": "invalid_request_error", "param": None, "code": None},
    }


def test_rejected_frame_round_trips_into_an_error_frame() -> None:
    error = rejected(frame(request_id="r3", model="echo", messages=MESSAGES, nvext={"x": 1}))
    assert error_frame(error.request_id, error.error) == {
        "type": "error",
        "request_id": "r3",
        "error": {
            "message": "Unrecognized request argument supplied: nvext.x",
            "type": "invalid_request_error",
            "param": "nvext.x",
            "code": "unknown_field",
        },
    }


# --- session.setup and the defaults requests inherit ---


def test_setup_frame_keeps_the_defaults_as_sent() -> None:
    from realtime.dialects.chat.frames import SessionSetupFrame

    defaults = {"max_tokens": 3, "stream": False, "nvext": {"cache_salt": "a"}}
    decoded = decode_client_frame(frame(type="session.setup", model="m", defaults=defaults))
    assert decoded == SessionSetupFrame("m", defaults)
    assert decode_client_frame(frame(type="session.setup", model="m")) == SessionSetupFrame("m")


@pytest.mark.parametrize(
    ("fields", "param", "error_type"),
    [
        ({"defaults": {"max_token": 3}}, "defaults.max_token", UnknownFieldError),
        ({"defaults": {"nvext": {"bogus": 1}}}, "defaults.nvext.bogus", UnknownFieldError),
        ({"defaults": {"top_p": 0}}, "defaults.top_p", InvalidRequestError),
        ({"defaults": {"messages": MESSAGES}}, "defaults.messages", InvalidRequestError),
        ({"defaults": {"model": "x"}}, "defaults.model", InvalidRequestError),
        ({"defaults": {"type": "x"}}, "defaults.type", UnknownFieldError),
        ({"defaults": [1]}, "defaults", InvalidRequestError),
        ({"model": None}, "model", InvalidRequestError),
        ({"extra": 1}, "extra", InvalidRequestError),
    ],
)
def test_setup_frame_rejections_name_the_field(
    fields: dict[str, Any], param: str, error_type: type
) -> None:
    error = rejected(frame(**{"type": "session.setup", "model": "m", **fields}))
    assert error.is_setup and not error.is_request and error.request_id is None
    assert type(error.error) is error_type
    assert error.error.param == param


def test_requests_inherit_defaults_and_override_them_nvext_one_level_deep() -> None:
    defaults = {
        "model": "m",
        "max_tokens": 3,
        "stream_options": {"include_usage": True},
        "nvext": {"cache_salt": "a", "extra_fields": ["completion_token_ids"]},
    }
    plain = decode_client_frame(frame(messages=MESSAGES), defaults)
    assert isinstance(plain, RequestFrame)
    assert plain.request.model == "m" and plain.request.max_tokens == 3
    assert plain.request.include_usage
    own = decode_client_frame(
        frame(messages=MESSAGES, model="n", max_tokens=5, stream_options=None,
              nvext={"cache_salt": "b"}),
        defaults,
    )  # fmt: skip
    assert isinstance(own, RequestFrame)
    assert own.request.model == "n" and own.request.max_tokens == 5
    assert not own.request.include_usage
    assert own.request.effective_cache_salt == "b"
    assert own.request.extra_fields == {"completion_token_ids"}


# --- input limits on frames ---


def _deep(depth: int) -> Any:
    value: Any = 1
    for _ in range(depth):
        value = {"a": value}
    return value


def test_a_deep_request_frame_is_rejected_in_place_with_its_request_id() -> None:
    error = rejected(frame(request_id="d", model="m", messages=MESSAGES, metadata=_deep(70)))
    assert error.request_id == "d" and error.is_request and not error.is_setup
    assert error.error.code == "json_too_deep" and error.error.param == "metadata.a.a.a"


def test_a_deep_control_frame_is_rejected_without_ending_a_request() -> None:
    error = rejected(frame(type="response.cancel", request_id="c", x=_deep(70)))
    assert error.request_id == "c" and not error.is_request
    assert error.error.code == "json_too_deep"


def test_a_deep_setup_frame_is_a_refused_setup() -> None:
    error = rejected(frame(type="session.setup", model="m", defaults={"metadata": _deep(70)}))
    assert error.is_setup and error.request_id is None
    assert error.error.param == "defaults.metadata.a.a"


def test_a_frame_deeper_than_the_decoder_goes_is_rejected_not_malformed() -> None:
    text = '{"request_id": "x", "y": ' + "[" * 3000 + "]" * 3000 + "}"
    error = rejected(text)
    assert error.request_id is None and not error.is_request
    assert error.error.code == "json_too_deep" and error.error.close_code is None


def test_frame_limits_come_from_the_caller() -> None:
    limits = InputLimits(max_json_depth=3, max_stop_strings=1)
    text = frame(request_id="r", model="m", messages=MESSAGES)  # depth 3: body, list, message
    assert isinstance(decode_client_frame(text, None, limits), RequestFrame)
    with pytest.raises(FrameRejected) as info:
        deeper = frame(request_id="r", model="m", messages=MESSAGES, x=[[[]]])  # depth 4
        decode_client_frame(deeper, None, limits)
    assert info.value.error.code == "json_too_deep"
    with pytest.raises(FrameRejected) as info:
        decode_client_frame(frame(model="m", messages=MESSAGES, stop=["a", "b"]), None, limits)
    assert info.value.is_request and info.value.error.param == "stop"


def test_a_wrongly_typed_request_frame_names_the_field() -> None:
    error = rejected(frame(request_id="t", model="m", messages=MESSAGES, stream="yes"))
    assert error.request_id == "t" and error.is_request
    assert (error.error.code, error.error.param) == ("invalid_type", "stream")
