"""Limits on what one request may ask for, checked while it is parsed.

They are `realtime serve` flags (`ServerConfig` fields with the same defaults);
the transports hand them to the parsers as one `InputLimits`, so the pure
protocol code needs no configuration module.
"""

from __future__ import annotations

from dataclasses import dataclass

from realtime.protocol.errors import InvalidRequestError
from realtime.protocol.json_input import DEFAULT_MAX_JSON_DEPTH, DEFAULT_MAX_JSON_VALUES

#: Stop strings per request. OpenAI allows 4 and vLLM any number; agent and code
#: clients send a dozen or two. Matching costs the same per token whatever the count.
DEFAULT_MAX_STOP_STRINGS = 64
#: Characters per stop string. Up to this many minus one characters of output can
#: be held back while they might still begin a stop string.
DEFAULT_MAX_STOP_CHARS = 256


@dataclass(frozen=True, slots=True)
class InputLimits:
    max_json_depth: int = DEFAULT_MAX_JSON_DEPTH
    max_json_values: int = DEFAULT_MAX_JSON_VALUES
    max_stop_strings: int = DEFAULT_MAX_STOP_STRINGS
    max_stop_chars: int = DEFAULT_MAX_STOP_CHARS


DEFAULT_INPUT_LIMITS = InputLimits()


def check_stop_strings(stops: list[str], limits: InputLimits, field: str = "stop") -> None:
    """Refuse more stop strings, or a longer one, than the server allows (param `field`)."""
    if len(stops) > limits.max_stop_strings:
        raise InvalidRequestError(
            f"{field}: at most {limits.max_stop_strings} stop strings per request "
            f"(this server's --max-stop-strings), got {len(stops)}",
            param=field,
        )
    for index, stop in enumerate(stops):
        if len(stop) > limits.max_stop_chars:
            raise InvalidRequestError(
                f"{field}: a stop string may have at most {limits.max_stop_chars} characters "
                f"(this server's --max-stop-chars); stop string {index} has {len(stop)}",
                param=field,
            )
