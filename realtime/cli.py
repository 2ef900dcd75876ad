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
from realtime.asgi.auth import is_loopback, load_key_file
from realtime.config import ServerConfig
from realtime.config.flags import FLAGS, GROUPS
from realtime.engine.registry import EngineLoadError, resolve_engine


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="realtime", description=__doc__)
    parser.add_argument("--version", action="version", version=f"realtime {__version__}")
    commands = parser.add_subparsers(dest="command", required=True)
    serve = commands.add_parser(
        "serve",
        help="run the server",
        # A short usage line: argparse's own lists all 60 flags, 60 lines above a usage error.
        usage="%(prog)s [-h] [OPTIONS]",
        description="Serve a model over /v1/realtime and the OpenAI-compatible HTTP API"
        " (the echo engine unless --engine says otherwise). docs/flags.md has every"
        " option in tables.",
    )
    add_flags(serve)
    return parser


def add_flags(serve: argparse.ArgumentParser) -> None:
    """Every flag of `FLAGS`, in its `--help` group, in the table's order."""
    groups: dict[str, Any] = {"server": serve}
    for name in GROUPS[1:]:
        groups[name] = serve.add_argument_group(name)
    for flag in FLAGS:
        options: dict[str, Any] = {"help": flag.help, "default": flag.default()}
        if flag.kind in ("switch", "off"):
            options["action"] = "store_true"
        else:  # None for any of these is argparse's own default
            options.update(type=flag.value, choices=flag.choices, metavar=flag.metavar)
            if flag.kind == "repeat":
                options["action"] = "append"
        groups[flag.group].add_argument(flag.option, **options)


def _engine_options(args: argparse.Namespace, engine: str, *, chosen: bool) -> dict[str, Any]:
    """The given flags that belong to `engine`, as its constructor's keywords.

    A flag for another engine is an error, unless `--engine auto` chose this one:
    then the flags for the engine it did not choose are ignored, so one command
    line can carry settings for both.
    """
    options: dict[str, Any] = {}
    for flag in FLAGS:
        value = getattr(args, flag.dest)
        if flag.engine is None or value is None:
            continue
        if engine not in flag.engine.engines:
            if chosen:
                continue
            owners = " and ".join(flag.engine.engines)
            raise ValueError(f"{flag.option} applies to the {owners} engine only")
        if flag.engine.values:
            value = flag.engine.values[value]
        options[flag.engine.keyword] = value
    return options


def _with_engine_option_flags(
    options: dict[str, Any], pairs: list[tuple[str, Any]]
) -> dict[str, Any]:
    """The engine flags' keywords plus each `--engine-option`; a keyword given twice is an error."""
    for key, value in pairs:
        if key in options:
            raise ValueError(f"--engine-option {key}: the engine option {key!r} is given twice")
        options[key] = value
    return options


def _resolve_engine(name: str) -> tuple[str, str | None]:
    """`--engine auto` becomes the engine it picks here, before anything else reads it,
    with why (logged once logging is set up); a plug-in is imported (EngineLoadError when
    it cannot be) and a built-in named by its module path becomes its name."""
    if name != "auto":
        return resolve_engine(name).name, None
    from realtime.engine.auto import choose_engine

    return choose_engine()


def _api_keys(keys: tuple[str, ...], key_file: str | None) -> tuple[str, ...]:
    """`--api-key`s, then those of `--api-key-file`, each once."""
    found = list(keys)
    if key_file:
        try:
            found.extend(load_key_file(key_file))
        except (OSError, ValueError) as exc:
            raise ValueError(f"--api-key-file: {exc}") from None
    return tuple(dict.fromkeys(found))


def config_from_args(args: argparse.Namespace) -> ServerConfig:
    """The `ServerConfig` the parsed flags describe (`--engine auto` resolved here)."""
    return _config_and_choice(args)[0]


