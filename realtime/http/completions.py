"""POST /v1/completions: the legacy text-completion API, SSE or one JSON body.

Parsing differs from chat; serving does not: `begin` and `respond` (`serving.py`,
shared with /v1/chat/completions) handle draining, metrics, disconnects and shutdown.
"""

from __future__ import annotations

from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response

from realtime.dialects.chat.build import completion_generation
from realtime.dialects.chat.completions import parse_completion_request
from realtime.http.serving import begin, read_json_body, respond, scope_of
from realtime.pipeline.completions import CompletionPipeline
from realtime.protocol.errors import RealtimeError
from realtime.protocol.generation_request import owned_by


async def completions(request: Request) -> Response:
    state = request.app.state
    pipeline: CompletionPipeline = state.completions
    outcome = begin(request)
    try:
        limits = state.http.input_limits
        body = parse_completion_request(await read_json_body(request), limits)
        scope = scope_of(request, outcome)
        streaming = bool(body.stream)
        prepared = pipeline.prepare(
            owned_by(completion_generation(body), scope.cache_salt),
            stream=streaming,
            echo=bool(body.echo),
            include_usage=body.include_usage,
            session_id=scope.session_id,
        )
        await pipeline.constrain(prepared)  # a grammar compiles off the loop, before the 200
    except RealtimeError as exc:
        outcome.finish("error", error=exc)
        raise
    except ClientDisconnect:  # gone during the body upload; answered by `openai_errors`
        outcome.finish("cancelled", cause="disconnect")
        raise
    outcome.usage, outcome.response_id = prepared.chunks.usage, prepared.chunks.id
    return await respond(
        request,
        outcome,
        streaming,
        stream=lambda: pipeline.stream(prepared),
        complete=lambda: pipeline.complete(prepared),
    )
