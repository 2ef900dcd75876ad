"""GET /v1/models, GET /v1/models/{id}, GET /health (alive), GET /ready (can serve)."""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from realtime.asgi.responses import ORJSONResponse, error_response
from realtime.pipeline import ChatPipeline
from realtime.protocol.errors import ModelNotFoundError


def _card(pipeline: ChatPipeline) -> dict[str, Any]:
    info = pipeline.engine.info
    cap = pipeline.requests.budget.max_tokens_cap
    return {
        "id": info.name,
        "object": "model",
        "created": info.created,
        "owned_by": info.owned_by,
        # The context window three ways: vLLM's name, and the names Codex's model
        # metadata (`context_window`) and LiteLLM-style model maps use.
        "max_model_len": info.context_length,
        "context_window": info.context_length,
        # The most tokens one answer may have: --max-tokens-cap, else the context.
        "max_output_tokens": min(cap, info.context_length) if cap else info.context_length,
        # Which parsers split this model's output (null: none), so clients know
        # whether tool_calls / reasoning_content can appear.
        "tool_parser": pipeline.tool_parser,
        "reasoning_parser": pipeline.reasoning_parser,
    }


async def list_models(request: Request) -> Response:
    return ORJSONResponse({"object": "list", "data": [_card(request.app.state.pipeline)]})


async def get_model(request: Request) -> Response:
    pipeline: ChatPipeline = request.app.state.pipeline
    model_id = request.path_params["model_id"]
    if model_id != pipeline.model_name:
        return error_response(
            ModelNotFoundError(f"The model `{model_id}` does not exist.", param="model")
        )
    return ORJSONResponse(_card(pipeline))


async def health(request: Request) -> Response:
    engine = request.app.state.pipeline.engine
    # Liveness only: the process answers. Whether the engine can serve is in the body.
    return ORJSONResponse({"status": "ok", "model": engine.info.name, "engine_ready": engine.ready})


async def ready(request: Request) -> Response:
    """Readiness for load balancers: 200 only while the engine can serve and no shutdown runs."""
    engine = request.app.state.pipeline.engine
    lifecycle = request.app.state.lifecycle
    if lifecycle.draining:
        body = {"status": "shutting_down", "model": engine.info.name, "engine_ready": engine.ready}
        return ORJSONResponse(body, status_code=503)
    if not engine.ready:
        body = {
            "status": "unavailable",
            "model": engine.info.name,
            "engine_ready": False,
            "reason": engine.unavailable_reason,
        }
        return ORJSONResponse(body, status_code=503)
    return ORJSONResponse({"status": "ready", "model": engine.info.name, "engine_ready": True})
