"""Build the ASGI application: routes, access control, metrics, and the engine's lifespan.

The socket protocols are registered here, one line each (`SOCKET_PROTOCOLS`): the
route a protocol is served on, and how its handshake selector is made from what
the app builds (`ServerParts`). A protocol's own package (`realtime.dialects`)
holds everything else.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.routing import BaseRoute, Route, WebSocketRoute

from realtime.asgi.access import OPEN_PATHS, AccessGuard
from realtime.asgi.auth import ApiKeys, OriginPolicy
from realtime.asgi.lifecycle import Lifecycle
from realtime.asgi.lifespan_errors import OneLineLifespanErrors
from realtime.asgi.responses import ERROR_BODIES
from realtime.config import ServerConfig, constraint_limits, input_limits
from realtime.config.values import store_url_refusal
from realtime.consumer_settings import http_settings, socket_settings
from realtime.dialects.chat.selector import chat_frames
from realtime.dialects.messages.errors import error_body as anthropic_error_body
from realtime.dialects.realtime_events.limits import EventLimits
from realtime.dialects.realtime_events.selector import realtime_events
from realtime.dialects.responses import ResponsesService
from realtime.dialects.responses.background import BackgroundLimits
from realtime.dialects.responses.conversations import ConversationLimits
from realtime.dialects.responses.dialect import SocketLimits
from realtime.dialects.responses.reasoning_seal import ReasoningSeal
from realtime.dialects.responses.selector import responses_mode
from realtime.engine.auto import choose_engine
from realtime.engine.base import Engine
from realtime.engine.process.proxy import EngineProxy
from realtime.engine.process.spec import SINGLE_PROCESS_ONLY, EngineSpec, runs_in_process
from realtime.engine.registry import EngineSource, build_engine, resolve_engine
from realtime.engine.snapshot import ReportsSnapshot
from realtime.http import conversations as conversation_routes
from realtime.http.background_runs import BackgroundRuns
from realtime.http.chat_completions import chat_completions
from realtime.http.completions import completions
from realtime.http.errors import handle_http_exception, handle_realtime_error, openai_errors
from realtime.http.messages import anthropic_errors, count_message_tokens, create_message
from realtime.http.metrics import metrics as metrics_route
from realtime.http.models import get_model, health, list_models, ready
from realtime.http.observe import HttpObserver
from realtime.http.responses import (
    cancel_response,
    compact_response,
    create_response,
    delete_response,
    get_response,
    list_input_items,
)
from realtime.http.tokenize import detokenize_route, tokenize_route
from realtime.http.ui import ui_routes
from realtime.observability.metrics import Metrics
from realtime.observability.vllm_metrics import VllmMetrics
from realtime.pipeline import ChatPipeline
from realtime.pipeline.completions import CompletionPipeline
from realtime.pipeline.offload import loop_first_switching
from realtime.protocol.errors import RealtimeError
from realtime.session.dialect import DialectSelector
from realtime.store import MemoryResponseStore, ResponseStore
from realtime.store.base import StoreError
from realtime.store.dsn import is_postgres_url
from realtime.store.postgres import PostgresResponseStore
from realtime.store.sqlite import SQLiteResponseStore
from realtime.ws.endpoint import session_endpoint
from realtime.ws.hub import SessionHub

log = logging.getLogger("realtime")


def _engine_options(config: ServerConfig) -> tuple[EngineSource, dict[str, Any]]:
    """The engine the config names (`auto` chosen here) and its factory's keywords."""
    name = config.engine
    if name == "auto":
        name, reason = choose_engine()
        log.info("--engine auto: %s", reason)
    source = resolve_engine(name)  # a built-in named by its module path is that built-in
    name = source.name
    options: dict[str, Any] = {}
    if config.model_name:
        options["model_name"] = config.model_name
    if name == "echo":
        options["delay"] = config.echo_delay
        options["tokens_per_step"] = config.echo_tokens_per_step
    else:
        if config.model_dir:
            options["model_dir"] = config.model_dir
        elif name in ("cpu", "exllamav2"):  # scripted and plug-ins may go without one
            raise ValueError(f"the {name} engine needs --model DIR (a model directory)")
        if config.chat_template:
            options["chat_template"] = config.chat_template
    options.update(config.engine_options)
    return source, options


