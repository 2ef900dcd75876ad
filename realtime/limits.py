"""The server's output cap (`--max-tokens-cap`), applied by both transports after `prepare`,
and the input limits both transports hand to the parsers (`input_limits`).

`ChatPipeline.prepare` already refuses a `max_tokens` that does not fit the
model's context (`context_length_exceeded`) and otherwise defaults the limit to
all the room left. The server cap narrows that: an explicit `max_tokens` above
the cap is refused with `max_tokens_exceeded`; without one, the limit becomes the
smaller of the room and the cap (the answer then ends with `finish_reason`
`length`).
"""

from __future__ import annotations

from collections.abc import Iterable

from realtime.config import ServerConfig
from realtime.engine.base import StopConditions
from realtime.pipeline import PreparedChat
from realtime.protocol.errors import OutputLimitError
from realtime.protocol.input_limits import InputLimits
from realtime.protocol.json_input import MAX_JSON_DEPTH_CEILING


def input_limits(config: ServerConfig) -> InputLimits:
    """The request limits of `config`, in the form the protocol parsers take.

    The depth is held to its ceiling, which the CLI enforces, for embedders too."""
    return InputLimits(
        max_json_depth=min(config.max_json_depth, MAX_JSON_DEPTH_CEILING),
        max_json_values=config.max_json_values,
        max_stop_strings=config.max_stop_strings,
        max_stop_chars=config.max_stop_chars,
    )


def apply_max_tokens_cap(prepared: PreparedChat, cap: int | None) -> None:
    request = prepared.request
    field = "max_completion_tokens" if request.max_completion_tokens else "max_tokens"
    cap_output([prepared.engine_request.stop], request.output_limit, field, cap)


def cap_output(
    stops: Iterable[StopConditions], asked: int | None, field: str, cap: int | None
) -> None:
    """Refuse an explicit limit above `cap`; otherwise lower every request's limit to it."""
    if cap is None:
        return
    if asked is not None and asked > cap:
        raise OutputLimitError(
            f"{field} is {asked} but this server allows at most {cap} tokens per answer",
            param=field,
        )
    for stop in stops:
        if stop.max_tokens is None or stop.max_tokens > cap:
            stop.max_tokens = cap
