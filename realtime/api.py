"""The library surface: serve an engine object of your own from Python.

`realtime serve` builds an engine from flags; these two functions take one you
built yourself (anything that follows `realtime.engine.base.Engine`) and the
same `ServerConfig` the command line fills:

- `create_app(engine, config)` is the whole server as an ASGI app: run it under
  any ASGI server, or mount it in a Starlette or FastAPI app (whose lifespan must
  then run this app's, which starts and closes the engine; see
  docs/howto/write-an-engine.md);
- `serve(engine, config)` runs it the way `realtime serve` does, blocking: uvicorn
  with the request limits and the draining shutdown on SIGTERM, SIGINT and SIGHUP.

Everything the top-level `realtime` package exports is listed in `__all__` there;
those names are the stable API.
"""

from __future__ import annotations

import logging

from starlette.applications import Starlette

from realtime.app import build_app
from realtime.asgi.auth import is_loopback
from realtime.asgi.body_limit import BodyLimit
from realtime.config import ServerConfig
from realtime.engine.base import Engine
from realtime.engine.registry import not_an_engine
from realtime.observability.logs import configure_logging
from realtime.server import RealtimeServer, listening_sockets, tune_gc, uvicorn_config

log = logging.getLogger("realtime")


def create_app(engine: Engine, config: ServerConfig | None = None) -> Starlette:
    """The server for `engine` as an ASGI app (HTTP routes, `/v1/realtime`, the page).

    The engine is started by the app's lifespan and closed when it ends. The request
    body limits (`max_body_bytes`, `body_timeout_seconds`) are enforced by the app
    itself, whatever server runs it; the header limits are that server's. Raises
    TypeError when `engine` is not an engine, ValueError for a bad setting (an
    unknown parser name, say).
    """
    problem = not_an_engine(engine)
    if problem is not None:
        raise TypeError(f"create_app() needs an engine, got {problem}")
    config = config if config is not None else ServerConfig()
    app = build_app(config, engine)
    # Under another ASGI server nothing else bounds the body (`realtime serve`'s protocol
    # does it before the app): the app does it itself.
    app.add_middleware(
        BodyLimit, max_body_bytes=config.max_body_bytes, body_timeout=config.body_timeout_seconds
    )
    return app


def serve(engine: Engine, config: ServerConfig | None = None) -> None:
    """Serve `engine` on `config.host:config.port` until SIGTERM/SIGINT/SIGHUP (blocking).

    As `realtime serve` does: the port is bound before the engine loads (OSError
    when it cannot be), shutdown drains for `config.shutdown_grace_seconds`, and
    logging is set up from `config.log_level` and `config.log_format` unless the
    process has configured the root logger already.
    """
    config = config if config is not None else ServerConfig()
    if not logging.getLogger().handlers:
        configure_logging(config.log_level, config.log_format, config.api_keys)
    if not config.api_keys and not is_loopback(config.host):
        log.warning(
            "serving on %s without API keys: anyone who can reach this address can use"
            " the server; set ServerConfig.api_keys",
            config.host,
        )
    sockets = listening_sockets(config.host, config.port)
    try:
        app = create_app(engine, config)
    except BaseException:
        for sock in sockets:
            sock.close()
        raise

    def announce(port: int | None) -> None:
        log.info(
            "serving model %r on http://%s:%s/v1",
            engine.info.name,
            config.host,
            port if port is not None else config.port,
        )

    server = RealtimeServer(
        uvicorn_config(config, app), app, config.shutdown_grace_seconds, on_listening=announce
    )
    tune_gc(config.gc_threshold)
    server.run(sockets=sockets)