def engine_process_spec(config: ServerConfig) -> EngineSpec | None:
    """What the engine process builds, or None when the engine runs in the server's
    process (`--engine-process`); ValueError for a combination that cannot be."""
    source, options = _engine_options(config)
    if not runs_in_process(source.name, config.engine_process):
        if config.api_servers > 1 and source.name not in SINGLE_PROCESS_ONLY:
            raise ValueError(
                "--api-servers above 1 needs the engine in a process of its own"
                " (or the echo or scripted engine, which each front end runs itself)"
            )
        return None
    return EngineSpec(source.name, options, log_level=config.log_level)


def engine_from_config(config: ServerConfig, *, engine_address: str | None = None) -> Engine:
    """Build (not start) the configured engine; ValueError/ImportError say what is wrong
    (`EngineLoadError`, a ValueError, for engines from outside the package).

    With the engine in a process of its own (`--engine-process`) this is the proxy
    that starts that process, or with `engine_address` attaches to one running."""
    spec = engine_process_spec(config)
    if spec is not None:
        return EngineProxy(spec, address=engine_address)
    source, options = _engine_options(config)
    return build_engine(source, **options)


@dataclass(frozen=True, slots=True)
class ServerParts:
    """What the app builds once; each socket protocol's selector is made from it."""

    config: ServerConfig
    pipeline: ChatPipeline
    responses: ResponsesService


@dataclass(frozen=True, slots=True)
class SocketProtocol:
    """One protocol on a socket route: the route's path, and how its handshake selector
    is made from the server's parts when the app is built."""

    path: str
    selector: Callable[[ServerParts], DialectSelector]


def event_limits(config: ServerConfig) -> EventLimits:
    """The Realtime event sessions' limits, from the server's settings."""
    return EventLimits(
        max_items=config.realtime_max_items,
        max_conversation_chars=config.realtime_max_conversation_chars,
        max_conversation_bytes=config.realtime_max_conversation_bytes,
        max_item_parts=config.realtime_max_item_parts,
        max_tools=config.realtime_max_tools,
        max_active_responses=config.max_concurrent_per_socket,
    )


def responses_socket_limits(config: ServerConfig) -> SocketLimits:
    """WebSocket mode's per-socket limits, from the server's settings."""
    return SocketLimits(
        max_age_seconds=config.responses_ws_max_age_seconds,
        max_streams=config.responses_ws_max_streams,
        memory_bytes=config.responses_ws_memory_bytes,
    )


#: Every socket protocol the server speaks, one line each. A route tries its protocols'
#: selectors in this order and the first that claims a handshake picks its dialect.
#: Adding a protocol: its package under realtime/dialects/, and its line here.
SOCKET_PROTOCOLS: tuple[SocketProtocol, ...] = (
    # /v1/realtime: the Realtime events with `?model=`, chat frames otherwise
    SocketProtocol("/v1/realtime", lambda p: realtime_events(p.pipeline, event_limits(p.config))),
    SocketProtocol("/v1/realtime", lambda p: chat_frames(p.pipeline)),
    # /v1/responses (WebSocket): the Responses API's WebSocket mode
    SocketProtocol(
        "/v1/responses",
        lambda p: responses_mode(
            p.responses, responses_socket_limits(p.config), keyed=bool(p.config.api_keys)
        ),
    ),
)


def socket_paths(protocols: Sequence[SocketProtocol] = SOCKET_PROTOCOLS) -> list[str]:
    """The socket routes' paths, each once, in order (docs/asyncapi.yaml's channels)."""
    return list(dict.fromkeys(protocol.path for protocol in protocols))


def socket_routes(
    parts: ServerParts, protocols: Sequence[SocketProtocol] = SOCKET_PROTOCOLS
) -> list[BaseRoute]:
    """One WebSocket route per path, its selectors in the protocols' order."""
    return [
        WebSocketRoute(
            path,
            session_endpoint(*[p.selector(parts) for p in protocols if p.path == path]),
        )
        for path in socket_paths(protocols)
    ]


