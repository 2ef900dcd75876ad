"""POST /v1/completions: the legacy text-completion API, SSE or one JSON body.

Parsing differs from chat; serving does not: `begin` and `respond` (`serving.py`,
shared with /v1/chat/completions) handle draining, metrics, disconnects and shutdown.
"""

from __future__ import annotations

from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response

from realtime.dialects.chat.completion_run import CompletionRun
from realtime.dialects.chat.completions import parse_completion_request
from realtime.http.serving import begin, prepare_off_loop, read_request, respond, scope_of
from realtime.pipeline.completions import CompletionPipeline
from realtime.protocol.errors import RealtimeError


async def completions(request: Request) -> Response:
    state = request.app.state
    pipeline: CompletionPipeline = state.completions
    outcome = begin(request)
    try:
        body = await read_request(request, parse_completion_request)
        scope = scope_of(request, outcome)
        streaming = bool(body.stream)
        # A large prompt is rendered and encoded in a worker thread (offload.py says why).
        run = await prepare_off_loop(
            request,
            CompletionRun.prepare,
            pipeline,
            body,
            stream=streaming,
            session_id=scope.session_id,
            cache_salt=scope.cache_salt,
        )
        await run.constrain()  # a grammar compiles off the loop, before the 200
    except RealtimeError as exc:
        outcome.finish("error", error=exc)
        raise
    except ClientDisconnect:  # gone during the body upload; answered by `openai_errors`
        outcome.finish("cancelled", cause="disconnect")
        raise
    outcome.usage, outcome.response_id = run.usage, run.id
    return await respond(request, outcome, streaming, stream=run.stream, complete=run.complete)
