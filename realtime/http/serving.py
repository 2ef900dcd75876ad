"""Serving a generation over HTTP, for both generation routes: SSE or one JSON body.

/v1/chat/completions and /v1/completions differ in parsing and in their pipeline;
serving is the same and lives here: `begin` before the request is read, `respond`
once the pipeline has prepared it.

Around the pipeline this adds what operating the server needs: metrics
(status, tokens, time to first token, inter-token latency), one log line per
request, and shutdown: a request arriving while the server drains gets 503
`shutting_down`; one still running when the grace period ends is cancelled with
an answer (an SSE error event, or a 503 body), not dropped.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import AsyncGenerator, Awaitable, Callable
from contextlib import aclosing
from typing import Any, TypeVar

import orjson
from starlette.requests import Request
from starlette.responses import Response

from realtime.asgi.lifecycle import Lifecycle
from realtime.asgi.responses import ORJSONResponse, error_response
from realtime.chat.prompt_fit import PromptFit
from realtime.http.cache_scope import CacheScope, cache_scope
from realtime.http.sse import CHAT_FRAMING, EventStreamResponse, SseFraming
from realtime.observability.logs import event, field_name
from realtime.observability.metrics import Metrics, RequestTimer
from realtime.pipeline import json_process
from realtime.pipeline.offload import off_loop
from realtime.protocol.errors import (
    EngineError,
    EngineUnavailableError,
    InvalidRequestError,
    RealtimeError,
    ServerShuttingDownError,
)

log = logging.getLogger("realtime.http")

TRANSPORT = "http"


async def read_json_body(request: Request, parse: Callable[[Any], object] | None = None) -> Any:
    """The body, decoded and checked (depth, value count): in the decode process when it
    is large (`json_process`), since decoding a body of megabytes holds the GIL, and so
    every client's event loop, for as long. `parse` is the route's validation of the
    body (a module-level function; `functools.partial` of one pickles too): a large
    body it refuses is refused there, and only the error comes back."""
    body = await request.body()
    limits = request.app.state.http.input_limits
    decoded = await json_process.decode(
        body, limits.max_json_depth, limits.max_json_values, parse=parse
    )
    try:
        return decoded.checked_value()
    except orjson.JSONDecodeError as exc:
        raise InvalidRequestError(f"the request body is not valid JSON: {exc}") from None


Parsed = TypeVar("Parsed")
Prepared = TypeVar("Prepared")


async def read_request(
    request: Request,
    parse: Callable[..., Parsed],
    early: Callable[..., object] | None = None,
) -> Parsed:
    """The body parsed by the route's `parse(data, limits=...)` (a module-level function):
    for a large body, it runs in the decode process first, so a body it refuses is
    refused without the document coming back (`read_json_body`). `early(data,
    limits=..., fit=...)`, when given, runs there instead: `parse`, then the prompt's
    fit to the served model (`realtime.chat.prompt_fit`), when its tokenizer gives one."""
    limits = request.app.state.http.input_limits
    check = functools.partial(parse, limits=limits)
    there: Callable[[Any], object] = check
    if early is not None and len(await request.body()) >= json_process.DECODE_PROCESS_BYTES:
        fit = PromptFit.of(request.app.state.pipeline.engine.info)
        if fit is not None:
            there = functools.partial(early, limits=limits, fit=fit)
    parsed: Parsed = check(await read_json_body(request, there))
    return parsed


async def prepare_off_loop(
    request: Request, prepare: Callable[..., Prepared], *args: Any, **options: Any
) -> Prepared:
    """`prepare(*args, **options)`, in a worker thread when the request's body was large:
    rendering and encoding a long prompt takes as long as its size (`offload.py`)."""
    work = functools.partial(prepare, *args, **options)
    return await off_loop(work, len(await request.body()))


class Outcome:
    """Metrics and the log line of one HTTP generation request, recorded exactly once."""

    def __init__(self, request: Request, started: float):
        state = request.app.state
        self.metrics: Metrics = state.metrics
        self.lifecycle: Lifecycle = state.lifecycle
        self.request_id = request.scope.get("state", {}).get("request_id")
        self.timer = RequestTimer(self.metrics, TRANSPORT, started)
        self.done = False
        #: Set once the request is prepared: its usage so far, and its response id.
        self.usage: Callable[[], dict[str, Any] | None] = lambda: None
        self.response_id: str | None = None
        #: The cache scope an agent's session header chose (`cache_scope.py`), for the log.
        self.cache_scope: str | None = None

    def finish(
        self, status: str, error: RealtimeError | None = None, cause: str | None = None
    ) -> None:
        if self.done:
            return
        self.done = True
        m = self.metrics
        m.requests.labels(TRANSPORT, status).inc()
        usage = self.usage()
        m.usage(TRANSPORT, usage)
        if status == "cancelled":
            cause = cause or ("shutdown" if self.lifecycle.expired.is_set() else "disconnect")
            m.cancellations.labels(TRANSPORT, cause).inc()
        if isinstance(error, (EngineError, EngineUnavailableError)):
            m.engine_errors.labels(error.code or "engine_error").inc()
        event(
            log,
            "request.end",
            transport=TRANSPORT,
            request_id=self.request_id,
            id=self.response_id,
            cache_scope=self.cache_scope,
            status=status,
            cause=cause,
            error_code=error.code if error is not None else None,
            error_param=field_name(error.param) if error is not None else None,
            prompt_tokens=usage["prompt_tokens"] if usage else None,
            completion_tokens=usage["completion_tokens"] if usage else None,
            ttft_ms=self.timer.ttft_ms,
            duration_ms=round((time.perf_counter() - self.timer.started) * 1000, 3),
        )


def scope_of(request: Request, outcome: Outcome) -> CacheScope:
    """The request's cache scope, from an agent's session header (`cache_scope.py`), for
    every generation route; its label goes into the request's log line. Raises
    InvalidRequestError (a malformed header)."""
    keys: bool = request.app.state.http.keys_enabled
    scope = cache_scope(request.scope["headers"], keys_enabled=keys)
    outcome.cache_scope = scope.label
    return scope


def begin(request: Request) -> Outcome:
    """Start accounting for a generation request; refuse it while the server drains."""
    outcome = Outcome(request, time.perf_counter())
    if request.app.state.lifecycle.draining:
        error = ServerShuttingDownError("server shutting down; send the request to another server")
        outcome.finish("rejected", error=error)
        raise error
    return outcome


async def respond(
    request: Request,
    outcome: Outcome,
    streaming: bool,
    *,
    stream: Callable[[], AsyncGenerator[dict[str, Any], None]],
    complete: Callable[[], Awaitable[dict[str, Any]]],
    framing: SseFraming = CHAT_FRAMING,
    errors: Callable[[RealtimeError], Response] = error_response,
) -> Response:
    """SSE or one JSON body for a prepared request, with disconnects and shutdown handled.
    `errors` renders the shutdown's error body (the API's own shape)."""
    state = request.app.state
    lifecycle: Lifecycle = state.lifecycle
    if streaming:
        keepalive = state.http.sse_keepalive_seconds
        # A client that hangs up cancels the stream, which closes the chunk iterator
        # and with it the engine's.
        return EventStreamResponse(
            _observed(stream(), outcome),
            keepalive_seconds=keepalive,
            stop=lifecycle.expired,
            framing=framing,
        )
    gauge = outcome.metrics.in_flight.labels(TRANSPORT)
    gauge.inc()
    try:
        result = await _until_disconnected(request, complete(), lifecycle.expired)
    except RealtimeError as exc:
        outcome.finish("error", exc)
        raise
    finally:
        gauge.dec()
    if result is _DISCONNECTED:
        outcome.finish("cancelled", cause="disconnect")
        return Response(status_code=499)  # nobody is listening any more
    if result is _SHUTDOWN:
        error = ServerShuttingDownError("server shutting down; the request was cancelled")
        outcome.finish("cancelled", cause="shutdown")
        return errors(error)
    outcome.finish("completed")
    return ORJSONResponse(result)


async def _observed(
    chunks: AsyncGenerator[dict[str, Any], None], outcome: Outcome
) -> AsyncGenerator[dict[str, Any], None]:
    """The chunks, timed; records the request's outcome however the stream ends."""
    gauge = outcome.metrics.in_flight.labels(TRANSPORT)
    gauge.inc()
    status, error = "cancelled", None
    try:
        async with aclosing(chunks):
            async for chunk in chunks:
                outcome.timer.chunk(chunk)
                yield chunk
        status = "completed"
    except RealtimeError as exc:
        status, error = "error", exc
        raise
    except Exception:
        status = "error"
        raise
    finally:
        gauge.dec()
        outcome.finish(status, error)


_DISCONNECTED: Any = object()
_SHUTDOWN: Any = object()


async def _until_disconnected(request: Request, work: Any, stop: asyncio.Event) -> Any:
    """Run `work`, but cancel it (stopping the engine) if the client hangs up or shutdown ends."""
    task = asyncio.ensure_future(work)
    watcher = asyncio.ensure_future(_wait_disconnect(request))
    stopper = asyncio.ensure_future(stop.wait())
    try:
        done, _ = await asyncio.wait({task, watcher, stopper}, return_when=asyncio.FIRST_COMPLETED)
        if task in done:
            return task.result()
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        return _DISCONNECTED if watcher in done else _SHUTDOWN
    finally:
        watcher.cancel()
        stopper.cancel()
        task.cancel()


async def _wait_disconnect(request: Request) -> None:
    while True:
        message = await request.receive()
        if message["type"] == "http.disconnect":
            return
