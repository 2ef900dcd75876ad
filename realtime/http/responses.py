"""The Responses API over HTTP: POST /v1/responses (JSON or SSE) and the stored responses.

    POST   /v1/responses                       create (`stream: true`: SSE events)
    POST   /v1/responses/compact               a context compacted into a compaction item
    GET    /v1/responses/{id}                  the stored Response (`?stream=true`: a
                                               background response's events, `background.py`)
    GET    /v1/responses/{id}/input_items      its input items, a page at a time
    DELETE /v1/responses/{id}                  forget it
    POST   /v1/responses/{id}/cancel           cancel a background response (others: 400)

The logic is `realtime.dialects.responses` (one run, shared with WebSocket mode); this module
adds HTTP: the body, query parameters, the caller's key (whose fingerprint owns
what it stores), and the SSE framing of the Responses events: each event is
`event: <type>` + `data: <json>`, and the stream ends after the terminal event,
without `[DONE]`. Serving (draining, metrics, disconnects, shutdown) is
`serving.py`'s, shared with the chat routes. `prompt_cache_key` is the request's
cache session, scoped to the caller's key (`cache_scope.py`). A `store: false` response over
HTTP is kept nowhere: nobody could ever ask for it again.
"""

from __future__ import annotations

import functools
from typing import Any

from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response

from realtime.asgi.auth import bearer_token
from realtime.asgi.responses import ORJSONResponse
from realtime.dialects.responses.request import ResponsesRequest, parse_responses_request
from realtime.dialects.responses.service import PreparedResponse, ResponsesService
from realtime.http.background import create_background, resume, runs_of, stream_query
from realtime.http.cache_scope import CacheScope, field_scope
from realtime.http.list_query import check_includes, list_page, query_params
from realtime.http.serving import Outcome, begin, read_json_body, respond, scope_of
from realtime.http.sse import SseFraming, encode_named_event
from realtime.pipeline.offload import off_loop
from realtime.protocol.errors import RealtimeError


def _framing(prepared: PreparedResponse) -> SseFraming:
    def error(exc: RealtimeError) -> bytes:
        return encode_named_event(prepared.events.error_event(exc))

    return SseFraming(encode=encode_named_event, done=None, error=error)


def _service(request: Request) -> ResponsesService:
    service: ResponsesService = request.app.state.responses
    return service


def _cache_scope(request: Request, parsed: ResponsesRequest, outcome: Outcome) -> CacheScope:
    """The request's cache session, scoped to the caller's key: `prompt_cache_key` when
    the body names one (the client's explicit choice), else an agent's session header."""
    if parsed.prompt_cache_key is None:
        return scope_of(request, outcome)
    scope = field_scope(
        parsed.prompt_cache_key,
        request.scope["headers"],
        keys_enabled=request.app.state.http.keys_enabled,
        param="prompt_cache_key",
    )
    outcome.cache_scope = scope.label
    return scope


def owner_of(request: Request, service: ResponsesService) -> str | None:
    """The caller's owner fingerprint: its key's, when the server has keys."""
    if not request.app.state.http.keys_enabled:
        return None
    return service.owner(bearer_token(request.scope["headers"]))


async def create_response(request: Request) -> Response:
    service = _service(request)
    outcome = begin(request)
    try:
        # A large body the request model refuses is refused in the decode process.
        body = await read_json_body(
            request, functools.partial(parse_responses_request, limits=service.limits)
        )
        # Validating every input item of a large body takes as long as its size: off the loop.
        size = len(await request.body())
        parsed = await off_loop(functools.partial(service.parse, body), size)
        scope = _cache_scope(request, parsed, outcome)
        if parsed.background:
            return await create_background(
                request, parsed, outcome, scope, owner_of(request, service), size
            )
        streaming = bool(parsed.stream)
        # The body's size, with the stored history's, puts a large prompt off the loop.
        prepared = await service.prepare(
            parsed,
            stream=streaming,
            owner=owner_of(request, service),
            session_id=scope.session_id,
            cache_salt=scope.cache_salt,
            size=size,
        )
    except RealtimeError as exc:
        outcome.finish("error", error=exc)
        raise
    except ClientDisconnect:  # gone during the body upload; answered by `openai_errors`
        outcome.finish("cancelled", cause="disconnect")
        raise
    outcome.usage, outcome.response_id = prepared.usage, prepared.id
    # The time to first token is measured on the chat chunks under the events.
    on_step = outcome.timer.step
    return await respond(
        request,
        outcome,
        streaming,
        stream=lambda: service.events(prepared, on_step=on_step),
        complete=lambda: service.complete(prepared, on_step=on_step),
        framing=_framing(prepared),
    )


async def compact_response(request: Request) -> Response:
    """The context summarized by the served model (`ResponsesService.compact`); a client
    that hangs up cancels the summary's generation (`respond`'s disconnect watcher)."""
    service = _service(request)
    outcome = begin(request)
    try:
        body = await read_json_body(request)
    except RealtimeError as exc:
        outcome.finish("error", error=exc)
        raise
    owner = owner_of(request, service)
    size = len(await request.body())
    return await respond(
        request,
        outcome,
        False,
        stream=_no_stream,
        complete=lambda: service.compact(body, owner, size),
    )


def _no_stream() -> Any:  # pragma: no cover - compaction answers one JSON body
    raise AssertionError("compaction does not stream")


async def get_response(request: Request) -> Response:
    service = _service(request)
    query = query_params(request, {"include", "include_obfuscation", "starting_after", "stream"})
    check_includes(request)
    stream, after = stream_query(query)
    owner = owner_of(request, service)
    response = await service.retrieve(request.path_params["response_id"], owner)
    if stream:
        return await resume(request, response, owner, after)
    return ORJSONResponse(response)


async def list_input_items(request: Request) -> Response:
    service = _service(request)
    page_query = list_page(request)
    page = await service.input_items(
        request.path_params["response_id"],
        owner_of(request, service),
        after=page_query.after,
        limit=page_query.limit,
        order=page_query.order,
    )
    return ORJSONResponse(page)


async def delete_response(request: Request) -> Response:
    service = _service(request)
    query_params(request, set())
    response_id, owner = request.path_params["response_id"], owner_of(request, service)
    await runs_of(request).forget(response_id, owner)  # a background run stops first
    deleted = await service.delete(response_id, owner)
    return ORJSONResponse(deleted)


async def cancel_response(request: Request) -> Response:
    service = _service(request)
    query_params(request, set())
    runs = runs_of(request)
    cancelled = await runs.cancel(request.path_params["response_id"], owner_of(request, service))
    return ORJSONResponse(cancelled)
