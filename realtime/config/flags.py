"""Every `realtime serve` flag, declared once: `FLAGS`.

One entry says everything about a flag: its name, how its text is parsed and
which range it must be in (`values.py`), its help, its group, the `ServerConfig`
field or engine keyword it sets, and, for a limit, its unit and what happens at
the limit. The command line (`realtime.cli` builds argparse from it), the config
(`config_from_args` fills `ServerConfig` from it) and the docs (`realtime.docgen`
writes docs/flags.md and the limits table in docs/protocol.md from it) all read
this table, and tests/config/test_flags.py checks that every `ServerConfig` field
has exactly one flag and every flag is in the docs.

A flag's default is its field's default in `ServerConfig` (`settings.py`), which
embedders get too; engine flags have none here: the engine's constructor holds it.
To add a flag: a field in `ServerConfig` and one `Flag` here, in the place its
`--help` line should appear.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from realtime.chat.reasoning.registry import reasoning_parser_names
from realtime.chat.tools.registry import tool_parser_names
from realtime.config.settings import ServerConfig
from realtime.config.values import (
    COUNT,
    NON_NEGATIVE_NUMBER,
    POSITIVE,
    POSITIVE_NUMBER,
    Integer,
    api_key,
    engine_option,
    gpu_split,
    runner_id,
    store_location,
)
from realtime.engine.registry import engine_names
from realtime.protocol.json_input import MAX_JSON_DEPTH_CEILING

#: `--help` sections, in order; "server" is argparse's own (untitled) one.
GROUPS = (
    "server",
    "model",
    "cpu engine",
    "scripted engine",
    "exllamav2 engine",
    "access",
    "limits",
    "messages",
    "responses",
)

#: How the flag is given: with a value; alone (a switch: on, or `off` for its field);
#: or repeated, each time adding a value.
Kind = Literal["value", "switch", "off", "repeat"]


@dataclass(frozen=True)
class Limit:
    """A flag that bounds what one client may cost: a row of the limits table."""

    unit: str
    #: What happens at the limit, in the docs' words.
    at_limit: str


@dataclass(frozen=True)
class EngineOption:
    """A flag passed to the engine's constructor, for the engines that take it."""

    engines: tuple[str, ...]
    keyword: str
    #: Choices that stand for Python values (`--paged on` passes True).
    values: Mapping[str, object] = dataclasses.field(default_factory=dict)


@dataclass(frozen=True)
class Flag:
    """One `realtime serve` flag: it sets exactly one of `field`, `engine`, `adds_to`."""

    option: str
    group: str
    help: str | None = None
    #: The `ServerConfig` field the flag sets (None for engine flags and `adds_to`).
    field: str | None = None
    #: Or: the engine keyword it sets (into `ServerConfig.engine_options`).
    engine: EngineOption | None = None
    #: Or: the field it adds to, after the field's own flag or the engine flags
    #: (`--api-key-file` adds to `api_keys`); the command line does the adding.
    adds_to: str | None = None
    #: Parses and checks the text (argparse's `type`); None keeps the text.
    value: Callable[[str], Any] | None = None
    choices: tuple[str, ...] | None = None
    metavar: str | None = None
    kind: Kind = "value"
    #: The command line's spelling of the field's None (`--max-tokens-cap 0`).
    none_as: int | None = None
    limit: Limit | None = None

    @property
    def dest(self) -> str:
        """The argparse attribute: `--max-frame-bytes` -> `max_frame_bytes`."""
        return self.option.removeprefix("--").replace("-", "_")

    def default(self) -> Any:
        """What argparse holds when the flag is not given."""
        if self.kind in ("switch", "off"):
            return False
        if self.kind == "repeat":
            return []
        if self.field is None:
            return None
        value = getattr(ServerConfig(), self.field)
        return self.none_as if value is None and self.none_as is not None else value

    def to_config(self, given: Any) -> Any:
        """The field's value for what argparse holds."""
        if self.kind == "off":
            return not given
        if self.kind == "repeat":
            return tuple(given)
        if self.none_as is not None and given == self.none_as:
            return None
        return given


def _parsers(kind: str, names: list[str]) -> str:
    return f"{kind}: auto (from the chat template), none, or one of " + ", ".join(names)


