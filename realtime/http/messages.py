"""Anthropic's Messages API over HTTP: what Claude Code and the `anthropic` SDKs call.

    POST /v1/messages                 JSON, or SSE with `stream: true` (any query string:
                                      Claude Code sends `?beta=true`)
    POST /v1/messages/count_tokens    {"input_tokens": N}

The logic is the dialect's (`realtime.dialects.messages`); this module adds HTTP:
the body, the cache scope an agent's session header chooses (`serving.scope_of`),
the SSE framing (each event `event: <type>` + `data: <json>`, keep-alives as
`ping` events, a late failure as an `error` event, no `[DONE]`), and errors in
Anthropic's body. Serving (draining, metrics, disconnects, shutdown) is
`serving.py`'s, shared with the other generation routes. The `anthropic-version`
and `anthropic-beta` headers are accepted and change nothing.
"""

from __future__ import annotations

from functools import partial
from typing import Any

import orjson
from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response

from realtime.asgi.responses import ORJSONResponse, body_response
from realtime.dialects.messages.build import (
    parse_count_tokens_request,
    parse_messages_request,
)
from realtime.dialects.messages.early_refusal import refuse_unfit_message
from realtime.dialects.messages.errors import error_body
from realtime.dialects.messages.run import MessagesRun, count_tokens
from realtime.http.errors import Endpoint, openai_errors
from realtime.http.http_settings import HttpSettings
from realtime.http.serving import (
    begin,
    prepare_off_loop,
    read_json_body,
    read_request,
    respond,
    scope_of,
)
from realtime.http.sse import SseFraming
from realtime.pipeline import ChatPipeline
from realtime.pipeline.offload import off_loop
from realtime.protocol.errors import RealtimeError

#: Anthropic's keep-alive: a `ping` event (its SDKs skip it).
PING_EVENT = b'event: ping\ndata: {"type":"ping"}\n\n'


def encode_event(event: dict[str, Any]) -> bytes:
    kind: str = event["type"]
    return b"event: " + kind.encode() + b"\ndata: " + orjson.dumps(event) + b"\n\n"


def encode_error(error: RealtimeError) -> bytes:
    return encode_event(error_body(error))


MESSAGES_FRAMING = SseFraming(
    encode=encode_event, done=None, error=encode_error, keepalive=PING_EVENT
)


#: Every error of these routes in Anthropic's body (app.py registers it for the paths too,
#: for what answers before a route runs).
anthropic_error_response = partial(body_response, error_body)


def anthropic_errors(endpoint: Endpoint) -> Endpoint:
    """Every failure of `endpoint` answered in Anthropic's error body."""
    return openai_errors(endpoint, anthropic_error_response)


async def create_message(request: Request) -> Response:
    state = request.app.state
    pipeline: ChatPipeline = state.pipeline
    settings: HttpSettings = state.http
    outcome = begin(request)
    try:
        # A large body whose prompt cannot fit is refused in the decode process.
        early = partial(refuse_unfit_message, options=settings.messages)
        body = await read_request(request, parse_messages_request, early)
        scope = scope_of(request, outcome)
        streaming = bool(body.stream)
        # A large prompt is rendered and encoded in a worker thread (offload.py says why).
        run = await prepare_off_loop(
            request,
            MessagesRun.prepare,
            pipeline,
            body,
            stream=streaming,
            session_id=scope.session_id,
            cache_salt=scope.cache_salt,
            options=settings.messages,
        )
        await run.constrain()  # a grammar compiles off the loop, before the 200
    except RealtimeError as exc:
        outcome.finish("error", error=exc)
        raise
    except ClientDisconnect:  # gone during the body upload; answered by the wrapper
        outcome.finish("cancelled", cause="disconnect")
        raise
    outcome.usage, outcome.response_id = run.usage, run.id
    return await respond(
        request,
        outcome,
        streaming,
        stream=run.stream,
        complete=run.complete,
        framing=MESSAGES_FRAMING,
        errors=anthropic_error_response,
    )


async def count_message_tokens(request: Request) -> Response:
    state = request.app.state
    body = parse_count_tokens_request(await read_json_body(request))
    # Rendering the prompt of a large body takes as long as its size: off the loop.
    work = partial(count_tokens, state.pipeline, body, state.http.messages)
    return ORJSONResponse(await off_loop(work, len(await request.body())))
