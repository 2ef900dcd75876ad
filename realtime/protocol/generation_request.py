"""The one typed request between every API and the pipeline.

Each API's dialect validates its own wire form (chat completions, text
completions, the Responses API over HTTP and its WebSocket mode, the Realtime
events, the Messages API) and builds a `GenerationRequest` directly: nothing is
lowered to another API's JSON and validated again. What the pipeline still
checks (the model, the context, token ids, tool choice, a schema's grammar) is
reported under the field the client actually sent, which the dialect names once
in `FieldPaths` (`max_output_tokens`, `text.format`, `session.instructions`...),
so no error is renamed afterwards.

Plain data, no I/O. `None` means "not set": the pipeline then takes the model's
generation defaults, else OpenAI's (a dialect with two spellings of a field, such
as chat's `top_k` and `nvext.top_k`, decides between them while it builds).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Literal

from realtime.protocol.conversation import FunctionTool, Item, ToolChoice


@dataclass(frozen=True, slots=True)
class FieldPaths:
    """The client's name for each field the pipeline may report an error under."""

    model: str = "model"
    #: the conversation (or, for text completions, the prompt)
    input: str = "messages"
    max_tokens: str = "max_tokens"
    format: str = "response_format"
    tools: str = "tools"
    tool_choice: str = "tool_choice"
    template_kwargs: str = "chat_template_kwargs"
    logit_bias: str = "logit_bias"
    stop_token_ids: str = "stop_token_ids"
    token_ids: str = "nvext.token_data"


CHAT_PATHS = FieldPaths()


@dataclass(frozen=True, slots=True)
class Sampling:
    """How the next token is chosen; None: the model's default, then OpenAI's."""

    temperature: float | None = None
    top_p: float | None = None
    #: 0 or -1 (vLLM's spelling) disable top-k
    top_k: int | None = None
    min_p: float | None = None
    seed: int | None = None
    presence_penalty: float | None = None
    frequency_penalty: float | None = None
    repetition_penalty: float | None = None
    #: token id (as the client wrote it, a string) -> bias; the pipeline checks the ids
    logit_bias: Mapping[str, float] | None = None


@dataclass(frozen=True, slots=True)
class Stopping:
    """When the answer ends, besides the model's end token and the length limit."""

    strings: tuple[str, ...] = ()
    token_ids: tuple[int, ...] = ()
    include_stop_string: bool = False
    ignore_eos: bool = False
    min_tokens: int = 0


@dataclass(frozen=True, slots=True)
class JsonFormat:
    """Structured output: one JSON value. `json_object`: any JSON object;
    `json_schema`: a value valid against `schema` (which must be given)."""

    kind: Literal["json_object", "json_schema"] = "json_object"
    schema: Mapping[str, object] | None = None
    name: str | None = None
    description: str | None = None
    strict: bool | None = None


@dataclass(frozen=True, slots=True)
class GenerationRequest:
    """One generation, as every API asks for it (see the module docstring)."""

    model: str
    #: the conversation to render with the chat template (chat-style APIs)
    conversation: tuple[Item, ...] = ()
    #: prompt token ids given instead of a conversation (`nvext.token_data`)
    prompt_token_ids: tuple[int, ...] | None = None
    #: text completions: the prompts as given, each a text or token ids (one answer each)
    prompts: tuple[str | tuple[int, ...], ...] = ()
    tools: tuple[FunctionTool, ...] | None = None
    tool_choice: ToolChoice | None = None
    parallel_tool_calls: bool | None = None
    format: JsonFormat | None = None
    #: extra chat-template variables (`chat_template_kwargs`)
    template_kwargs: Mapping[str, object] | None = None
    #: the model's reasoning on or off, through the template's switch (`enable_thinking`;
    #: `template_kwargs` win over it); None: the template's default
    thinking: bool | None = None
    #: reasoning tokens after which the reasoning block is closed (engines that constrain,
    #: templates whose reasoning markers are single tokens); None: no budget
    thinking_budget: int | None = None
    #: the answer's token limit as asked (None: what fits); `explicit`: the client set it
    max_tokens: int | None = None
    max_tokens_explicit: bool = False
    #: a limit beyond what fits (the context after the prompt, then the server's cap) is
    #: cut to what fits, and an answer that reaches it ends with the length finish
    #: reason; False refuses it with 400 `context_length_exceeded` / `max_tokens_exceeded`
    max_tokens_clamp: bool = False
    sampling: Sampling = field(default_factory=Sampling)
    stopping: Stopping = field(default_factory=Stopping)
    #: None: no logprobs; N: each token's logprob and its N most likely alternatives
    logprobs: int | None = None
    #: None: hide special tokens unless a parser needs to see its markers
    skip_special_tokens: bool | None = None
    #: isolates KV-cache reuse: requests with different salts never share a prefix
    cache_salt: str | None = None
    #: warm the next turn's prefix in the KV cache after the answer
    speculative_prefill: bool = False
    #: a client's warm-up (`generate: false`): prefill the prompt, drop the answer
    warm_up: bool = False
    #: `nvext.extra_fields`: extra fields returned with the final chunk
    extra_fields: frozenset[str] = frozenset()
    paths: FieldPaths = CHAT_PATHS


def owned_by(request: GenerationRequest, owner: str | None) -> GenerationRequest:
    """`request` with its cache salt scoped to `owner` (the caller's key, as the transport
    names it), ahead of the client's own salt: callers with different keys never share a
    cached prefix, whatever salt they send. None: `request` as it is."""
    if owner is None:
        return request
    salt = owner if request.cache_salt is None else f"{owner}:{request.cache_salt}"
    return replace(request, cache_salt=salt)