def _config_and_choice(args: argparse.Namespace) -> tuple[ServerConfig, str | None]:
    """`config_from_args`, and why `--engine auto` chose its engine (None: not auto)."""
    values = {f.field: f.to_config(getattr(args, f.dest)) for f in FLAGS if f.field is not None}
    values["engine"], choice = _resolve_engine(values["engine"])
    values["api_keys"] = _api_keys(values["api_keys"], args.api_key_file)
    values["engine_options"] = _with_engine_option_flags(
        _engine_options(args, values["engine"], chosen=args.engine == "auto"), args.engine_option
    )
    return ServerConfig(**values), choice


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


def serve(config: ServerConfig, engine_choice: str | None = None) -> int:
    """Run the server until it is stopped; `engine_choice`: why `--engine auto` chose
    the engine, logged first."""
    from realtime.allocator import keep_freed_memory
    from realtime.app import build_app, engine_from_config, engine_process_spec
    from realtime.engine.process.launcher import EngineProcess, EngineStartError
    from realtime.observability.logs import configure_logging
    from realtime.process_priority import yield_to_engine
    from realtime.server import (
        EXIT_ENGINE_DIED,
        RealtimeServer,
        listening_sockets,
        tune_gc,
        uvicorn_config,
    )

    secrets = (*config.api_keys, *((config.reasoning_key,) if config.reasoning_key else ()))
    configure_logging(config.log_level, config.log_format, secrets)
    if engine_choice is not None:
        logging.getLogger("realtime").info("--engine auto: %s", engine_choice)
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
    # Before any process is started: they inherit the allocator's settings.
    keep_freed_memory(config.allocator_keep_mib)
    engine_process: EngineProcess | None = None
    try:
        # The engine process first: its model loads before anything is served, and a
        # model that cannot load is one line and exit 2, as in-process.
        spec = engine_process_spec(config)
        if spec is not None:
            engine_process = EngineProcess(spec)
            engine_process.spawn()  # it loads the model while this process builds the app
            # Then the front ends (this process, and the processes it starts from here
            # on) go below the engine in CPU priority: see process_priority.py.
            yield_to_engine(config.front_end_niceness)
        address = engine_process.address if engine_process is not None else None
        engine = engine_from_config(config, engine_address=address)
    except (ValueError, ImportError) as exc:
        for sock in sockets:
            sock.close()
        if engine_process is not None:
            engine_process.stop_sync()
        print(f"realtime: cannot start engine {config.engine!r}: {exc}", file=sys.stderr)
        return 2
    app = None
    try:  # the rest (parsers, the response store) is not the engine's fault
        # Several front ends build their own apps; this process only supervises them.
        app = build_app(config, engine) if config.api_servers == 1 else None
    except ValueError as exc:
        for sock in sockets:
            sock.close()
        if engine_process is not None:
            engine_process.stop_sync()
        print(f"realtime: cannot start: {exc}", file=sys.stderr)
        return 2
    if engine_process is not None:
        try:
            engine_process.wait_ready()
        except EngineStartError as exc:
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

    if config.api_servers > 1:
        from realtime.front_ends import serve_front_ends

        return serve_front_ends(config, sockets, engine_process, announce)
    assert app is not None
    server = RealtimeServer(
        uvicorn_config(config, app), app, config.shutdown_grace_seconds, on_listening=announce
    )
    tune_gc(config.gc_threshold)
    try:
        server.run(sockets=sockets)
    finally:
        if engine_process is not None:
            engine_process.stop_sync()
    return EXIT_ENGINE_DIED if server.engine_died else 0


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
            config, engine_choice = _config_and_choice(args)
        except EngineLoadError as exc:  # one line, no usage: the engine spec was understood
            print(f"realtime: cannot load engine {args.engine!r}: {exc}", file=sys.stderr)
            return 2
        except (OSError, ValueError) as exc:
            parser.error(str(exc))
        return serve(config, engine_choice)
    return 2  # pragma: no cover - argparse enforces a command


if __name__ == "__main__":
    raise SystemExit(main())
