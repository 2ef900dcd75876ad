"""Server settings: one dataclass, filled by the command line or by code that embeds the server.

Every field but `engine_options` is set by one `realtime serve` flag, and the
flag's entry in `realtime.config.flags` says what the field means, the range it
must be in and, for a limit, what happens at it; docs/flags.md lists them all
with these defaults, and names the field beside each flag. The defaults live
here only, so the command line, the docs and embedders read the same numbers.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from realtime.constrain.spec import ConstraintLimits
from realtime.dialects.realtime_events.limits import (
    DEFAULT_MAX_CONVERSATION_BYTES,
    DEFAULT_MAX_CONVERSATION_CHARS,
    DEFAULT_MAX_ITEM_PARTS,
    DEFAULT_MAX_ITEMS,
    DEFAULT_MAX_TOOLS,
)
from realtime.protocol.input_limits import (
    DEFAULT_MAX_STOP_CHARS,
    DEFAULT_MAX_STOP_STRINGS,
    InputLimits,
)
from realtime.protocol.json_input import (
    DEFAULT_MAX_JSON_DEPTH,
    DEFAULT_MAX_JSON_VALUES,
    MAX_JSON_DEPTH_CEILING,
)

#: The grammar engine's own defaults, which the flags start from.
_GRAMMAR_LIMITS = ConstraintLimits()


@dataclass
class ServerConfig:
    """Every setting of a server; each field's meaning is its flag's (`FLAGS`)."""

    host: str = "127.0.0.1"
    port: int = 8000
    engine: str = "echo"
    #: "auto" (the cpu and exllamav2 engines in a process of their own), "on" or "off".
    engine_process: str = "auto"
    #: Front-end processes (HTTP and WebSocket) sharing the port and one engine process.
    api_servers: int = 1
    #: How far below the engine process the front ends run in CPU priority (`nice`).
    front_end_niceness: int = 5
    model_name: str | None = None
    echo_delay: float = 0.0
    echo_tokens_per_step: int = 1
    model_dir: str | None = None
    chat_template: str | None = None
    tool_parser: str = "auto"
    reasoning_parser: str = "auto"
    #: Keyword arguments for the engine's constructor (cache sizes, dtype, GPU split...);
    #: the engine flags fill it, for the engine that takes each.
    engine_options: dict[str, Any] = field(default_factory=dict)
    ui: bool = True
    speculative_timeout_seconds: float = 30.0
    max_speculative: int = 8

    # /v1/realtime
    request_queue_size: int = 64
    max_concurrent_per_socket: int = 16
    read_ahead_requests: int = 16
    outbound_queue_frames: int = 256
    max_frame_bytes: int = 8 * 1024 * 1024
    ws_compression: bool = False
    ws_ping_interval: float | None = 20.0
    ws_ping_timeout: float | None = 20.0
    max_in_flight_per_socket: int = 128
    max_connections: int = 1024
    gc_threshold: int = 10_000
    allocator_keep_mib: int = 256
    idle_timeout_seconds: float = 300.0
    max_session_seconds: float = 86400.0
    session_expiry_grace_seconds: float = 30.0
    slow_consumer_seconds: float = 15.0
    realtime_max_items: int = DEFAULT_MAX_ITEMS
    realtime_max_conversation_chars: int = DEFAULT_MAX_CONVERSATION_CHARS
    realtime_max_conversation_bytes: int = DEFAULT_MAX_CONVERSATION_BYTES
    realtime_max_item_parts: int = DEFAULT_MAX_ITEM_PARTS
    realtime_max_tools: int = DEFAULT_MAX_TOOLS

    # /v1/responses
    #: Where `store: true` responses are kept across restarts: a directory (the SQLite
    #: store) or a postgresql:// URL (the PostgreSQL store several replicas share; it may
    #: hold a password, so it is only ever shown redacted); None keeps them in memory
    #: only (nothing is written unless asked).
    response_store_dir: str | None = None
    #: Seconds a stored response is kept (OpenAI keeps them 30 days); 0 = no age limit.
    response_store_max_age_seconds: float = 30 * 24 * 3600.0
    #: Bytes of stored responses (their JSON); beyond it the oldest go. 0 = no limit.
    response_store_max_bytes: int = 1024 * 1024 * 1024
    #: WebSocket mode: seconds a socket to /v1/responses takes new responses (OpenAI's
    #: 60 minutes); then each `response.create` is refused with
    #: `websocket_connection_limit_reached` (open a new connection). 0 = no limit.
    responses_ws_max_age_seconds: float = 3600.0
    #: WebSocket mode: distinct named lanes (`stream_id`) per socket (OpenAI's 32).
    responses_ws_max_streams: int = 32
    #: WebSocket mode: bytes of one socket's `store: false` responses (kept for its
    #: continuations); beyond it the oldest go. 0 = no limit.
    responses_ws_memory_bytes: int = 64 * 1024 * 1024
    #: Background responses (`background: true`) queued or running at once on this
    #: server, and per API key (an open server's callers are one key); one more is 429.
    max_background: int = 64
    max_background_per_key: int = 16
    #: Events of one background response kept (in memory, about 0.45 kB each) for
    #: resuming its stream; the oldest go first.
    background_max_events: int = 4096
    #: This server's stable name, stored with the background responses it runs, so that
    #: when it starts again it fails those it left unfinished (and only those: replicas
    #: sharing a store each need their own). None: the host name (with `--api-servers`,
    #: plus the front end's number).
    runner_id: str | None = None
    #: Conversations: items one `conversations.create` / `items.create` may add (OpenAI's 20).
    conversation_max_items_per_call: int = 20
    #: Conversations: items a conversation may hold and still be a response's context.
    conversation_max_items: int = 100_000

    # /v1/messages
    #: Keep Claude Code's first system text (`x-anthropic-billing-header: ...`, which
    #: changes every session) in the prompt; left out by default so sessions share a prefix.
    keep_billing_header: bool = False

    # both transports
    max_tokens_cap: int | None = None
    #: A `max_tokens` beyond what fits: "clamp" cuts it to what fits, "error" refuses it.
    max_tokens_policy: str = "clamp"
    max_json_depth: int = DEFAULT_MAX_JSON_DEPTH
    max_json_values: int = DEFAULT_MAX_JSON_VALUES
    max_stop_strings: int = DEFAULT_MAX_STOP_STRINGS
    max_stop_chars: int = DEFAULT_MAX_STOP_CHARS
    max_schema_bytes: int = _GRAMMAR_LIMITS.max_schema_bytes
    max_schema_depth: int = _GRAMMAR_LIMITS.max_schema_depth
    grammar_cache_size: int = _GRAMMAR_LIMITS.cache_size
    grammar_max_size: int = _GRAMMAR_LIMITS.max_grammar_size
    grammar_compile_fuel: int = _GRAMMAR_LIMITS.initial_lexer_fuel
    grammar_step_fuel: int = _GRAMMAR_LIMITS.step_lexer_fuel
    grammar_step_items: int = _GRAMMAR_LIMITS.step_max_items
    grammar_row_items: int = _GRAMMAR_LIMITS.max_items_in_row
    grammar_lexer_states: int = _GRAMMAR_LIMITS.max_lexer_states
    api_keys: tuple[str, ...] = ()
    #: Seals reasoning items' `encrypted_content` (Responses API); None: a random key
    #: per process. Replicas share one so each can read what another sealed.
    reasoning_key: str | None = field(default=None, repr=False)
    allowed_origins: tuple[str, ...] = ()
    #: GET /metrics without an API key: routers and autoscalers scrape with none.
    open_metrics: bool = False

    # HTTP
    sse_keepalive_seconds: float = 15.0
    max_header_bytes: int = 32 * 1024
    max_header_count: int = 100
    header_timeout_seconds: float = 10.0
    max_body_bytes: int = 8 * 1024 * 1024
    body_timeout_seconds: float = 30.0
    forwarded_allow_ips: str = "127.0.0.1,::1"

    shutdown_grace_seconds: float = 5.0
    log_level: str = "info"
    log_format: str = "text"


def input_limits(config: ServerConfig) -> InputLimits:
    """The request limits of `config`, in the form the protocol parsers take (both transports).

    The depth is held to its ceiling, which the CLI enforces, for embedders too."""
    return InputLimits(
        max_json_depth=min(config.max_json_depth, MAX_JSON_DEPTH_CEILING),
        max_json_values=config.max_json_values,
        max_stop_strings=config.max_stop_strings,
        max_stop_chars=config.max_stop_chars,
    )


def constraint_limits(config: ServerConfig) -> ConstraintLimits:
    """What a client may ask the grammar engine to compile, from `config`."""
    return ConstraintLimits(
        max_schema_bytes=config.max_schema_bytes,
        max_schema_depth=config.max_schema_depth,
        max_grammar_size=config.grammar_max_size,
        initial_lexer_fuel=config.grammar_compile_fuel,
        step_lexer_fuel=config.grammar_step_fuel,
        step_max_items=config.grammar_step_items,
        max_items_in_row=config.grammar_row_items,
        max_lexer_states=config.grammar_lexer_states,
        cache_size=config.grammar_cache_size,
    )
