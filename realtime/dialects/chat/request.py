"""The chat-completion request: OpenAI's fields, common self-hosting extras, and `nvext`.

Unknown-field policy (the same on HTTP and on the WebSocket): a top-level field,
a `stream_options` field or an `nvext` field that is not defined here is rejected
with 400 `invalid_request_error`, code `unknown_field`, `param` naming the field,
as OpenAI's own API does. Silently ignoring `max_token` or `temprature` would
change the answer without telling anyone. Message objects are the exception: they
may carry extra keys, which reach the chat template.

Types are strict, as OpenAI's are: `"stream": "yes"`, `"n": "2"` and
`"max_tokens": 1.5` (or `2.0`) are refused with 400 `invalid_type` naming the
field, where a lax parser would guess. A number field takes an integer
(`"temperature": 1`); nothing else is converted.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator
from typing_extensions import Self

from realtime.dialects.chat.messages import Message
from realtime.protocol.errors import InvalidRequestError
from realtime.protocol.input_limits import DEFAULT_INPUT_LIMITS, InputLimits, check_stop_strings
from realtime.protocol.validation import validate_body


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class FunctionDefinition(_Strict):
    name: str
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: bool | None = None


class Tool(_Strict):
    type: Literal["function"] = "function"
    function: FunctionDefinition


class NamedFunction(_Strict):
    name: str


class NamedToolChoice(_Strict):
    type: Literal["function"] = "function"
    function: NamedFunction


ToolChoice = Literal["none", "auto", "required"] | NamedToolChoice


class StreamOptions(_Strict):
    include_usage: bool | None = None
    #: vLLM's extension: usage on every chunk. Accepted and honoured.
    continuous_usage_stats: bool | None = None
    #: OpenAI's obfuscation padding. Accepted; this server never pads.
    include_obfuscation: bool | None = None


class JSONSchemaFormat(BaseModel):
    model_config = ConfigDict(extra="allow", strict=True)
    name: str
    schema_: dict[str, Any] | None = Field(default=None, alias="schema")
    strict: bool | None = None


class ResponseFormat(_Strict):
    type: Literal["text", "json_object", "json_schema"]
    json_schema: JSONSchemaFormat | None = None


class AgentHints(_Strict):
    #: After the answer, warm the KV cache with the conversation so far (see docs).
    speculative_prefill: bool | None = None


ExtraField = Literal["completion_token_ids", "engine_data"]


class NvExt(_Strict):
    """NVIDIA Dynamo's request extensions, as far as this server implements them."""

    #: Prompt token ids: skip chat templating and tokenization entirely.
    token_data: list[Annotated[int, Field(ge=0)]] | None = Field(default=None, min_length=1)
    #: Extra response fields returned under `nvext` on the final chunk.
    extra_fields: list[ExtraField] | None = None
    #: Isolates KV-cache reuse: requests with different salts never share a prefix.
    cache_salt: str | None = None
    agent_hints: AgentHints | None = None
    ignore_eos: bool | None = None
    top_k: int | None = Field(default=None, ge=-1)
    min_p: float | None = Field(default=None, ge=0.0, le=1.0)
    repetition_penalty: float | None = Field(default=None, gt=0.0)


