"""The messages between a front end and the engine core, and their framing, without I/O.

A frame is a 4-byte big-endian length and a pickle (protocol 5). pickle, not
msgpack or JSON: measured side by side (`bench/engine_transport.py`) it costs the
same per message as msgpack over the same socket and needs no dependency; the
socket it crosses is private to the server's user (a 0700 directory, and the
engine checks its peer's uid), so only the server's own processes write to it.

The hot messages are tuples of plain values, not dataclasses: a step's outputs for
one front end travel as one `OUTPUTS` message, whatever the batch size.
"""

from __future__ import annotations

import pickle
import struct
from collections.abc import Iterator
from typing import Any

from realtime.engine.base import EngineOutput, EngineRequest, SamplingParams, StopConditions
from realtime.engine.errors import (
    EngineFailure,
    EngineRequestError,
    EngineUnavailable,
    GenerationError,
    RequestPart,
)
from realtime.model.generation import FinishReason, TokenLogprob

# --- message kinds (the first item of every message) ---

#: front end -> engine, the first message on a connection: (HELLO, role)
HELLO = 0
#: (ADD, job, request): start a request
ADD = 1
#: (CANCEL, job): stop it; nothing more is sent for it
CANCEL = 2
#: (PAUSE, job) / (RESUME, job): its reader lags / caught up (backpressure)
PAUSE = 3
RESUME = 4
#: (END_SESSION, session id)
END_SESSION = 5
#: control: (QUERY, attribute path) -> (REPLY, value): a copy of engine state
QUERY = 6
#: control: (CALL, "module:function") -> (REPLY, its result) (test probes)
CALL = 7
#: engine -> front end: (OUTPUTS, [(job, output), ...]): one step's outputs
OUTPUTS = 10
#: (FAILED, job, error): the request ends with an engine error
FAILED = 11
#: control answers: (REPLY, value) or (REPLY_ERROR, message)
REPLY = 12
REPLY_ERROR = 13

#: connection roles
DATA = "data"
CONTROL = "control"

_HEADER = struct.Struct("!I")
#: No message is anywhere near this; a length beyond it is a broken stream.
MAX_FRAME_BYTES = 256 * 1024 * 1024


class ProtocolError(Exception):
    """The byte stream is not frames of ours: the connection is dropped."""


def frame(message: Any) -> bytes:
    payload = pickle.dumps(message, protocol=5)
    return _HEADER.pack(len(payload)) + payload


class FrameReader:
    """Bytes in (any split), messages out."""

    __slots__ = ("_buffer",)

    def __init__(self) -> None:
        self._buffer = bytearray()

    def feed(self, data: bytes) -> Iterator[Any]:
        buffer = self._buffer
        buffer += data
        offset = 0
        end = len(buffer)
        try:
            while end - offset >= 4:
                (size,) = _HEADER.unpack_from(buffer, offset)
                if size > MAX_FRAME_BYTES:
                    raise ProtocolError(f"a frame of {size} bytes")
                if end - offset - 4 < size:
                    break
                start = offset + 4
                offset = start + size
                yield pickle.loads(memoryview(buffer)[start:offset])
        finally:
            del buffer[:offset]


# --- requests ---


def encode_request(request: EngineRequest) -> tuple[Any, ...]:
    """An `EngineRequest` as plain values; its compiled constraint travels as the spec
    it was compiled from (the engine compiles it again, from its own cache)."""
    s = request.sampling
    stop = request.stop
    constraint = request.constraint
    spec = None
    if constraint is not None:
        spec = constraint.spec
        if spec is None:
            raise ValueError("a compiled constraint without its spec cannot cross processes")
    return (
        request.request_id,
        request.prompt_token_ids,
        (
            s.temperature,
            s.top_p,
            s.top_k,
            s.min_p,
            s.seed,
            s.presence_penalty,
            s.frequency_penalty,
            s.repetition_penalty,
            s.logit_bias,
        ),
        (stop.max_tokens, stop.stop_token_ids, stop.ignore_eos, stop.min_tokens),
        request.logprobs,
        request.cache_salt,
        request.session_id,
        request.priority,
        request.warm_up,
        spec,
    )


def decode_request(values: tuple[Any, ...]) -> tuple[EngineRequest, Any]:
    """The request (without its constraint) and the constraint's spec (or None)."""
    rid, prompt, sampling, stop, logprobs, salt, session, priority, warm_up, spec = values
    request = EngineRequest(
        rid,
        prompt,
        sampling=SamplingParams(*sampling),
        stop=StopConditions(*stop),
        logprobs=logprobs,
        cache_salt=salt,
        session_id=session,
        priority=priority,
        warm_up=warm_up,
    )
    return request, spec


# --- outputs ---


def encode_output(output: EngineOutput) -> tuple[Any, ...]:
    logprobs = output.logprobs
    return (
        output.token_ids,
        None if logprobs is None else [(e.token_id, e.logprob, e.top) for e in logprobs],
        None if output.finish_reason is None else output.finish_reason.value,
        output.cached_tokens,
        output.error,
        None if output.error_part is None else output.error_part.value,
        output.stopped_on_token,
    )


def decode_output(values: tuple[Any, ...]) -> EngineOutput:
    tokens, logprobs, finish, cached, error, part, stopped = values
    return EngineOutput(
        tokens,
        None if logprobs is None else [TokenLogprob(t, lp, top) for t, lp, top in logprobs],
        None if finish is None else FinishReason(finish),
        cached_tokens=cached,
        error=error,
        # whose fault: a grammar that met a limit mid-answer is the request's (a 400)
        error_part=None if part is None else RequestPart(part),
        stopped_on_token=stopped,
    )


# --- errors ---

_ERRORS: dict[str, type[GenerationError]] = {
    "request": EngineRequestError,
    "unavailable": EngineUnavailable,
    "failure": EngineFailure,
}


def encode_error(error: GenerationError) -> tuple[Any, ...]:
    if isinstance(error, EngineRequestError):
        part = None if error.part is None else error.part.value
        return ("request", error.message, part, error.exceeds_context)
    kind = "unavailable" if isinstance(error, EngineUnavailable) else "failure"
    return (kind, error.message, None, False)


def decode_error(values: tuple[Any, ...]) -> GenerationError:
    kind, message, part, exceeds = values
    if kind == "request":
        return EngineRequestError(
            message,
            part=None if part is None else RequestPart(part),
            exceeds_context=exceeds,
        )
    return _ERRORS.get(kind, EngineFailure)(message)
