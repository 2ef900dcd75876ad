"""`/tokenize` and `/detokenize`, in vLLM's shapes: what a prompt costs before it is sent.

Routers that score prefix overlap and clients that budget their context ask the
server how it tokenizes. The answer must be the tokens generation would see, so a
`messages` body goes through the chat dialect's own conversion and the pipeline's
own rendering (`ChatPipeline.template_input` and `render_prompt`, the same template,
tools and template variables), and a `prompt` through the tokenizer exactly as a
text completion's. `count` is then `usage.prompt_tokens` of the same request.

vLLM's fields that would make the answer differ from generation are refused by
name: `add_special_tokens: true` (this server's prompts never get special tokens
beyond what the template writes) and `continue_final_message: true`.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator
from typing_extensions import Self

from realtime.dialects.chat.build import conversation_items
from realtime.dialects.chat.messages import Message
from realtime.dialects.chat.request import Tool
from realtime.pipeline import ChatPipeline
from realtime.pipeline.sampling import check_token_ids
from realtime.protocol.conversation import FunctionTool
from realtime.protocol.errors import (
    InvalidRequestError,
    ModelNotFoundError,
    UnsupportedFeatureError,
)
from realtime.protocol.generation_request import GenerationRequest
from realtime.protocol.validation import validate_body


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class TokenizeRequest(_Strict):
    """`POST /tokenize`: a `prompt` (text), or `messages` rendered with the chat template."""

    model: str | None = None
    prompt: str | None = None
    messages: list[Message] | None = Field(default=None, min_length=1)
    add_generation_prompt: bool = True
    continue_final_message: bool = False
    add_special_tokens: bool | None = None
    tools: list[Tool] | None = None
    chat_template_kwargs: dict[str, Any] | None = None
    return_token_strs: bool | None = None

    @model_validator(mode="after")
    def _one_input(self) -> Self:
        if (self.prompt is None) == (self.messages is None):
            raise InvalidRequestError("send exactly one of prompt or messages", param="prompt")
        return self


class DetokenizeRequest(_Strict):
    """`POST /detokenize`: token ids back to text."""

    model: str | None = None
    tokens: list[int] = Field(min_length=0)


class TokenizeResponse(BaseModel):
    """The tokens generation would see, and the context they must fit in."""

    count: int
    max_model_len: int
    tokens: list[int]
    #: each token's own text (with `return_token_strs: true`), else null
    token_strs: list[str] | None = None


class DetokenizeResponse(BaseModel):
    prompt: str


def _parse(model: type[_Strict], data: Any) -> Any:
    return validate_body(model, data)


def _check_model(pipeline: ChatPipeline, model: str | None) -> None:
    if model is not None and model != pipeline.model_name:
        raise ModelNotFoundError(
            f"The model `{model}` does not exist. Available: {pipeline.model_name}",
            param="model",
        )


def tokenize(pipeline: ChatPipeline, data: Any) -> dict[str, Any]:
    """The `/tokenize` answer for a decoded JSON body. Raises RealtimeError."""
    request: TokenizeRequest = _parse(TokenizeRequest, data)
    _check_model(pipeline, request.model)
    if request.add_special_tokens:
        raise UnsupportedFeatureError(
            "add_special_tokens: true is not supported: prompts are tokenized as generation"
            " tokenizes them, with no special tokens beyond the chat template's",
            param="add_special_tokens",
        )
    if request.continue_final_message:
        raise UnsupportedFeatureError(
            "continue_final_message is not supported", param="continue_final_message"
        )
    info = pipeline.requests.check_ready()
    if request.messages is not None:
        tools = (
            tuple(
                FunctionTool(t.function.name, t.function.description, t.function.parameters)
                for t in request.tools
            )
            if request.tools
            else None
        )
        generation = GenerationRequest(
            model=pipeline.model_name,
            conversation=conversation_items(request.messages),
            tools=tools,
            template_kwargs=request.chat_template_kwargs,
        )
        conversation = pipeline.template_input(generation)
        _, tokens = pipeline.render_prompt(
            generation, conversation, add_generation_prompt=request.add_generation_prompt
        )
    else:
        assert request.prompt is not None
        tokens = info.tokenizer.encode(request.prompt)
    token_strs = (
        [info.tokenizer.token_text(token) for token in tokens]
        if request.return_token_strs
        else None
    )
    return {
        "count": len(tokens),
        "max_model_len": info.context_length,
        "tokens": tokens,
        "token_strs": token_strs,
    }


def detokenize(pipeline: ChatPipeline, data: Any) -> dict[str, Any]:
    """The `/detokenize` answer: the text of the ids, special tokens included."""
    request: DetokenizeRequest = _parse(DetokenizeRequest, data)
    _check_model(pipeline, request.model)
    info = pipeline.requests.check_ready()
    if any(token < 0 for token in request.tokens):
        raise InvalidRequestError("token ids are not negative", param="tokens")
    check_token_ids(request.tokens, info.vocab_size, "tokens")
    return {"prompt": info.tokenizer.decode(request.tokens, skip_special_tokens=False)}
