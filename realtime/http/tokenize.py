"""POST /tokenize and POST /detokenize (vLLM's shapes): how the served model tokenizes.

The work is the chat dialect's (`realtime.dialects.chat.tokenize`); a large body is
tokenized in the prepare pool, off the event loop, as a large chat request is.
"""

from __future__ import annotations

import functools

from starlette.requests import Request
from starlette.responses import Response

from realtime.asgi.responses import ORJSONResponse
from realtime.dialects.chat.tokenize import detokenize, tokenize
from realtime.http.serving import read_json_body
from realtime.pipeline import ChatPipeline
from realtime.pipeline.offload import off_loop


async def tokenize_route(request: Request) -> Response:
    pipeline: ChatPipeline = request.app.state.pipeline
    body = await read_json_body(request)
    size = int(request.headers.get("content-length") or 0)
    return ORJSONResponse(await off_loop(functools.partial(tokenize, pipeline, body), size))


async def detokenize_route(request: Request) -> Response:
    pipeline: ChatPipeline = request.app.state.pipeline
    body = await read_json_body(request)
    size = int(request.headers.get("content-length") or 0)
    return ORJSONResponse(await off_loop(functools.partial(detokenize, pipeline, body), size))