FLAGS: tuple[Flag, ...] = (
    # --- server ---------------------------------------------------------------------
    Flag("--host", "server", "address to bind (default %(default)s)", field="host"),
    Flag(
        "--port",
        "server",
        "port (default %(default)s; 0 = any free)",
        field="port",
        value=Integer(0, 65535),
    ),
    Flag(
        "--engine",
        "server",
        "engine to serve (default %(default)s): "
        + ", ".join(engine_names())
        + ", auto (exllamav2 when a CUDA GPU can run it, else cpu), or package.module:factory"
        " (docs/howto/write-an-engine.md)",
        field="engine",
        metavar="ENGINE",
    ),
    Flag(
        "--engine-option",
        "server",
        "a keyword argument for the engine's factory (repeatable); VALUE is read as JSON"
        " when it is JSON, else as text (default: none)",
        adds_to="engine_options",
        value=engine_option,
        metavar="KEY=VALUE",
        kind="repeat",
    ),
    Flag(
        "--engine-process",
        "server",
        "run the engine in a process of its own (default %(default)s: on for the cpu and"
        " exllamav2 engines, off for echo, scripted and plug-ins; echo and scripted are"
        " always off)",
        field="engine_process",
        choices=("auto", "on", "off"),
    ),
    Flag(
        "--api-servers",
        "server",
        "front-end processes sharing the port and one engine process (default"
        " %(default)s; more than 1 needs the engine in its own process)",
        field="api_servers",
        value=Integer(1, 64),
    ),
    Flag(
        "--front-end-niceness",
        "server",
        "with the engine in its own process: how far below it the front ends (and their"
        " decode process) run in CPU priority, a `nice` increment, so a flood of large"
        " inputs cannot take the engine's share of a busy machine (default %(default)s;"
        " 0 = the same priority)",
        field="front_end_niceness",
        value=Integer(0, 19),
    ),
    Flag(
        "--model-name",
        "server",
        "the name clients send as `model` (default: the engine's model name)",
        field="model_name",
    ),
    Flag(
        "--echo-delay",
        "server",
        "echo engine: seconds between streamed pieces (default %(default)s)",
        field="echo_delay",
        value=float,
    ),
    Flag(
        "--echo-tokens-per-step",
        "server",
        "echo engine without a delay: tokens generated per pass of the event loop, each"
        " still its own chunk (default %(default)s; more stands for an engine faster than"
        " the front end, which then writes the chunks that are ready together)",
        field="echo_tokens_per_step",
        value=POSITIVE,
    ),
    Flag(
        "--queue-size",
        "server",
        "requests queued per socket before the server stops reading it (default %(default)s)",
        field="request_queue_size",
        value=POSITIVE,
        limit=Limit(
            "requests",
            "queued per socket; when full the server stops reading the socket (backpressure)",
        ),
    ),
    Flag(
        "--read-ahead",
        "server",
        "request frames read past a full queue, so cancels behind them act at once "
        "(default %(default)s)",
        field="read_ahead_requests",
        value=COUNT,
        limit=Limit(
            "requests",
            "read past a full queue, in order; control frames among them act at once;"
            " when full too, the server stops reading the socket",
        ),
    ),
    Flag(
        "--max-concurrent",
        "server",
        "requests generating at once per socket (default %(default)s)",
        field="max_concurrent_per_socket",
        value=POSITIVE,
        limit=Limit("requests", "generating at once per socket; the rest wait in the queue"),
    ),
    Flag(
        "--max-frame-bytes",
        "server",
        "largest WebSocket message accepted; larger closes with 1009 (default %(default)s)",
        field="max_frame_bytes",
        value=POSITIVE,
        limit=Limit("bytes", "a larger message closes the socket with 1009"),
    ),
    Flag(
        "--ws-compression",
        "server",
        "enable permessage-deflate (off by default: it costs throughput)",
        field="ws_compression",
        kind="switch",
    ),
    Flag(
        "--sse-keepalive",
        "server",
        "seconds of silence before an SSE keep-alive comment (default %(default)s)",
        field="sse_keepalive_seconds",
        value=POSITIVE_NUMBER,
        limit=Limit("seconds", "of SSE silence before a `: keep-alive` comment"),
    ),
    Flag(
        "--shutdown-grace",
        "server",
        "seconds shutdown waits for sockets to close and HTTP requests to finish"
        " (default %(default)s)",
        field="shutdown_grace_seconds",
        value=POSITIVE_NUMBER,
        limit=Limit(
            "seconds",
            "on SIGTERM/SIGINT, how long in-flight requests may finish before they are cancelled",
        ),
    ),
    Flag(
        "--log-level",
        "server",
        "the least severe log lines written (default %(default)s)",
        field="log_level",
        choices=("critical", "error", "warning", "info", "debug"),
    ),
    Flag(
        "--log-format",
        "server",
        "json: one JSON object per line with connection and request ids (default %(default)s)",
        field="log_format",
        choices=("text", "json"),
    ),
    # --- model ----------------------------------------------------------------------
    Flag(
        "--model",
        "model",
        "model directory (cpu and exllamav2 engines)",
        field="model_dir",
        metavar="DIR",
    ),
    Flag(
        "--chat-template",
        "model",
        "override the model's chat template: a named template, a file, or inline Jinja",
        field="chat_template",
        metavar="NAME|FILE|JINJA",
    ),
    Flag(
        "--tool-parser",
        "model",
        _parsers("tool-call parser", tool_parser_names()) + " (default %(default)s)",
        field="tool_parser",
    ),
    Flag(
        "--reasoning-parser",
        "model",
        _parsers("reasoning parser", reasoning_parser_names()) + " (default %(default)s)",
        field="reasoning_parser",
    ),
    Flag("--no-ui", "model", "do not serve the chat page at /", field="ui", kind="off"),
    Flag(
        "--speculative-timeout",
        "model",
        "seconds a speculative next-turn warm-up may run (default %(default)s; 0 ignores the hint)",
        field="speculative_timeout_seconds",
        value=NON_NEGATIVE_NUMBER,
    ),
    Flag(
        "--max-speculative",
        "model",
        "warm-ups pending at once; the oldest is dropped (default %(default)s)",
        field="max_speculative",
        value=POSITIVE,
    ),
    # --- cpu engine -----------------------------------------------------------------
    Flag(
        "--max-cache-tokens",
        "cpu engine",
        "tokens of KV cache kept for prefix reuse (default 32768; 0 = no reuse)",
        engine=EngineOption(("cpu",), "max_cache_tokens"),
        value=COUNT,
    ),
    Flag(
        "--dtype",
        "cpu engine",
        "weights dtype (default float32)",
        engine=EngineOption(("cpu",), "dtype"),
        choices=("float32", "bfloat16", "float16"),
    ),
    Flag(
        "--threads",
        "cpu engine",
        "torch CPU threads (default: usable cores - 1)",
        engine=EngineOption(("cpu",), "threads"),
        value=POSITIVE,
    ),
    Flag(
        "--prefill-chunk",
        "cpu engine",
        "prompt tokens per forward pass (default 256)",
        engine=EngineOption(("cpu",), "prefill_chunk_tokens"),
        value=POSITIVE,
    ),
    Flag(
        "--cache-scope",
        "cpu engine",
        "who may reuse a cached prefix: the same socket session (default), or any request"
        " with the same cache_salt (shares system prompts across users; see docs)",
        engine=EngineOption(("cpu",), "cache_scope"),
        choices=("session", "salt"),
    ),
    Flag(
        "--background-chunk",
        "cpu engine",
        "tokens per forward pass of a speculative warm-up (default 128)",
        engine=EngineOption(("cpu",), "background_chunk_tokens"),
        value=POSITIVE,
    ),
    # --- scripted engine ------------------------------------------------------------
    Flag(
        "--script",
        "scripted engine",
        "JSON list of replies to replay (docs/howto/agent.md); --model is optional",
        engine=EngineOption(("scripted",), "script"),
        metavar="FILE",
    ),
    Flag(
        "--script-delay",
        "scripted engine",
        "seconds between streamed tokens (default 0)",
        engine=EngineOption(("scripted",), "delay"),
        value=NON_NEGATIVE_NUMBER,
        metavar="SECONDS",
    ),
    # --- exllamav2 engine -----------------------------------------------------------
    Flag(
        "--cache-size",
        "exllamav2 engine",
        "KV cache tokens (default: context)",
        engine=EngineOption(("exllamav2",), "cache_size"),
        value=POSITIVE,
    ),
    Flag(
        "--cache-mode",
        "exllamav2 engine",
        "KV cache precision (default FP16)",
        engine=EngineOption(("exllamav2",), "cache_mode"),
        choices=("FP16", "Q4", "Q6", "Q8"),
    ),
    Flag(
        "--gpu-split",
        "exllamav2 engine",
        "GB per GPU (default: autosplit)",
        engine=EngineOption(("exllamav2",), "gpu_split"),
        value=gpu_split,
        metavar="GB,GB",
    ),
    Flag(
        "--max-batch-size",
        "exllamav2 engine",
        "sequences decoded together (cpu too: default 32, 1 = one per forward pass)",
        engine=EngineOption(("cpu", "exllamav2"), "max_batch_size"),
        value=POSITIVE,
    ),
    Flag(
        "--max-chunk-size",
        "exllamav2 engine",
        "prefill tokens per pass (multiple of 256; default: exllamav2's)",
        engine=EngineOption(("exllamav2",), "max_chunk_size"),
        value=POSITIVE,
    ),
    Flag(
        "--paged",
        "exllamav2 engine",
        "paged attention (needs flash-attn; default auto)",
        engine=EngineOption(("exllamav2",), "paged", {"on": True, "off": False, "auto": None}),
        choices=("auto", "on", "off"),
    ),
    # --- access ---------------------------------------------------------------------
    Flag(
        "--api-key",
        "access",
        "require this API key (repeatable); none = open server",
        field="api_keys",
        value=api_key,
        metavar="KEY",
        kind="repeat",
    ),
    Flag(
        "--api-key-file",
        "access",
        "read API keys from a file, one per line (# comments allowed)",
        adds_to="api_keys",
        metavar="PATH",
    ),
    Flag(
        "--reasoning-key",
        "access",
        "secret that seals reasoning items' encrypted_content on the Responses API (any"
        " long random string; replicas share one). Default: random per process, so"
        " encrypted reasoning does not survive a restart",
        field="reasoning_key",
        metavar="SECRET",
    ),
    Flag(
        "--allowed-origin",
        "access",
        "browser Origin allowed to connect, e.g. https://app.example.com (repeatable;"
        " '*' = any). Default: no Origin header or same origin only",
        field="allowed_origins",
        metavar="ORIGIN",
        kind="repeat",
    ),
    Flag(
        "--open-metrics",
        "access",
        "serve GET /metrics without an API key, for the routers and autoscalers that scrape"
        " it with none (it shows load and counts, never a request's content)",
        field="open_metrics",
        kind="switch",
    ),
    Flag(
        "--forwarded-allow-ips",
        "access",
        "proxies whose X-Forwarded-Proto/-For are trusted: comma-separated addresses"
        " or networks, '*' = any, '' = none (default %(default)s)",
        field="forwarded_allow_ips",
        metavar="ADDRS",
    ),
    # --- limits ---------------------------------------------------------------------
    Flag(
        "--max-in-flight",
        "limits",
        "requests read and unanswered per socket; more get an error frame (default %(default)s)",
        field="max_in_flight_per_socket",
        value=POSITIVE,
        limit=Limit(
            "requests",
            "read and not yet answered per socket; one more gets an `error` frame"
            " `too_many_requests_in_flight`, the socket stays open",
        ),
    ),
    Flag(
        "--max-json-depth",
        "limits",
        "levels of nested arrays and objects in a request body or frame; deeper is"
        " refused with 400 / an error frame json_too_deep (default %(default)s, at most"
        f" {MAX_JSON_DEPTH_CEILING})",
        field="max_json_depth",
        value=Integer(1, MAX_JSON_DEPTH_CEILING),
        limit=Limit(
            "levels",
            "nested arrays and objects in a request body or frame, the body being level 1"
            f" (at most {MAX_JSON_DEPTH_CEILING}); deeper is 400 / `error` frame"
            " `json_too_deep` naming the field, the socket stays open",
        ),
    ),
    Flag(
        "--max-json-values",
        "limits",
        "JSON values (array items, object members) in a request body or frame; more"
        " is refused with 400 / an error frame too_many_json_values (default %(default)s)",
        field="max_json_values",
        value=POSITIVE,
        limit=Limit(
            "values",
            "array items and object members in a request body or frame, the body counting"
            " one; more is 400 / `error` frame `too_many_json_values` naming the top-level"
            " field holding most, the socket stays open",
        ),
    ),
    Flag(
        "--max-stop-strings",
        "limits",
        "stop strings per request; more are refused with 400 (default %(default)s)",
        field="max_stop_strings",
        value=POSITIVE,
        limit=Limit(
            "strings", "stop strings per request; more is 400 / `error` frame, `param` `stop`"
        ),
    ),
    Flag(
        "--max-stop-chars",
        "limits",
        "characters per stop string; longer is refused with 400 (default %(default)s)",
        field="max_stop_chars",
        value=POSITIVE,
        limit=Limit("characters", "per stop string; longer is 400 / `error` frame, `param` `stop`"),
    ),
    Flag(
        "--max-schema-bytes",
        "limits",
        "bytes of one JSON schema to enforce (a response_format schema, one tool's"
        " parameters), as compact JSON; larger is refused with 400 (default %(default)s)",
        field="max_schema_bytes",
        value=POSITIVE,
        limit=Limit(
            "bytes",
            "one JSON schema to enforce (a `response_format` schema, one tool's `parameters`) as"
            " compact JSON; larger is 400 / `error` frame naming `response_format` or `tools`",
        ),
    ),
    Flag(
        "--max-schema-depth",
        "limits",
        "nesting of objects and arrays in one JSON schema to enforce; deeper is"
        " refused with 400 (default %(default)s)",
        field="max_schema_depth",
        value=POSITIVE,
        limit=Limit(
            "levels",
            "nested objects and arrays in one such schema; deeper is 400 / `error` frame naming"
            " `response_format` or `tools`",
        ),
    ),
    Flag(
        "--grammar-cache-size",
        "limits",
        "compiled grammars (schemas, tool sets) kept for reuse (default %(default)s)",
        field="grammar_cache_size",
        value=POSITIVE,
        limit=Limit(
            "grammars",
            "compiled grammars kept for reuse (a schema, a tool set with its `tool_choice`); the"
            " least recently used goes; a request whose grammar is not kept compiles it again",
        ),
    ),
    Flag(
        "--grammar-max-size",
        "limits",
        "symbols in one compiled grammar (a schema, a tool set); larger is refused with"
        " 400 (default %(default)s; llguidance's max_grammar_size)",
        field="grammar_max_size",
        value=POSITIVE,
        limit=Limit(
            "symbols",
            "in the grammar compiled from one request's schema or tool set (llguidance's"
            " `max_grammar_size`); larger is 400 / `error` frame naming `response_format` or"
            " `tools`, before the answer starts",
        ),
    ),
    Flag(
        "--grammar-compile-fuel",
        "limits",
        "lexer work to compile one grammar (about 50k a millisecond); more is refused"
        " with 400 (default %(default)s; llguidance's initial_lexer_fuel)",
        field="grammar_compile_fuel",
        value=POSITIVE,
        limit=Limit(
            "fuel",
            "lexer work to compile one grammar, about 50k a millisecond (llguidance's"
            " `initial_lexer_fuel`): bounds the compile's time; more is 400 / `error` frame"
            " naming the field, before the answer starts",
        ),
    ),
    Flag(
        "--grammar-step-fuel",
        "limits",
        "lexer work for one token's mask (about 14k a millisecond) (default %(default)s;"
        " llguidance's step_lexer_fuel)",
        field="grammar_step_fuel",
        value=POSITIVE,
        limit=Limit(
            "fuel",
            "lexer work for one token of a constrained answer, about 14k a millisecond"
            " (llguidance's `step_lexer_fuel`); more is 400 before the answer starts when the"
            " compile's trial of the first tokens meets it, else the answer ends with an"
            " `invalid_request_error` naming the field",
        ),
    ),
    Flag(
        "--grammar-step-items",
        "limits",
        "parser items for one token of a constrained answer (about 20k a millisecond on"
        " a quiet core) (default %(default)s; llguidance's step_max_items)",
        field="grammar_step_items",
        value=POSITIVE,
        limit=Limit(
            "items",
            "Earley items for one token of a constrained answer (a mask, a token taken, the"
            " bytes the grammar forces), about 20k a millisecond on a quiet core (llguidance's"
            " `step_max_items`); the mask is computed off the engine's thread, so a costly"
            " grammar slows only its own answer. More is 400 before the answer starts when"
            " the compile's trial of the first tokens meets it, else the answer ends with an"
            " `invalid_request_error` naming the field",
        ),
    ),
    Flag(
        "--grammar-row-items",
        "limits",
        "parser items in one row: the ways a grammar branches at one point (default"
        " %(default)s; llguidance's max_items_in_row, whose own default, 2000, refuses"
        " an object of 1,500 optional properties)",
        field="grammar_row_items",
        value=POSITIVE,
        limit=Limit(
            "items",
            "Earley items in one row: the ways a grammar branches at one point (llguidance's"
            " `max_items_in_row`); `--grammar-step-items` bounds a row too. More is refused"
            " as for `--grammar-step-items`",
        ),
    ),
    Flag(
        "--grammar-lexer-states",
        "limits",
        "lexer states one grammar may build, 1-2 kB each (default %(default)s;"
        " llguidance's max_lexer_states)",
        field="grammar_lexer_states",
        value=POSITIVE,
        limit=Limit(
            "states",
            "lexer states one grammar may build, 1-2 kB of memory each (llguidance's"
            " `max_lexer_states`); more is refused as for `--grammar-step-items`",
        ),
    ),
    Flag(
        "--gc-threshold",
        "limits",
        "garbage collector: allocations between young-generation collections;"
        " startup objects are frozen (default %(default)s; 0 = Python's defaults)",
        field="gc_threshold",
        value=COUNT,
    ),
    Flag(
        "--allocator-keep-mib",
        "limits",
        "MiB of freed memory the C allocator keeps for reuse rather than giving back, so"
        " large inputs reuse pages instead of faulting in new ones (glibc; default"
        " %(default)s; 0 = the allocator's defaults)",
        field="allocator_keep_mib",
        value=COUNT,
    ),
    Flag(
        "--max-connections",
        "limits",
        "open WebSockets; more are refused with HTTP 503 (default %(default)s)",
        field="max_connections",
        value=POSITIVE,
        limit=Limit(
            "sockets", "open WebSockets; one more is refused at the handshake with HTTP 503"
        ),
    ),
    Flag(
        "--outbound-queue",
        "limits",
        "frames held per socket for a slow reader; text chunks of one request fold"
        " into one (default %(default)s)",
        field="outbound_queue_frames",
        value=POSITIVE,
        limit=Limit(
            "frames",
            "frames held for a slow reader (text chunks of one request fold into one);"
            " when full, generation pauses",
        ),
    ),
    Flag(
        "--slow-consumer-timeout",
        "limits",
        "seconds a frame may wait for a client that does not read, then close 1008"
        " (default %(default)s; 0 = never)",
        field="slow_consumer_seconds",
        value=NON_NEGATIVE_NUMBER,
        limit=Limit(
            "seconds",
            "a frame waiting this long for the client to read closes the socket with 1008"
            " (0 = never)",
        ),
    ),
    Flag(
        "--realtime-max-items",
        "limits",
        "items in one Realtime event session's conversation; more are refused with an"
        " error event conversation_full (default %(default)s)",
        field="realtime_max_items",
        value=POSITIVE,
        limit=Limit(
            "items",
            "in one Realtime event session's conversation; one more is an `error` event"
            " `conversation_full`, the socket stays open",
        ),
    ),
    Flag(
        "--realtime-max-conversation-chars",
        "limits",
        "characters of text in one Realtime event session's conversation; more is"
        " refused with an error event conversation_full (default %(default)s)",
        field="realtime_max_conversation_chars",
        value=POSITIVE,
        limit=Limit(
            "characters",
            "of text (messages, call arguments, call outputs) in one Realtime event"
            " session's conversation, and in a `response.create`'s own `input`; more is an"
            " `error` event `conversation_full`, before anything is tokenized",
        ),
    ),
    Flag(
        "--realtime-max-conversation-bytes",
        "limits",
        "bytes one Realtime event session's conversation holds: its items' text in UTF-8"
        " plus 1 KiB per item and 256 bytes per content part; more is refused with an"
        " error event conversation_full (default %(default)s = 16 MiB)",
        field="realtime_max_conversation_bytes",
        value=POSITIVE,
        limit=Limit(
            "bytes",
            "one Realtime event session's conversation (its items' strings in UTF-8, plus"
            " 1 KiB per item and 256 bytes per content part), and a `response.create`'s own"
            " `input`; more is an `error` event `conversation_full`",
        ),
    ),
    Flag(
        "--realtime-max-item-parts",
        "limits",
        "content parts in one Realtime conversation item; more is refused with an error"
        " event too_many_content_parts, before the item is validated (default %(default)s)",
        field="realtime_max_item_parts",
        value=POSITIVE,
        limit=Limit(
            "parts",
            "content parts in one Realtime conversation item (`conversation.item.create`,"
            " `response.input`); more is an `error` event `too_many_content_parts`, counted"
            " before the item is validated",
        ),
    ),
    Flag(
        "--realtime-max-tools",
        "limits",
        "function tools in a Realtime session.update or response.create; more is"
        " refused with an error event (default %(default)s)",
        field="realtime_max_tools",
        value=POSITIVE,
        limit=Limit(
            "tools",
            "function tools in a Realtime `session.update` or `response.create`; more is"
            " an `error` event naming `tools`",
        ),
    ),
    Flag(
        "--idle-timeout",
        "limits",
        "seconds without frames and requests before close 1000 (default %(default)s; 0 = never)",
        field="idle_timeout_seconds",
        value=NON_NEGATIVE_NUMBER,
        limit=Limit(
            "seconds",
            "no frame either way and no request in flight: close 1000 `idle timeout` (0 = never)",
        ),
    ),
    Flag(
        "--max-session",
        "limits",
        "seconds a socket may live: then a session.expiring frame, close 1000 after"
        " --session-expiry-grace (default %(default)s; 0 = unlimited)",
        field="max_session_seconds",
        value=NON_NEGATIVE_NUMBER,
        limit=Limit("seconds", "socket lifetime: then a `session.expiring` frame (0 = unlimited)"),
    ),
    Flag(
        "--session-expiry-grace",
        "limits",
        "seconds between session.expiring and the close (default %(default)s)",
        field="session_expiry_grace_seconds",
        value=NON_NEGATIVE_NUMBER,
        limit=Limit("seconds", "from `session.expiring` to close 1000 `session expired`"),
    ),
    Flag(
        "--ws-ping-interval",
        "limits",
        "seconds between keepalive pings (default %(default)s; 0 = no pings)",
        field="ws_ping_interval",
        value=NON_NEGATIVE_NUMBER,
        none_as=0,
        limit=Limit("seconds", "between keepalive pings (0 = none)"),
    ),
    Flag(
        "--ws-ping-timeout",
        "limits",
        "seconds to wait for a pong before close 1011 (default %(default)s; 0 = wait forever)",
        field="ws_ping_timeout",
        value=NON_NEGATIVE_NUMBER,
        none_as=0,
        limit=Limit(
            "seconds", "no pong in time: close 1011 `keepalive ping timeout` (0 = wait forever)"
        ),
    ),
    Flag(
        "--max-header-bytes",
        "limits",
        "bytes of an HTTP request line and headers; more is 431 (default %(default)s)",
        field="max_header_bytes",
        value=POSITIVE,
        limit=Limit(
            "bytes",
            "HTTP request line and headers (WebSocket handshakes too); more is 431"
            " `request_headers_too_large`, then the connection closes",
        ),
    ),
    Flag(
        "--max-headers",
        "limits",
        "header lines per HTTP request; more is 431 (default %(default)s)",
        field="max_header_count",
        value=POSITIVE,
        limit=Limit(
            "lines", "header lines per HTTP request; more is 431 `request_headers_too_large`"
        ),
    ),
    Flag(
        "--header-timeout",
        "limits",
        "seconds for a request's headers to arrive, then 408 and close"
        " (default %(default)s; 0 = no limit)",
        field="header_timeout_seconds",
        value=NON_NEGATIVE_NUMBER,
        limit=Limit(
            "seconds",
            "from a request's first byte (or the connection) to the end of its headers;"
            " then 408 `request_timeout` and close (0 = no limit)",
        ),
    ),
    Flag(
        "--max-body-bytes",
        "limits",
        "bytes of an HTTP request body; more is 413, refused before it is read"
        " (default %(default)s)",
        field="max_body_bytes",
        value=POSITIVE,
        limit=Limit(
            "bytes",
            "HTTP request body; a larger `Content-Length` is 413 `request_too_large` before"
            " the body is read, a chunked body as soon as it passes the limit",
        ),
    ),
    Flag(
        "--body-timeout",
        "limits",
        "seconds a request body may stall, then 408 and close (default %(default)s; 0 = no limit)",
        field="body_timeout_seconds",
        value=NON_NEGATIVE_NUMBER,
        limit=Limit(
            "seconds",
            "a request body that stalls this long while the server waits for it: 408"
            " `request_timeout` (0 = no limit)",
        ),
    ),
    Flag(
        "--max-tokens-cap",
        "limits",
        "largest max_tokens a request may ask for; without max_tokens the answer is"
        " cut there (default 0 = the model's context)",
        field="max_tokens_cap",
        value=COUNT,
        none_as=0,
        limit=Limit(
            "tokens",
            "largest `max_tokens`; above it the answer stops there (`length`), or with"
            " `--max-tokens-policy error` 400 / `error` frame `max_tokens_exceeded`;"
            " without `max_tokens` the answer stops there (`length`). Default: the model's"
            " context",
        ),
    ),
    Flag(
        "--max-tokens-policy",
        "limits",
        "a max_tokens beyond what fits (the context after the prompt, then"
        " --max-tokens-cap): `clamp` cuts it to what fits (the answer then ends with the"
        " length finish reason), `error` refuses it with 400 (default %(default)s)",
        field="max_tokens_policy",
        choices=("clamp", "error"),
    ),
    # --- messages (/v1/messages) --------------------------------------------------------
    Flag(
        "--keep-billing-header",
        "messages",
        "keep Claude Code's `x-anthropic-billing-header` system text in the prompt (left"
        " out by default: it changes every session, and would end the shared prefix there)",
        field="keep_billing_header",
        kind="switch",
    ),
    # --- responses (/v1/responses) ------------------------------------------------------
    Flag(
        "--response-store",
        "responses",
        "where stored responses are kept across restarts: a directory (a SQLite file"
        " there, created if missing) or a postgresql://USER[:PASSWORD]@HOST[:PORT]/DB URL"
        " (one store several replicas share; needs the postgres extra); default: in"
        " memory only, lost on restart",
        field="response_store_dir",
        value=store_location,
        metavar="DIR|URL",
    ),
    Flag(
        "--response-store-max-age",
        "responses",
        "seconds a stored response is kept (default %(default)s = 30 days; 0 = no age limit)",
        field="response_store_max_age_seconds",
        value=NON_NEGATIVE_NUMBER,
        metavar="SECONDS",
        limit=Limit(
            "seconds",
            "a stored response older than this is deleted and no longer found (0 = no age limit)",
        ),
    ),
    Flag(
        "--response-store-max-bytes",
        "responses",
        "bytes of stored responses; beyond it the oldest are deleted (default"
        " %(default)s = 1 GiB; 0 = no limit)",
        field="response_store_max_bytes",
        value=COUNT,
        metavar="BYTES",
        limit=Limit(
            "bytes",
            "stored responses (their JSON) beyond this: the oldest are deleted (0 = no limit)",
        ),
    ),
    Flag(
        "--conversation-max-items-per-call",
        "responses",
        "items one conversations.create or conversations.items.create may add; more is"
        " 400 too_many_items (default %(default)s, as OpenAI's)",
        field="conversation_max_items_per_call",
        value=POSITIVE,
        metavar="N",
        limit=Limit(
            "items",
            "added by one `POST /v1/conversations` or `POST /v1/conversations/{id}/items`;"
            " more is 400 `too_many_items`, nothing added",
        ),
    ),
    Flag(
        "--conversation-max-items",
        "responses",
        "items a conversation may hold and still be a response's context; a response in a"
        " longer one is 400 conversation_too_long, before its items are read (default"
        " %(default)s)",
        field="conversation_max_items",
        value=POSITIVE,
        metavar="N",
        limit=Limit(
            "items",
            "in a conversation a response continues (`conversation`); more is 400 / `error`"
            " event `conversation_too_long`, checked before any item is read",
        ),
    ),
    Flag(
        "--responses-ws-max-age",
        "responses",
        "seconds a WebSocket to /v1/responses takes new responses; after that each"
        " response.create gets websocket_connection_limit_reached (the client opens a new"
        " connection) (default %(default)s = 60 minutes, as OpenAI's; 0 = no limit)",
        field="responses_ws_max_age_seconds",
        value=NON_NEGATIVE_NUMBER,
        metavar="SECONDS",
        limit=Limit(
            "seconds",
            "a WebSocket to /v1/responses takes new responses this long; then each"
            " `response.create` is refused with `websocket_connection_limit_reached`"
            " (0 = no limit)",
        ),
    ),
    Flag(
        "--responses-ws-max-streams",
        "responses",
        "distinct named lanes (stream_id) per WebSocket to /v1/responses; more is"
        " websocket_stream_limit_reached (default %(default)s)",
        field="responses_ws_max_streams",
        value=POSITIVE,
        metavar="N",
        limit=Limit(
            "lanes",
            "distinct named `stream_id`s on one WebSocket to /v1/responses; a new one past it:"
            " `websocket_stream_limit_reached`",
        ),
    ),
    Flag(
        "--responses-ws-memory-bytes",
        "responses",
        "bytes of one WebSocket's store:false responses (kept for its own"
        " continuations); beyond it the oldest go (default %(default)s = 64 MiB; 0 = no limit)",
        field="responses_ws_memory_bytes",
        value=COUNT,
        metavar="BYTES",
        limit=Limit(
            "bytes",
            "one WebSocket's `store: false` responses (kept for its continuations); beyond it"
            " the oldest go (0 = no limit)",
        ),
    ),
    Flag(
        "--max-background",
        "responses",
        "background responses (background: true) queued or running at once; one more is"
        " 429 too_many_background_responses (default %(default)s)",
        field="max_background",
        value=POSITIVE,
        metavar="N",
        limit=Limit(
            "responses",
            "background responses queued or running at once on this server; one more is"
            " refused with 429 `too_many_background_responses`",
        ),
    ),
    Flag(
        "--max-background-per-key",
        "responses",
        "background responses queued or running at once per API key (a server without keys:"
        " for all callers); one more is 429 too_many_background_responses (default"
        " %(default)s)",
        field="max_background_per_key",
        value=POSITIVE,
        metavar="N",
        limit=Limit(
            "responses",
            "background responses queued or running at once per API key (without keys: all"
            " callers together); one more is refused with 429 `too_many_background_responses`",
        ),
    ),
    Flag(
        "--background-max-events",
        "responses",
        "events of one background response kept in memory (about 0.45 kB each) for resuming"
        " its stream; the oldest go first, and a resume from before them is 400"
        " events_not_kept (default %(default)s)",
        field="background_max_events",
        value=POSITIVE,
        metavar="N",
        limit=Limit(
            "events",
            "of one background response kept for `?stream=true&starting_after=N`; older ones"
            " are dropped, and a resume from before them is refused with 400 `events_not_kept`",
        ),
    ),
    Flag(
        "--runner-id",
        "responses",
        "this server's stable name, stored with the background responses it runs: on"
        " restart it fails those it left queued or in_progress, and only those (replicas"
        " sharing a store each need their own). Default: the host name (with --api-servers,"
        " plus /front-end-N)",
        field="runner_id",
        value=runner_id,
        metavar="NAME",
    ),
)
