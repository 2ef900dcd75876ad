"""The engine process's messages without sockets: every field crosses, any split of the bytes."""

from __future__ import annotations

import random

import pytest

from realtime.constrain.spec import BannedTokens, GrammarSpec
from realtime.engine.base import (
    BACKGROUND_PRIORITY,
    EngineOutput,
    EngineRequest,
    SamplingParams,
    StopConditions,
)
from realtime.engine.errors import (
    EngineFailure,
    EngineRequestError,
    EngineUnavailable,
    RequestPart,
)
from realtime.engine.process import wire
from realtime.model.generation import FinishReason, TokenLogprob


class _Compiled:
    """What `encode_request` reads of a compiled constraint: its spec."""

    def __init__(self, spec: object) -> None:
        self.spec = spec


def test_a_request_crosses_with_every_field() -> None:
    spec = GrammarSpec('{"grammars": []}', "response_format", "json_schema 'x'")
    request = EngineRequest(
        "r1",
        [1, 2, 3],
        sampling=SamplingParams(0.5, 0.9, 40, 0.05, 7, 0.1, 0.2, 1.1, {5: -100.0}),
        stop=StopConditions(max_tokens=9, stop_token_ids=[4], ignore_eos=True, min_tokens=2),
        logprobs=3,
        cache_salt="salt",
        session_id="s1",
        priority=BACKGROUND_PRIORITY,
        constraint=_Compiled(spec),  # type: ignore[arg-type]
    )
    decoded, decoded_spec = wire.decode_request(wire.encode_request(request))
    assert decoded_spec == spec
    request.constraint = None
    assert decoded == request


def test_a_ban_crosses_as_its_ids() -> None:
    spec = BannedTokens(frozenset({3, 4}), "tool_choice", "no tools")
    request = EngineRequest("r", [1], constraint=_Compiled(spec))  # type: ignore[arg-type]
    assert wire.decode_request(wire.encode_request(request))[1] == spec


def test_a_constraint_without_its_spec_is_refused() -> None:
    request = EngineRequest("r", [1], constraint=_Compiled(None))  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="without its spec"):
        wire.encode_request(request)


@pytest.mark.parametrize(
    "output",
    [
        EngineOutput([7]),
        EngineOutput([7, 8], cached_tokens=12),
        EngineOutput(
            [9],
            [TokenLogprob(9, -0.5, [(9, -0.5), (3, -1.5)])],
            FinishReason.STOP,
            stopped_on_token=True,
        ),
        EngineOutput([], None, FinishReason.ERROR, error="the matcher failed"),
        EngineOutput(
            [],
            None,
            FinishReason.ERROR,
            error="a grammar limit",
            error_part=RequestPart.CONSTRAINT,
        ),
    ],
)
def test_an_output_crosses_whole(output: EngineOutput) -> None:
    assert wire.decode_output(wire.encode_output(output)) == output


def test_errors_cross_with_their_kind_and_part() -> None:
    error = wire.decode_error(
        wire.encode_error(
            EngineRequestError("too long", part=RequestPart.PROMPT, exceeds_context=True)
        )
    )
    assert isinstance(error, EngineRequestError)
    assert (error.message, error.part, error.exceeds_context) == (
        "too long",
        RequestPart.PROMPT,
        True,
    )
    assert type(wire.decode_error(wire.encode_error(EngineUnavailable("x")))) is EngineUnavailable
    assert type(wire.decode_error(wire.encode_error(EngineFailure("y")))) is EngineFailure


def test_frames_come_out_whole_however_the_bytes_are_split() -> None:
    messages = [(wire.OUTPUTS, [(i, wire.encode_output(EngineOutput([i])))]) for i in range(50)]
    data = b"".join(wire.frame(m) for m in messages)
    rng = random.Random(4)
    reader = wire.FrameReader()
    got: list[object] = []
    offset = 0
    while offset < len(data):
        size = rng.randint(1, 40)
        got.extend(reader.feed(data[offset : offset + size]))
        offset += size
    assert got == messages


def test_a_length_beyond_any_message_is_a_broken_stream() -> None:
    with pytest.raises(wire.ProtocolError):
        list(wire.FrameReader().feed(b"\xff\xff\xff\xff"))