def routes() -> list[BaseRoute]:
    """The HTTP route table (also the source of docs/openapi.json's paths)."""
    return [
        Route("/v1/chat/completions", openai_errors(chat_completions), methods=["POST"]),
        Route("/v1/completions", openai_errors(completions), methods=["POST"]),
        Route("/v1/responses", openai_errors(create_response), methods=["POST"]),
        Route("/v1/responses/compact", openai_errors(compact_response), methods=["POST"]),
        Route("/v1/responses/{response_id}", openai_errors(get_response), methods=["GET"]),
        Route("/v1/responses/{response_id}", openai_errors(delete_response), methods=["DELETE"]),
        Route(
            "/v1/responses/{response_id}/input_items",
            openai_errors(list_input_items),
            methods=["GET"],
        ),
        Route(
            "/v1/responses/{response_id}/cancel", openai_errors(cancel_response), methods=["POST"]
        ),
        *conversations_routes(),
        Route("/v1/messages", anthropic_errors(create_message), methods=["POST"]),
        Route(
            "/v1/messages/count_tokens", anthropic_errors(count_message_tokens), methods=["POST"]
        ),
        Route("/v1/models", openai_errors(list_models), methods=["GET"]),
        Route("/tokenize", openai_errors(tokenize_route), methods=["POST"]),
        Route("/detokenize", openai_errors(detokenize_route), methods=["POST"]),
        Route("/v1/models/{model_id:path}", openai_errors(get_model), methods=["GET"]),
        Route("/health", openai_errors(health), methods=["GET"]),
        Route("/ready", openai_errors(ready), methods=["GET"]),
        Route("/metrics", openai_errors(metrics_route), methods=["GET"]),
    ]


def conversations_routes() -> list[BaseRoute]:
    """The Conversations API (`realtime.http.conversations`)."""
    http = conversation_routes
    one = "/v1/conversations/{conversation_id}"
    item = one + "/items/{item_id}"
    return [
        Route("/v1/conversations", openai_errors(http.create_conversation), methods=["POST"]),
        Route(one, openai_errors(http.get_conversation), methods=["GET"]),
        Route(one, openai_errors(http.update_conversation), methods=["POST"]),
        Route(one, openai_errors(http.delete_conversation), methods=["DELETE"]),
        Route(one + "/items", openai_errors(http.list_items), methods=["GET"]),
        Route(one + "/items", openai_errors(http.create_items), methods=["POST"]),
        Route(item, openai_errors(http.get_item), methods=["GET"]),
        Route(item, openai_errors(http.delete_item), methods=["DELETE"]),
    ]


def response_store(config: ServerConfig) -> ResponseStore:
    """The store of `store: true` responses: PostgreSQL at a postgresql:// URL, SQLite
    under a directory, or memory. Raises ValueError when it cannot be opened."""
    age, size = config.response_store_max_age_seconds, config.response_store_max_bytes
    location = config.response_store_dir
    if location is None:
        log.info("stored responses are kept in memory (lost on restart; see --response-store)")
        return MemoryResponseStore(max_age_seconds=age, max_bytes=size)
    refusal = store_url_refusal(location)
    if refusal is not None:  # the command line refuses it first; this is for embedders
        raise ValueError(f"response store: {refusal}")
    if is_postgres_url(location):
        store = PostgresResponseStore(location, max_age_seconds=age, max_bytes=size)
        log.info("stored responses are kept in PostgreSQL at %s", store.where)
        return store
    return SQLiteResponseStore(location, max_age_seconds=age, max_bytes=size)


