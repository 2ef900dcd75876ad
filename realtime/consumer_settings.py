"""The server's settings handed down as each consumer's typed values, built once.

`ServerConfig` is flat data named after the flags; nothing below the app reads it
by name. The app calls these builders once and passes each part what it takes:
the socket glue its `SocketSettings`, the HTTP routes their `HttpSettings`, the
pipeline its `ConstraintLimits`. Tests and benchmarks that build parts by hand
call the same builders (with `ServerConfig()` for the defaults), so a default is
stated once, in `ServerConfig`.
"""

from __future__ import annotations

from realtime.config import ServerConfig, input_limits
from realtime.dialects.messages.build import MessagesOptions
from realtime.http.http_settings import HttpSettings
from realtime.session.core import CoreLimits
from realtime.ws.socket_settings import SocketSettings


def core_limits(config: ServerConfig) -> CoreLimits:
    """What the session core enforces on each socket."""
    return CoreLimits(
        max_concurrent=config.max_concurrent_per_socket,
        max_in_flight=config.max_in_flight_per_socket,
        queue_size=config.request_queue_size,
        read_ahead=config.read_ahead_requests,
        idle_timeout_seconds=config.idle_timeout_seconds,
        max_session_seconds=config.max_session_seconds,
        session_expiry_grace_seconds=config.session_expiry_grace_seconds,
        slow_consumer_seconds=config.slow_consumer_seconds,
    )


def socket_settings(config: ServerConfig) -> SocketSettings:
    return SocketSettings(
        core=core_limits(config),
        input_limits=input_limits(config),
        outbound_queue_frames=config.outbound_queue_frames,
    )


def http_settings(config: ServerConfig) -> HttpSettings:
    return HttpSettings(
        input_limits=input_limits(config),
        sse_keepalive_seconds=config.sse_keepalive_seconds,
        keys_enabled=bool(config.api_keys),
        messages=MessagesOptions(keep_billing_header=config.keep_billing_header),
    )
