"""The `Response` object as created: what `response.created` shows and the store keeps.

The fields follow the SDK's `Response` model. Values the request set are echoed;
`output`, `status`, `usage` and the end state are filled in by `ResponseEvents`.
"""

from __future__ import annotations

import time
from typing import Any

from realtime.dialects.responses.request import ResponsesRequest
from realtime.dialects.responses.tools import echo_tool_choice


def new_response(
    request: ResponsesRequest, *, response_id: str, model: str, created_at: int | None = None
) -> dict[str, Any]:
    reasoning = request.reasoning
    text: dict[str, Any] = {"format": {"type": "text"}}
    if request.text is not None and request.text.format is not None:
        text["format"] = request.text.format.model_dump(by_alias=True, exclude_none=True)
    if request.text is not None and request.text.verbosity is not None:
        text["verbosity"] = request.text.verbosity
    response: dict[str, Any] = {
        "id": response_id,
        "object": "response",
        "created_at": int(time.time()) if created_at is None else created_at,
        "status": "in_progress",
        "background": False,
        "completed_at": None,
        "error": None,
        "incomplete_details": None,
        "instructions": request.instructions,
        "max_output_tokens": request.max_output_tokens,
        "max_tool_calls": request.max_tool_calls,
        "metadata": dict(request.metadata or {}),
        "model": model,
        "output": [],
        "parallel_tool_calls": request.parallel_tool_calls is not False,
        "previous_response_id": request.previous_response_id,
        "prompt_cache_key": request.prompt_cache_key,
        "reasoning": {
            "effort": reasoning.effort if reasoning is not None else None,
            "summary": reasoning.summary if reasoning is not None else None,
        },
        "safety_identifier": request.safety_identifier,
        "service_tier": "default",
        "store": request.stores,
        "temperature": request.temperature,
        "text": text,
        "tool_choice": echo_tool_choice(request.tool_choice),
        "tools": request.function_tools.echo,
        "top_logprobs": request.top_logprobs,
        "top_p": request.top_p,
        "truncation": request.truncation or "disabled",
        "usage": None,
        "user": request.user,
    }
    if request.conversation_id is not None:
        response["conversation"] = {"id": request.conversation_id}
    return response
