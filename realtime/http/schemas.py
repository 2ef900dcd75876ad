"""Response models of the small HTTP routes, for the OpenAPI document (and its tests).

The routes build these bodies as dicts; `realtime.docgen` turns the models into
docs/openapi.json, and the tests validate live responses against that document.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel

from realtime.dialects.chat.response import ModelCard


class ServedModel(ModelCard):
    #: The context window, in tokens (vLLM's name).
    max_model_len: int
    #: The context window again, under the name Codex's model metadata reads.
    context_window: int
    #: The most tokens one answer may have: `--max-tokens-cap`, else the context window.
    max_output_tokens: int


class ModelList(BaseModel):
    object: Literal["list"]
    data: list[ServedModel]


class Health(BaseModel):
    """Liveness: 200 whenever the process serves HTTP."""

    status: Literal["ok"]
    model: str
    engine_ready: bool


class Readiness(BaseModel):
    """Readiness: 200 `ready` only while the engine can serve and no shutdown runs."""

    status: Literal["ready", "unavailable", "shutting_down"]
    model: str
    engine_ready: bool
    reason: str | None = None
