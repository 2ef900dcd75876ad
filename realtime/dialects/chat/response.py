"""Response shapes: the streamed chunk, the aggregated completion, usage.

These models document and validate the wire shape (the client library parses
frames with them). The server's hot path does not build them: `DeltaGenerator`
emits plain dicts of exactly this shape, which cost a fraction of a model dump.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

FinishReasonName = Literal["stop", "length", "tool_calls", "content_filter", "error"]


class _Open(BaseModel):
    # Responses may grow fields (OpenAI adds them often); parsing must not break.
    model_config = ConfigDict(extra="allow")


class PromptTokensDetails(_Open):
    cached_tokens: int = 0


class Usage(_Open):
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int
    prompt_tokens_details: PromptTokensDetails | None = None


class TopLogprob(_Open):
    token: str
    logprob: float
    bytes: list[int] | None = None


class TokenLogprob(TopLogprob):
    top_logprobs: list[TopLogprob] = []


class ChoiceLogprobs(_Open):
    content: list[TokenLogprob] | None = None
    refusal: list[TokenLogprob] | None = None


class Delta(_Open):
    role: Literal["assistant"] | None = None
    content: str | None = None
    reasoning_content: str | None = None
    tool_calls: list[dict[str, Any]] | None = None


class ChunkChoice(_Open):
    index: int
    delta: Delta
    logprobs: ChoiceLogprobs | None = None
    finish_reason: FinishReasonName | None = None


class ChatCompletionChunk(_Open):
    id: str
    object: Literal["chat.completion.chunk"]
    created: int
    model: str
    system_fingerprint: str | None = None
    choices: list[ChunkChoice]
    usage: Usage | None = None


class AssistantOutput(_Open):
    role: Literal["assistant"] = "assistant"
    content: str | None = None
    refusal: str | None = None
    reasoning_content: str | None = None
    tool_calls: list[dict[str, Any]] | None = None


class CompletionChoice(_Open):
    index: int
    message: AssistantOutput
    logprobs: ChoiceLogprobs | None = None
    finish_reason: FinishReasonName | None = None


class ChatCompletion(_Open):
    id: str
    object: Literal["chat.completion"]
    created: int
    model: str
    system_fingerprint: str | None = None
    choices: list[CompletionChoice]
    usage: Usage | None = None


class ModelCard(_Open):
    id: str
    object: Literal["model"] = "model"
    created: int
    owned_by: str
    max_model_len: int | None = None
    tool_parser: str | None = None
    reasoning_parser: str | None = None


class ErrorDetail(_Open):
    message: str
    type: str
    param: str | None = None
    code: str | None = None


class ErrorBody(_Open):
    error: ErrorDetail