def build_app(
    config: ServerConfig,
    engine: Engine | None = None,
    *,
    protocols: Sequence[SocketProtocol] = SOCKET_PROTOCOLS,
    metrics: Metrics | None = None,
) -> Starlette:
    """The whole server as one ASGI app. Pass `engine` to serve one you built yourself,
    `protocols` to speak other socket protocols than `SOCKET_PROTOCOLS`, and `metrics`
    (a front end of several: its `FleetMetrics`)."""
    engine = engine if engine is not None else engine_from_config(config)
    metrics = metrics if metrics is not None else Metrics()
    # vLLM's metric names, for routers and autoscalers; the engine's state is read
    # through its snapshot() at scrape time.
    vllm = VllmMetrics(
        metrics.registry,
        engine.info.name,
        engine.info.context_length,
        engine.snapshot if isinstance(engine, ReportsSnapshot) else None,
    )
    # Parser names are checked here, before anything listens (UnknownParserError is a
    # ValueError listing the valid names).
    pipeline = ChatPipeline(
        engine,
        tool_parser=config.tool_parser,
        reasoning_parser=config.reasoning_parser,
        speculative_timeout=config.speculative_timeout_seconds,
        max_speculative=config.max_speculative,
        max_tokens_cap=config.max_tokens_cap,
        max_tokens_policy=config.max_tokens_policy,
        constraint_limits=constraint_limits(config),
        meter=vllm,
    )
    responses = ResponsesService(
        pipeline,
        response_store(config),
        limits=input_limits(config),
        seal=ReasoningSeal(config.reasoning_key),
        conversation_limits=ConversationLimits(
            max_items_per_call=config.conversation_max_items_per_call,
            max_items=config.conversation_max_items,
        ),
    )
    background = BackgroundRuns(
        responses,
        runner=config.runner_id,
        limits=BackgroundLimits(config.max_background, config.max_background_per_key),
        max_events=config.background_max_events,
    )
    hub = SessionHub(config.max_connections)
    ui = ui_routes() if config.ui else []
    sockets = socket_routes(ServerParts(config, pipeline, responses), protocols)
    table = [*routes(), *sockets, *ui]
    # The Messages API's errors in Anthropic's body, also where no route has run yet.
    ERROR_BODIES["/v1/messages"] = anthropic_error_body
    #: Paths served without a key (and without the Origin check); add to it at will.
    #: The page loads before its user has typed a key; its API calls still need one.
    open_paths = set(OPEN_PATHS) | {route.path for route in ui}
    if config.open_metrics:
        open_paths.add("/metrics")

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        await engine.start()
        label = getattr(engine, "label", type(engine).__name__)  # a proxy names what it runs
        log.info("serving model %r on engine %s", engine.info.name, label)
        # Background responses this server left unfinished when it last stopped: failed.
        try:
            await background.recover()
        except StoreError as exc:
            log.warning("could not fail the background responses left unfinished: %s", exc)
        try:
            with loop_first_switching():  # input-sized work in threads yields to the loop
                yield
        finally:
            await background.stop()  # none left running: each ends failed, and is stored
            await pipeline.aclose()  # no warm-up may outlive the engine
            await engine.close()
            await responses.aclose()  # pending response writes reach the disk

    app = Starlette(
        routes=table,
        middleware=[
            Middleware(OneLineLifespanErrors),
            Middleware(HttpObserver, metrics=metrics, routes=table),
            Middleware(
                AccessGuard,
                keys=ApiKeys(config.api_keys),
                origins=OriginPolicy(config.allowed_origins),
                metrics=metrics,
                open_paths=open_paths,
            ),
        ],
        exception_handlers={
            RealtimeError: handle_realtime_error,
            HTTPException: handle_http_exception,
        },
        lifespan=lifespan,
    )
    # Starlette would answer a path with a trailing slash it lacks by a redirect to the
    # other spelling, built from the Host header (an open redirect): it is a 404.
    app.router.redirect_slashes = False
    metrics.track(metrics.ws_open, lambda: len(hub))
    metrics.track(metrics.queue_depth, lambda: sum(s.queue_depth for s in hub))
    metrics.track(metrics.in_flight.labels("ws"), lambda: sum(s.accepted for s in hub))
    metrics.track(metrics.background, lambda: background.running)
    app.state.http = http_settings(config)
    app.state.socket_settings = socket_settings(config)
    app.state.pipeline = pipeline
    app.state.completions = CompletionPipeline(pipeline)
    app.state.responses = responses
    app.state.background = background
    app.state.hub = hub
    app.state.metrics = metrics
    app.state.lifecycle = Lifecycle()
    app.state.open_paths = open_paths
    return app
