"""The legacy text-completion API (`POST /v1/completions`): request and response shapes.

Same policy as chat: unknown fields are rejected by name, sampling and stop
fields mean the same thing, and the same self-hosting extras and `nvext` apply.
What differs is the input (a prompt: a string, strings, token ids, or lists of
token ids - one choice per prompt) and the output (`text_completion` objects
with the completions-style `logprobs`: tokens, token_logprobs, top_logprobs,
text_offset).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from realtime.dialects.chat.request import ResponseFormat, SharedRequestFields
from realtime.protocol.errors import InvalidRequestError
from realtime.protocol.input_limits import DEFAULT_INPUT_LIMITS, InputLimits, check_stop_strings
from realtime.protocol.validation import validate_body

TokenId = Annotated[int, Field(ge=0)]
Prompt = str | list[str] | list[TokenId] | list[list[TokenId]]

#: Prompts per request: each becomes a choice generated concurrently.
MAX_PROMPTS = 16


class CompletionRequest(SharedRequestFields):
    prompt: Prompt
    #: OpenAI's default for this endpoint is 16 tokens, unlike chat.
    max_tokens: int | None = Field(default=16, ge=1)
    best_of: int | None = Field(default=None, ge=1, le=128)
    #: Completions-style: how many top alternatives per token (0-5); None = no logprobs.
    logprobs: int | None = Field(default=None, ge=0, le=5)
    echo: bool | None = None
    suffix: str | None = None
    #: As in chat (vLLM accepts it here too): JSON modes constrain each choice.
    response_format: ResponseFormat | None = None

    @model_validator(mode="after")
    def _check_prompts(self) -> CompletionRequest:
        prompts = self.prompts
        if not prompts or any(len(p) == 0 for p in prompts):
            raise InvalidRequestError("prompt must not be empty", param="prompt")
        if len(prompts) > MAX_PROMPTS:
            raise InvalidRequestError(
                f"at most {MAX_PROMPTS} prompts per request, got {len(prompts)}", param="prompt"
            )
        return self

    @property
    def prompts(self) -> list[str | list[int]]:
        """One entry per choice: a text, or token ids."""
        prompt = self.prompt
        if isinstance(prompt, str):
            return [prompt]
        if not prompt:
            return []
        if isinstance(prompt[0], int):
            return [list(prompt)]
        return list(prompt)


def parse_completion_request(
    data: Any, limits: InputLimits = DEFAULT_INPUT_LIMITS
) -> CompletionRequest:
    request = validate_body(CompletionRequest, data)
    check_stop_strings(request.stop_strings, limits)
    return request


# --- responses (documentation and client parsing; the server emits plain dicts) ---


class CompletionLogprobs(BaseModel):
    model_config = ConfigDict(extra="allow")
    tokens: list[str]
    token_logprobs: list[float | None]
    top_logprobs: list[dict[str, float] | None] | None = None
    text_offset: list[int]


class CompletionChoice(BaseModel):
    model_config = ConfigDict(extra="allow")
    index: int
    text: str
    logprobs: CompletionLogprobs | None = None
    finish_reason: Literal["stop", "length", "error"] | None = None


class TextCompletion(BaseModel):
    """Both the response and each streamed chunk: OpenAI uses one object type for both."""

    model_config = ConfigDict(extra="allow")
    id: str
    object: Literal["text_completion"]
    created: int
    model: str
    system_fingerprint: str | None = None
    choices: list[CompletionChoice]
    usage: dict[str, Any] | None = None