class SharedRequestFields(_Strict):
    """What chat and text completion requests share: sampling, stops, streaming, extras.

    One definition, so both APIs validate and derive these the same way.
    """

    model: str

    # sampling
    temperature: float | None = Field(default=None, ge=0.0, le=2.0)
    top_p: float | None = Field(default=None, gt=0.0, le=1.0)
    n: int | None = Field(default=None, ge=1, le=128)
    seed: int | None = None
    presence_penalty: float | None = Field(default=None, ge=-2.0, le=2.0)
    frequency_penalty: float | None = Field(default=None, ge=-2.0, le=2.0)
    logit_bias: dict[str, Annotated[float, Field(ge=-100.0, le=100.0)]] | None = None
    stop: str | list[str] | None = None

    # output shape
    stream: bool | None = False
    stream_options: StreamOptions | None = None

    user: str | None = None

    # extras common on self-hosted servers (vLLM, SGLang, TabbyAPI, Dynamo)
    #: 0 or -1 (vLLM's spelling) disable top-k.
    top_k: int | None = Field(default=None, ge=-1)
    min_p: float | None = Field(default=None, ge=0.0, le=1.0)
    repetition_penalty: float | None = Field(default=None, gt=0.0)
    min_tokens: int | None = Field(default=None, ge=0)
    ignore_eos: bool | None = None
    stop_token_ids: list[Annotated[int, Field(ge=0)]] | None = None
    include_stop_str_in_output: bool | None = None
    skip_special_tokens: bool | None = None
    cache_salt: str | None = None

    nvext: NvExt | None = None

    @model_validator(mode="after")
    def _check_shared(self) -> Self:
        # Raised as InvalidRequestError (not ValueError) so pydantic passes it through
        # unwrapped and the error names the field, which a model-level error cannot.
        if self.stream_options is not None and not self.stream:
            raise InvalidRequestError(
                "stream_options is only allowed when stream is true", param="stream_options"
            )
        if self.stop == "" or (isinstance(self.stop, list) and any(not s for s in self.stop)):
            raise InvalidRequestError("stop strings must not be empty", param="stop")
        return self

    # --- derived values, one place each ---

    @property
    def stop_strings(self) -> list[str]:
        if self.stop is None:
            return []
        return [self.stop] if isinstance(self.stop, str) else list(self.stop)

    @property
    def include_usage(self) -> bool:
        return bool(self.stream_options and self.stream_options.include_usage)

    # A top-level field wins over the same field in nvext, for every such pair.

    @property
    def effective_cache_salt(self) -> str | None:
        if self.cache_salt is not None:
            return self.cache_salt
        return self.nvext.cache_salt if self.nvext is not None else None

    @property
    def effective_ignore_eos(self) -> bool:
        nv = self.nvext.ignore_eos if self.nvext else None
        return bool(self.ignore_eos if self.ignore_eos is not None else nv)

    @property
    def extra_fields(self) -> frozenset[str]:
        if self.nvext is None or not self.nvext.extra_fields:
            return frozenset()
        return frozenset(self.nvext.extra_fields)


class ChatCompletionRequest(SharedRequestFields):
    """`POST /v1/chat/completions` body, and the body of a /v1/realtime request frame."""

    messages: list[Message] = Field(min_length=1)

    # output length
    max_tokens: int | None = Field(default=None, ge=1)
    max_completion_tokens: int | None = Field(default=None, ge=1)

    # output shape
    logprobs: bool | None = None
    top_logprobs: int | None = Field(default=None, ge=0, le=20)
    response_format: ResponseFormat | None = None

    # tools
    tools: list[Tool] | None = None
    tool_choice: ToolChoice | None = None
    parallel_tool_calls: bool | None = None

    chat_template_kwargs: dict[str, Any] | None = None

    # bookkeeping accepted for compatibility; no effect on generation
    metadata: dict[str, str] | None = None
    store: bool | None = None
    service_tier: str | None = None
    reasoning_effort: str | None = None
    verbosity: str | None = None
    prompt_cache_key: str | None = None
    safety_identifier: str | None = None

    # features this server does not have; accepted by the schema, rejected with a reason
    modalities: list[str] | None = None
    audio: dict[str, Any] | None = None
    prediction: dict[str, Any] | None = None
    web_search_options: dict[str, Any] | None = None
    functions: list[dict[str, Any]] | None = None
    function_call: Any = None

    @model_validator(mode="after")
    def _check_chat(self) -> ChatCompletionRequest:
        if (
            self.max_tokens is not None
            and self.max_completion_tokens is not None
            and self.max_tokens != self.max_completion_tokens
        ):
            raise InvalidRequestError(
                "max_tokens and max_completion_tokens disagree; send one of them",
                param="max_completion_tokens",
            )
        if self.top_logprobs and not self.logprobs:
            raise InvalidRequestError("top_logprobs requires logprobs: true", param="top_logprobs")
        return self

    @property
    def output_limit(self) -> int | None:
        return (
            self.max_completion_tokens
            if self.max_completion_tokens is not None
            else self.max_tokens
        )


def parse_chat_request(
    data: Any, limits: InputLimits = DEFAULT_INPUT_LIMITS
) -> ChatCompletionRequest:
    """Validate a decoded JSON body; every failure becomes one specific 400 error.

    The body's nesting depth was checked when it was decoded (`json_input`)."""
    request = validate_body(ChatCompletionRequest, data)
    check_stop_strings(request.stop_strings, limits)
    return request
