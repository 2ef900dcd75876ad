"""POST /v1/chat/completions: SSE when `stream` is true, one JSON body otherwise.

Parsing, the cache scope (an agent's session header, `serving.scope_of`) and the
chat pipeline are the route's; serving (draining, metrics,
disconnects, shutdown) is `serving.py`'s, shared with /v1/completions.
"""

from __future__ import annotations

from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response

from realtime.dialects.chat.early_refusal import refuse_unfit_chat
from realtime.dialects.chat.request import parse_chat_request
from realtime.dialects.chat.run import ChatRun
from realtime.http.serving import begin, prepare_off_loop, read_request, respond, scope_of
from realtime.pipeline import ChatPipeline
from realtime.protocol.errors import RealtimeError


async def chat_completions(request: Request) -> Response:
    state = request.app.state
    pipeline: ChatPipeline = state.pipeline
    outcome = begin(request)
    try:
        # A large body whose prompt cannot fit is refused in the decode process.
        chat_request = await read_request(request, parse_chat_request, refuse_unfit_chat)
        scope = scope_of(request, outcome)
        streaming = bool(chat_request.stream)
        # A large prompt is rendered and encoded in a worker thread (offload.py says why).
        run = await prepare_off_loop(
            request,
            ChatRun.prepare,
            pipeline,
            chat_request,
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
