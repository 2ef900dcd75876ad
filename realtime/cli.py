"""`realtime serve ...` (also `python -m realtime serve ...`)."""

from __future__ import annotations

import argparse
import errno
import logging
import socket
import sys
from collections.abc import Sequence
from typing import Any

from realtime import __version__
from realtime.auth import is_loopback, load_key_file, validate_key
from realtime.chat.reasoning.registry import reasoning_parser_names
from realtime.chat.tools.registry import tool_parser_names
from realtime.config import ServerConfig
from realtime.engine.registry import engine_names
from realtime.protocol.json_input import MAX_JSON_DEPTH_CEILING


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def _positive_float(text: str) -> float:
    value = float(text)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be greater than 0, got {text}")
    return value


def _non_negative_float(text: str) -> float:
    value = float(text)
    if not value >= 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more, got {text}")
    return value


def _non_negative_int(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more, got {value}")
    return value


def _json_depth(text: str) -> int:
    value = _positive_int(text)
    if value > MAX_JSON_DEPTH_CEILING:
        raise argparse.ArgumentTypeError(f"must be at most {MAX_JSON_DEPTH_CEILING}, got {value}")
    return value


def _api_key(text: str) -> str:
    try:
        return validate_key(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="realtime", description=__doc__)
    parser.add_argument("--version", action="version", version=f"realtime {__version__}")
    commands = parser.add_subparsers(dest="command", required=True)

    serve = commands.add_parser("serve", help="run the server")
    d = ServerConfig()
    serve.add_argument("--host", default=d.host, help="address to bind (default %(default)s)")
    serve.add_argument(
        "--port", type=int, default=d.port, help="port (default %(default)s; 0 = any free)"
    )
    serve.add_argument(
        "--engine",
        default=d.engine,
        choices=[*engine_names(), "auto"],
        help="engine to serve (default %(default)s); auto = exllamav2 when a CUDA GPU can"
        " run it, else cpu",
    )
    serve.add_argument(
        "--model-name",
        default=None,
        help="the name clients send as `model` (default: the engine's model name)",
    )
    serve.add_argument(
        "--echo-delay",
        type=float,
        default=d.echo_delay,
        help="echo engine: seconds between streamed pieces (default %(default)s)",
    )
    serve.add_argument(
        "--queue-size",
        type=_positive_int,
        default=d.request_queue_size,
        help="requests queued per socket before the server stops reading it",
    )
    serve.add_argument(
        "--read-ahead",
        type=_non_negative_int,
        default=d.read_ahead_requests,
        help="request frames read past a full queue, so cancels behind them act at once "
        "(default %(default)s)",
    )
    serve.add_argument(
        "--max-concurrent",
        type=_positive_int,
        default=d.max_concurrent_per_socket,
        help="requests generating at once per socket",
    )
    serve.add_argument(
        "--max-frame-bytes",
        type=_positive_int,
        default=d.max_frame_bytes,
        help="largest WebSocket message accepted; larger closes with 1009",
    )
    serve.add_argument(
        "--ws-compression",
        action="store_true",
        help="enable permessage-deflate (off by default: it costs throughput)",
    )
    serve.add_argument(
        "--sse-keepalive",
        type=_positive_float,
        default=d.sse_keepalive_seconds,
        help="seconds of silence before an SSE keep-alive comment",
    )
    serve.add_argument(
        "--shutdown-grace",
        type=_positive_float,
        default=d.shutdown_grace_seconds,
        help="seconds shutdown waits for sockets to close and HTTP requests to finish",
    )
    serve.add_argument(
        "--log-level",
        default=d.log_level,
        choices=["critical", "error", "warning", "info", "debug"],
    )
    _add_model_arguments(serve, d)
    _add_hardening_arguments(serve, d)
    return parser


def _gpu_split(text: str) -> list[float]:
    try:
        split = [float(part) for part in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected GB per GPU like 20,24, got {text!r}") from None
    if not split or any(gb <= 0 for gb in split):
        raise argparse.ArgumentTypeError(f"every GPU needs a positive number of GB, got {text!r}")
    return split


#: Engine flags: (flag, engine(s), constructor keyword). Only the selected engine's are passed.
_ENGINE_FLAGS = (
    ("max_cache_tokens", "cpu", "max_cache_tokens"),
    ("dtype", "cpu", "dtype"),
    ("threads", "cpu", "threads"),
    ("prefill_chunk", "cpu", "prefill_chunk_tokens"),
    ("cache_scope", "cpu", "cache_scope"),
    ("background_chunk", "cpu", "background_chunk_tokens"),
    ("cache_size", "exllamav2", "cache_size"),
    ("cache_mode", "exllamav2", "cache_mode"),
    ("gpu_split", "exllamav2", "gpu_split"),
    ("max_batch_size", "cpu exllamav2", "max_batch_size"),
    ("max_chunk_size", "exllamav2", "max_chunk_size"),
    ("paged", "exllamav2", "paged"),
    ("script", "scripted", "script"),
    ("script_delay", "scripted", "delay"),
)


def _add_model_arguments(serve: argparse.ArgumentParser, d: ServerConfig) -> None:
    """The model, its output parsers, and each engine's own settings."""
    model = serve.add_argument_group("model")
    model.add_argument("--model", metavar="DIR", help="model directory (cpu and exllamav2 engines)")
    model.add_argument(
        "--chat-template",
        metavar="NAME|FILE|JINJA",
        help="override the model's chat template: a named template, a file, or inline Jinja",
    )
    model.add_argument(
        "--tool-parser",
        default=d.tool_parser,
        help="tool-call parser: auto (from the chat template), none, or one of "
        + ", ".join(tool_parser_names())
        + " (default %(default)s)",
    )
    model.add_argument(
        "--reasoning-parser",
        default=d.reasoning_parser,
        help="reasoning parser: auto (from the chat template), none, or one of "
        + ", ".join(reasoning_parser_names())
        + " (default %(default)s)",
    )
    model.add_argument("--no-ui", action="store_true", help="do not serve the chat page at /")
    model.add_argument(
        "--speculative-timeout",
        type=_non_negative_float,
        default=d.speculative_timeout_seconds,
        help="seconds a speculative next-turn warm-up may run (default %(default)s;"
        " 0 ignores the hint)",
    )
    model.add_argument(
        "--max-speculative",
        type=_positive_int,
        default=d.max_speculative,
        help="warm-ups pending at once; the oldest is dropped (default %(default)s)",
    )
    cpu = serve.add_argument_group("cpu engine")
    cpu.add_argument(
        "--max-cache-tokens",
        type=_non_negative_int,
        help="tokens of KV cache kept for prefix reuse (default 32768; 0 = no reuse)",
    )
    cpu.add_argument("--dtype", choices=["float32", "bfloat16", "float16"], help="weights dtype")
    cpu.add_argument(
        "--threads", type=_positive_int, help="torch CPU threads (default: usable cores - 1)"
    )
    cpu.add_argument(
        "--prefill-chunk", type=_positive_int, help="prompt tokens per forward pass (default 256)"
    )
    cpu.add_argument(
        "--cache-scope",
        choices=["session", "salt"],
        help="who may reuse a cached prefix: the same socket session (default), or any request"
        " with the same cache_salt (shares system prompts across users; see docs)",
    )
    cpu.add_argument(
        "--background-chunk",
        type=_positive_int,
        help="tokens per forward pass of a speculative warm-up (default 128)",
    )
    scripted = serve.add_argument_group("scripted engine")
    scripted.add_argument(
        "--script",
        metavar="FILE",
        help="JSON list of replies to replay (docs/howto/agent.md); --model is optional",
    )
    scripted.add_argument(
        "--script-delay",
        type=_non_negative_float,
        metavar="SECONDS",
        help="seconds between streamed tokens (default 0)",
    )
    exl = serve.add_argument_group("exllamav2 engine")
    exl.add_argument("--cache-size", type=_positive_int, help="KV cache tokens (default: context)")
    exl.add_argument("--cache-mode", choices=["FP16", "Q4", "Q6", "Q8"], help="KV cache precision")
    exl.add_argument(
        "--gpu-split", type=_gpu_split, metavar="GB,GB", help="GB per GPU (default: autosplit)"
    )
    exl.add_argument(
        "--max-batch-size",
        type=_positive_int,
        help="sequences decoded together (cpu too: default 32, 1 = one per forward pass)",
    )
    exl.add_argument(
        "--max-chunk-size", type=_positive_int, help="prefill tokens per pass (multiple of 256)"
    )
    exl.add_argument(
        "--paged",
        choices=["auto", "on", "off"],
        help="paged attention (needs flash-attn; default auto)",
    )


def _engine_options(args: argparse.Namespace, engine: str, *, chosen: bool) -> dict[str, Any]:
    """The given flags that belong to `engine`, as its constructor's keywords.

    A flag for another engine is an error, unless `--engine auto` chose this one:
    then the flags for the engine it did not choose are ignored, so one command
    line can carry settings for both.
    """
    options: dict[str, Any] = {}
    for flag, owner, keyword in _ENGINE_FLAGS:
        value = getattr(args, flag)
        if value is None:
            continue
        if engine not in owner.split():
            if chosen:
                continue
            owners = " and ".join(owner.split())
            raise ValueError(f"--{flag.replace('_', '-')} applies to the {owners} engine only")
        options[keyword] = {"on": True, "off": False, "auto": None}.get(value, value)
    return options


def _resolve_engine(name: str) -> str:
    """`--engine auto` becomes the engine it picks here, before anything else reads it."""
    if name != "auto":
        return name
    from realtime.engine.auto import choose_engine

    chosen, reason = choose_engine()
    logging.getLogger("realtime").info("--engine auto: %s", reason)
    return chosen


def _add_hardening_arguments(serve: argparse.ArgumentParser, d: ServerConfig) -> None:
    """Access control, limits and observability (docs/protocol.md#limits lists them all)."""
    access = serve.add_argument_group("access")
    access.add_argument(
        "--api-key",
        action="append",
        type=_api_key,
        default=[],
        metavar="KEY",
        help="require this API key (repeatable); none = open server",
    )
    access.add_argument(
        "--api-key-file",
        metavar="PATH",
        help="read API keys from a file, one per line (# comments allowed)",
    )
    access.add_argument(
        "--allowed-origin",
        action="append",
        default=[],
        metavar="ORIGIN",
        help="browser Origin allowed to connect, e.g. https://app.example.com (repeatable;"
        " '*' = any). Default: no Origin header or same origin only",
    )
    access.add_argument(
        "--forwarded-allow-ips",
        default=d.forwarded_allow_ips,
        metavar="ADDRS",
        help="proxies whose X-Forwarded-Proto/-For are trusted: comma-separated addresses"
        " or networks, '*' = any, '' = none (default %(default)s)",
    )
    limits = serve.add_argument_group("limits")
    limits.add_argument(
        "--max-in-flight",
        type=_positive_int,
        default=d.max_in_flight_per_socket,
        help="requests read and unanswered per socket; more get an error frame"
        " (default %(default)s)",
    )
    limits.add_argument(
        "--max-json-depth",
        type=_json_depth,
        default=d.max_json_depth,
        help="levels of nested arrays and objects in a request body or frame; deeper is"
        " refused with 400 / an error frame json_too_deep (default %(default)s, at most"
        f" {MAX_JSON_DEPTH_CEILING})",
    )
    limits.add_argument(
        "--max-json-values",
        type=_positive_int,
        default=d.max_json_values,
        help="JSON values (array items, object members) in a request body or frame; more"
        " is refused with 400 / an error frame too_many_json_values (default %(default)s)",
    )
    limits.add_argument(
        "--max-stop-strings",
        type=_positive_int,
        default=d.max_stop_strings,
        help="stop strings per request; more are refused with 400 (default %(default)s)",
    )
    limits.add_argument(
        "--max-stop-chars",
        type=_positive_int,
        default=d.max_stop_chars,
        help="characters per stop string; longer is refused with 400 (default %(default)s)",
    )
    limits.add_argument(
        "--realtime-max-items",
        type=_positive_int,
        default=d.realtime_max_items,
        help="items in one Realtime event session's conversation; more are refused with an"
        " error event conversation_full (default %(default)s)",
    )
    limits.add_argument(
        "--realtime-max-conversation-chars",
        type=_positive_int,
        default=d.realtime_max_conversation_chars,
        help="characters of text in one Realtime event session's conversation; more is"
        " refused with an error event conversation_full (default %(default)s)",
    )
    limits.add_argument(
        "--realtime-max-tools",
        type=_positive_int,
        default=d.realtime_max_tools,
        help="function tools in a Realtime session.update or response.create; more is"
        " refused with an error event (default %(default)s)",
    )
    limits.add_argument(
        "--gc-threshold",
        type=_non_negative_int,
        default=d.gc_threshold,
        help="garbage collector: allocations between young-generation collections;"
        " startup objects are frozen (default %(default)s; 0 = Python's defaults)",
    )
    limits.add_argument(
        "--max-connections",
        type=_positive_int,
        default=d.max_connections,
        help="open WebSockets; more are refused with HTTP 503 (default %(default)s)",
    )
    limits.add_argument(
        "--outbound-queue",
        type=_positive_int,
        default=d.outbound_queue_frames,
        help="frames held per socket for a slow reader; text chunks of one request fold"
        " into one (default %(default)s)",
    )
    limits.add_argument(
        "--slow-consumer-timeout",
        type=_non_negative_float,
        default=d.slow_consumer_seconds,
        help="seconds a frame may wait for a client that does not read, then close 1008"
        " (default %(default)s; 0 = never)",
    )
    limits.add_argument(
        "--idle-timeout",
        type=_non_negative_float,
        default=d.idle_timeout_seconds,
        help="seconds without frames and requests before close 1000 (default %(default)s;"
        " 0 = never)",
    )
    limits.add_argument(
        "--max-session",
        type=_non_negative_float,
        default=d.max_session_seconds,
        help="seconds a socket may live: then a session.expiring frame, close 1000 after"
        " --session-expiry-grace (default %(default)s; 0 = unlimited)",
    )
    limits.add_argument(
        "--session-expiry-grace",
        type=_non_negative_float,
        default=d.session_expiry_grace_seconds,
        help="seconds between session.expiring and the close (default %(default)s)",
    )
    limits.add_argument(
        "--ws-ping-interval",
        type=_non_negative_float,
        default=d.ws_ping_interval,
        help="seconds between keepalive pings (default %(default)s; 0 = no pings)",
    )
    limits.add_argument(
        "--ws-ping-timeout",
        type=_non_negative_float,
        default=d.ws_ping_timeout,
        help="seconds to wait for a pong before close 1011 (default %(default)s; 0 = wait forever)",
    )
    limits.add_argument(
        "--max-header-bytes",
        type=_positive_int,
        default=d.max_header_bytes,
        help="bytes of an HTTP request line and headers; more is 431 (default %(default)s)",
    )
    limits.add_argument(
        "--max-headers",
        type=_positive_int,
        default=d.max_header_count,
        help="header lines per HTTP request; more is 431 (default %(default)s)",
    )
    limits.add_argument(
        "--header-timeout",
        type=_non_negative_float,
        default=d.header_timeout_seconds,
        help="seconds for a request's headers to arrive, then 408 and close"
        " (default %(default)s; 0 = no limit)",
    )
    limits.add_argument(
        "--max-body-bytes",
        type=_positive_int,
        default=d.max_body_bytes,
        help="bytes of an HTTP request body; more is 413, refused before it is read"
        " (default %(default)s)",
    )
    limits.add_argument(
        "--body-timeout",
        type=_non_negative_float,
        default=d.body_timeout_seconds,
        help="seconds a request body may stall, then 408 and close (default %(default)s;"
        " 0 = no limit)",
    )
    limits.add_argument(
        "--max-tokens-cap",
        type=_non_negative_int,
        default=0,
        help="largest max_tokens a request may ask for; without max_tokens the answer is"
        " cut there (default 0 = the model's context)",
    )
    serve.add_argument(
        "--log-format",
        default=d.log_format,
        choices=["text", "json"],
        help="json: one JSON object per line with connection and request ids (default %(default)s)",
    )


def _api_keys(args: argparse.Namespace) -> tuple[str, ...]:
    keys = list(args.api_key)
    if args.api_key_file:
        try:
            keys.extend(load_key_file(args.api_key_file))
        except (OSError, ValueError) as exc:
            raise ValueError(f"--api-key-file: {exc}") from None
    return tuple(dict.fromkeys(keys))


def config_from_args(args: argparse.Namespace) -> ServerConfig:
    engine = _resolve_engine(args.engine)
    return ServerConfig(
        host=args.host,
        port=args.port,
        engine=engine,
        model_name=args.model_name,
        echo_delay=args.echo_delay,
        request_queue_size=args.queue_size,
        read_ahead_requests=args.read_ahead,
        max_concurrent_per_socket=args.max_concurrent,
        max_frame_bytes=args.max_frame_bytes,
        ws_compression=args.ws_compression,
        sse_keepalive_seconds=args.sse_keepalive,
        shutdown_grace_seconds=args.shutdown_grace,
        log_level=args.log_level,
        api_keys=_api_keys(args),
        allowed_origins=tuple(args.allowed_origin),
        max_in_flight_per_socket=args.max_in_flight,
        max_json_depth=args.max_json_depth,
        max_json_values=args.max_json_values,
        max_stop_strings=args.max_stop_strings,
        max_stop_chars=args.max_stop_chars,
        realtime_max_items=args.realtime_max_items,
        realtime_max_conversation_chars=args.realtime_max_conversation_chars,
        realtime_max_tools=args.realtime_max_tools,
        max_connections=args.max_connections,
        gc_threshold=args.gc_threshold,
        outbound_queue_frames=args.outbound_queue,
        slow_consumer_seconds=args.slow_consumer_timeout,
        idle_timeout_seconds=args.idle_timeout,
        max_session_seconds=args.max_session,
        session_expiry_grace_seconds=args.session_expiry_grace,
        ws_ping_interval=args.ws_ping_interval or None,
        ws_ping_timeout=args.ws_ping_timeout or None,
        max_tokens_cap=args.max_tokens_cap or None,
        max_header_bytes=args.max_header_bytes,
        max_header_count=args.max_headers,
        header_timeout_seconds=args.header_timeout,
        max_body_bytes=args.max_body_bytes,
        body_timeout_seconds=args.body_timeout,
        forwarded_allow_ips=args.forwarded_allow_ips,
        log_format=args.log_format,
        model_dir=args.model,
        chat_template=args.chat_template,
        tool_parser=args.tool_parser,
        reasoning_parser=args.reasoning_parser,
        engine_options=_engine_options(args, engine, chosen=args.engine == "auto"),
        ui=not args.no_ui,
        speculative_timeout_seconds=args.speculative_timeout,
        max_speculative=args.max_speculative,
    )


def open_server_warning(config: ServerConfig) -> str | None:
    """The startup warning for a server without keys on an address others can reach."""
    if config.api_keys or is_loopback(config.host):
        return None
    return (
        f"serving on {config.host} without API keys: anyone who can reach this address"
        " can use the server; pass --api-key or --api-key-file"
    )


def engine_preflight(engine: str) -> str | None:
    """Why `engine` cannot run on this machine, found before anything loads; else None."""
    if engine != "exllamav2":
        return None
    from realtime.engine.auto import can_run_exllamav2

    ok, reason = can_run_exllamav2()
    return None if ok else reason


def serve(config: ServerConfig) -> int:
    from realtime.app import build_app, engine_from_config
    from realtime.gc_tuning import tune_gc
    from realtime.observability.logs import configure_logging
    from realtime.server import RealtimeServer, listening_sockets, uvicorn_config

    configure_logging(config.log_level, config.log_format, config.api_keys)
    warning = open_server_warning(config)
    if warning is not None:
        logging.getLogger("realtime").warning(
            warning, extra={"fields": {"event": "server.open_to_network", "host": config.host}}
        )
    problem = engine_preflight(config.engine)
    if problem is not None:
        print(f"realtime: cannot start engine {config.engine!r}: {problem}", file=sys.stderr)
        return 2
    try:
        # Bound first: a taken port is found before a model is loaded, and before
        # uvicorn would report "Application startup complete" for a server that is not.
        sockets = listening_sockets(config.host, config.port)
    except OSError as exc:
        print(f"realtime: cannot listen on {_address(config)}: {_reason(exc)}", file=sys.stderr)
        return EXIT_CANNOT_LISTEN
    try:
        engine = engine_from_config(config)
        app = build_app(config, engine)
    except (ValueError, ImportError) as exc:
        for sock in sockets:
            sock.close()
        print(f"realtime: cannot start engine {config.engine!r}: {exc}", file=sys.stderr)
        return 2

    def announce(port: int | None) -> None:
        # Printed once listening, so it names the port actually bound (0 = any free).
        base = f"{config.host}:{port if port is not None else config.port}"
        print(
            f"realtime {__version__}: engine {config.engine!r} serving model {engine.info.name!r}"
            f" on http://{base}/v1 and ws://{base}/v1/realtime",
            flush=True,
        )

    server = RealtimeServer(
        uvicorn_config(config, app), app, config.shutdown_grace_seconds, on_listening=announce
    )
    tune_gc(config.gc_threshold)
    server.run(sockets=sockets)
    return 0


#: `realtime serve`'s exit status when it cannot listen on --host/--port (documented in
#: docs/howto/operate-the-server.md with the others: 0 stopped, 2 could not start).
EXIT_CANNOT_LISTEN = 4


def _address(config: ServerConfig) -> str:
    host = f"[{config.host}]" if ":" in config.host else config.host
    return f"{host}:{config.port}"


def _reason(exc: OSError) -> str:
    if exc.errno == errno.EADDRINUSE:
        return "the address is already in use (another server listens there; pick another --port)"
    if exc.errno == errno.EADDRNOTAVAIL:
        return "no network interface has this address (check --host)"
    if exc.errno == errno.EACCES:
        return "permission denied (ports below 1024 need privileges)"
    if isinstance(exc, socket.gaierror):
        return f"cannot resolve the host name ({exc.strerror})"
    return exc.strerror or str(exc)


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    if args.command == "serve":
        try:
            config = config_from_args(args)
        except (OSError, ValueError) as exc:
            parser.error(str(exc))
        return serve(config)
    return 2  # pragma: no cover - argparse enforces a command


if __name__ == "__main__":
    raise SystemExit(main())
