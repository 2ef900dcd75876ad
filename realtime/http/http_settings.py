"""What the HTTP routes are given by the app: typed values, built once from the
server's settings (`realtime.consumer_settings`), so no route reads a setting by
name off the config."""

from __future__ import annotations

from dataclasses import dataclass

from realtime.dialects.messages.build import MessagesOptions
from realtime.protocol.input_limits import InputLimits


@dataclass(frozen=True, slots=True)
class HttpSettings:
    #: JSON depth and size, stop strings: what every request body is held to
    input_limits: InputLimits
    #: seconds of silence before an SSE keep-alive comment
    sse_keepalive_seconds: float
    #: the server has API keys: stored state belongs to the key that made it
    keys_enabled: bool
    #: the Messages API's server-side choices
    messages: MessagesOptions
