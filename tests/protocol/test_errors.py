"""The exception hierarchy: how each error surfaces on HTTP and on the WebSocket."""

from __future__ import annotations

import asyncio

import pytest

from realtime.protocol.close_codes import CloseCode
from realtime.protocol.errors import (
    BinaryFrameError,
    DuplicateRequestIdError,
    EngineError,
    EngineUnavailableError,
    InternalError,
    InvalidRequestError,
    MalformedFrameError,
    ModelNotFoundError,
    ProtocolFault,
    RealtimeError,
    ServerShuttingDownError,
    UnknownFieldError,
    UnsupportedFeatureError,
    as_realtime_error,
)


@pytest.mark.parametrize(
    ("cls", "status", "error_type", "code", "close_code"),
    [
        (RealtimeError, 500, "server_error", None, None),
        (InvalidRequestError, 400, "invalid_request_error", None, None),
        (UnknownFieldError, 400, "invalid_request_error", "unknown_field", None),
        (UnsupportedFeatureError, 400, "invalid_request_error", "unsupported", None),
        (ModelNotFoundError, 404, "invalid_request_error", "model_not_found", None),
        (DuplicateRequestIdError, 409, "invalid_request_error", "duplicate_request_id", None),
        (EngineError, 500, "engine_error", "engine_error", None),
        (
            EngineUnavailableError,
            503,
            "service_unavailable",
            "engine_unavailable",
            CloseCode.INTERNAL_ERROR,
        ),
        (InternalError, 500, "server_error", "internal_error", CloseCode.INTERNAL_ERROR),
        (
            ServerShuttingDownError,
            503,
            "service_unavailable",
            "shutting_down",
            CloseCode.GOING_AWAY,
        ),
        (ProtocolFault, 400, "invalid_request_error", None, CloseCode.POLICY_VIOLATION),
        (
            MalformedFrameError,
            400,
            "invalid_request_error",
            "malformed_json",
            CloseCode.INVALID_PAYLOAD,
        ),
        (
            BinaryFrameError,
            400,
            "invalid_request_error",
            "binary_frame",
            CloseCode.UNSUPPORTED_DATA,
        ),
    ],
)
def test_class_mapping(
    cls: type[RealtimeError],
    status: int,
    error_type: str,
    code: str | None,
    close_code: CloseCode | None,
) -> None:
    error = cls("boom")
    assert error.status == status
    assert error.error_type == error_type
    assert error.code == code
    assert error.close_code == close_code
    assert error.message == "boom"
    assert error.param is None
    assert str(error) == "boom"
    assert isinstance(error, RealtimeError)


@pytest.mark.parametrize(
    "cls",
    [
        InvalidRequestError,
        UnknownFieldError,
        UnsupportedFeatureError,
        ModelNotFoundError,
        DuplicateRequestIdError,
    ],
)
def test_request_errors_are_recoverable_invalid_requests(cls: type[RealtimeError]) -> None:
    assert issubclass(cls, InvalidRequestError)
    assert cls.close_code is None


def test_protocol_faults_close_the_socket() -> None:
    assert issubclass(MalformedFrameError, ProtocolFault)
    assert issubclass(BinaryFrameError, ProtocolFault)
    assert not issubclass(ProtocolFault, InvalidRequestError)


def test_explicit_code_and_param_override_defaults() -> None:
    error = UnknownFieldError("nope", param="temprature", code="custom")
    assert error.code == "custom"
    assert error.param == "temprature"


def test_to_body_shape() -> None:
    error = UnknownFieldError("Unrecognized request argument supplied: foo", param="foo")
    assert error.to_body() == {
        "error": {
            "message": "Unrecognized request argument supplied: foo",
            "type": "invalid_request_error",
            "param": "foo",
            "code": "unknown_field",
        }
    }


def test_to_body_with_nulls() -> None:
    assert InvalidRequestError("bad").to_body() == {
        "error": {"message": "bad", "type": "invalid_request_error", "param": None, "code": None}
    }


def test_internal_error_default_message() -> None:
    error = InternalError()
    assert error.message == "internal server error"
    assert error.to_body() == {
        "error": {
            "message": "internal server error",
            "type": "server_error",
            "param": None,
            "code": "internal_error",
        }
    }


def test_as_realtime_error_passes_client_errors_through() -> None:
    error = ModelNotFoundError("no such model", param="model")
    assert as_realtime_error(error) is error
    engine = EngineError("engine blew up")
    assert as_realtime_error(engine) is engine


@pytest.mark.parametrize(
    "exc",
    [
        RuntimeError("secret /path/to/weights.bin: CUDA out of memory"),
        KeyError("api_key=hunter2"),
        ValueError("Traceback (most recent call last): ..."),
        asyncio.CancelledError(),
    ],
)
def test_as_realtime_error_hides_unexpected_messages(exc: BaseException) -> None:
    wrapped = as_realtime_error(exc)
    assert type(wrapped) is InternalError
    assert wrapped.message == "internal server error"
    assert wrapped.code == "internal_error"
    assert wrapped.param is None
    assert wrapped.close_code == CloseCode.INTERNAL_ERROR
    assert wrapped.to_body() == {
        "error": {
            "message": "internal server error",
            "type": "server_error",
            "param": None,
            "code": "internal_error",
        }
    }


def test_every_error_pickles_to_the_same_error() -> None:
    """A decode process sends its refusal back pickled (`json_worker`): an error with
    keyword-only arguments (PromptTooLongError's numbers) must come back whole."""
    import pickle

    from realtime.protocol import errors

    too_long = errors.PromptTooLongError.at_least(90, 600, 80, "messages")
    back = pickle.loads(pickle.dumps(too_long))
    assert type(back) is errors.PromptTooLongError and str(back) == str(too_long)
    assert (back.prompt_tokens, back.context_length) == (90, 80)
    assert back.to_body() == too_long.to_body()
    for cls in vars(errors).values():
        if isinstance(cls, type) and issubclass(cls, errors.RealtimeError):
            if cls is errors.PromptTooLongError:
                continue
            try:
                error = cls("no good", param="p")
            except TypeError:
                continue  # constructors of their own (covered where they are raised)
            back = pickle.loads(pickle.dumps(error))
            assert type(back) is cls and back.to_body() == error.to_body(), cls
