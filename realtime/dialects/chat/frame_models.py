"""Pydantic models of every /v1/realtime frame, for documents and clients.

The server's hot path builds frames as plain dicts (`frames.py`); these models
describe the same shapes so that `realtime.docgen` can generate the AsyncAPI
document's message schemas from code, and tests can check that frames captured
from a live server validate against that document.
"""

from __future__ import annotations

import copy
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, create_model

from realtime.dialects.chat.frames import MAX_REQUEST_ID_CHARS
from realtime.dialects.chat.request import ChatCompletionRequest
from realtime.dialects.chat.response import ChatCompletion, ChatCompletionChunk, ErrorDetail, Usage

RequestId = Annotated[str, Field(min_length=1, max_length=MAX_REQUEST_ID_CHARS)]


class _Closed(BaseModel):
    model_config = ConfigDict(extra="forbid")


# --- client -> server ---


class RequestFrameModel(ChatCompletionRequest):
    """A chat request: the /v1/chat/completions body plus the envelope keys.

    `model` may be left out after a `session.setup`, whose model it then uses."""

    type: Literal["response.create"] | None = None
    request_id: RequestId | None = None
    model: str | None = None  # type: ignore[assignment]


def _defaults_model() -> type[BaseModel]:
    """Every request field but `model` and `messages`, all optional: what defaults may set."""
    fields: dict[str, Any] = {}
    for name, info in ChatCompletionRequest.model_fields.items():
        if name not in ("model", "messages"):
            optional = copy.copy(info)  # keeps the constraints (ge=1, ...)
            optional.default = None
            fields[name] = (info.annotation, optional)
    return create_model(
        "SessionDefaults",
        __config__=ConfigDict(extra="forbid"),
        __doc__="Request fields a session's requests inherit (a request's own fields win).",
        **fields,
    )


SessionDefaults = _defaults_model()


class SessionSetupFrameModel(_Closed):
    """Optional, before the first request: the session's model and request defaults."""

    type: Literal["session.setup"]
    request_id: str | None = None
    model: str = Field(min_length=1)
    defaults: SessionDefaults | None = None  # type: ignore[valid-type]


class CancelFrameModel(_Closed):
    """Stop one request; unknown or finished ids are ignored."""

    type: Literal["response.cancel"]
    request_id: RequestId


class SessionCloseFrameModel(_Closed):
    """Finish every accepted request, then close with 1000."""

    type: Literal["session.close"]
    request_id: str | None = None


# --- server -> client ---


class ChunkFrameModel(ChatCompletionChunk):
    """A streamed chunk of one request."""

    request_id: str


class CompletionFrameModel(ChatCompletion):
    """The whole answer of a `"stream": false` request; `response.done` follows."""

    request_id: str


class ResponseDoneFrameModel(_Closed):
    """The terminal frame of a request that ended without an error."""

    type: Literal["response.done"]
    request_id: str
    id: str | None
    status: Literal["completed", "cancelled"]
    finish_reason: str | None
    usage: Usage | None


class ErrorFrameModel(_Closed):
    """A request's terminal error, or (request_id null) the answer to a refused frame."""

    type: Literal["error"]
    request_id: str | None
    error: ErrorDetail


class SessionExpiringFrameModel(_Closed):
    """The socket reached `--max-session`; it closes with 1000 after `close_in_seconds`."""

    type: Literal["session.expiring"]
    request_id: None = None
    close_in_seconds: float
    message: str


class SessionReadyFrameModel(_Closed):
    """The answer to an accepted `session.setup`; never sent otherwise."""

    type: Literal["session.ready"]
    request_id: None = None
    session_id: str = Field(pattern=r"^sess_[0-9a-f]{32}$")
    model: str
    defaults: SessionDefaults  # type: ignore[valid-type]


CLIENT_FRAMES: dict[str, type[BaseModel]] = {
    "RequestFrame": RequestFrameModel,
    "CancelFrame": CancelFrameModel,
    "SessionCloseFrame": SessionCloseFrameModel,
    "SessionSetupFrame": SessionSetupFrameModel,
}

SERVER_FRAMES: dict[str, type[BaseModel]] = {
    "ChunkFrame": ChunkFrameModel,
    "CompletionFrame": CompletionFrameModel,
    "ResponseDoneFrame": ResponseDoneFrameModel,
    "ErrorFrame": ErrorFrameModel,
    "SessionExpiringFrame": SessionExpiringFrameModel,
    "SessionReadyFrame": SessionReadyFrameModel,
}
