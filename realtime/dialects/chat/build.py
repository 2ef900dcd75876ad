"""A chat completion request as the neutral `GenerationRequest`.

The wire model (`ChatCompletionRequest`) was validated strictly when it was parsed;
here its fields are read once into the typed request every API shares. The chat
API's own choices are made here and nowhere else: a top-level field wins over its
`nvext` twin (`top_k`, `min_p`, `repetition_penalty`, `cache_salt`, `ignore_eos`),
`max_completion_tokens` over `max_tokens`, and the features this server does not
have are refused naming their field. Messages become conversation items
(`realtime.protocol.conversation`): an assistant message's `reasoning_content` is a
reasoning item before it, its `tool_calls` function calls after it, a `tool`
message a function's output; keys the item kinds do not name (a message's `name`,
a model-specific field) travel on to the chat template as they were sent.
"""

from __future__ import annotations

from typing import Any

from realtime.dialects.chat.completions import CompletionRequest
from realtime.dialects.chat.messages import Message as WireMessage
from realtime.dialects.chat.request import (
    ChatCompletionRequest,
    ResponseFormat,
    SharedRequestFields,
    Tool,
)
from realtime.dialects.chat.request import ToolChoice as WireToolChoice
from realtime.protocol.conversation import (
    FunctionCall,
    FunctionCallOutput,
    FunctionTool,
    Item,
    Message,
    NamedFunction,
    Reasoning,
    ToolChoice,
)
from realtime.protocol.errors import UnsupportedFeatureError
from realtime.protocol.generation_request import (
    CHAT_PATHS,
    FieldPaths,
    GenerationRequest,
    JsonFormat,
    Sampling,
    Stopping,
)

#: Chat fields this server does not serve: refused by name, never ignored.
_UNSUPPORTED = ("audio", "prediction", "web_search_options", "functions", "function_call")
_MAX_COMPLETION_PATHS = FieldPaths(max_tokens="max_completion_tokens")
_COMPLETION_PATHS = FieldPaths(input="prompt")


def chat_generation(request: ChatCompletionRequest) -> GenerationRequest:
    """The neutral request for a chat completion. Raises UnsupportedFeatureError."""
    _refuse_unsupported(request)
    nv = request.nvext
    limit = request.output_limit
    return GenerationRequest(
        model=request.model,
        conversation=conversation_items(request.messages),
        prompt_token_ids=tuple(nv.token_data) if nv is not None and nv.token_data else None,
        tools=_tools(request.tools),
        tool_choice=_tool_choice(request.tool_choice),
        parallel_tool_calls=request.parallel_tool_calls,
        format=_format(request.response_format),
        template_kwargs=request.chat_template_kwargs,
        max_tokens=limit,
        max_tokens_explicit=limit is not None,
        sampling=_sampling(request),
        stopping=_stopping(request),
        logprobs=(request.top_logprobs or 0) if request.logprobs else None,
        skip_special_tokens=request.skip_special_tokens,
        cache_salt=request.effective_cache_salt,
        speculative_prefill=bool(
            nv is not None and nv.agent_hints is not None and nv.agent_hints.speculative_prefill
        ),
        extra_fields=request.extra_fields,
        paths=_MAX_COMPLETION_PATHS if request.max_completion_tokens else CHAT_PATHS,
    )


def completion_generation(request: CompletionRequest) -> GenerationRequest:
    """The neutral request for a text completion (one answer per prompt)."""
    for name, value in (("n", request.n), ("best_of", request.best_of)):
        if value is not None and value > 1:
            raise UnsupportedFeatureError(
                f"{name} > 1 is not supported; send one prompt per choice", param=name
            )
    if request.suffix is not None:
        raise UnsupportedFeatureError("suffix (insertion) is not supported", param="suffix")
    if request.echo and request.logprobs is not None:
        raise UnsupportedFeatureError(
            "echo with logprobs needs the prompt's logprobs, which the engines do not report",
            param="echo",
        )
    return GenerationRequest(
        model=request.model,
        prompts=tuple(p if isinstance(p, str) else tuple(p) for p in request.prompts),
        format=_format(request.response_format),
        max_tokens=request.max_tokens,
        max_tokens_explicit="max_tokens" in request.model_fields_set,
        sampling=_sampling(request),
        stopping=_stopping(request),
        logprobs=request.logprobs,
        skip_special_tokens=request.skip_special_tokens,
        cache_salt=request.effective_cache_salt,
        extra_fields=request.extra_fields,
        paths=_COMPLETION_PATHS,
    )


def _sampling(request: SharedRequestFields) -> Sampling:
    """The sampling fields both APIs share; a top-level field wins over its `nvext` twin."""
    nv = request.nvext
    return Sampling(
        temperature=request.temperature,
        top_p=request.top_p,
        top_k=_first(request.top_k, nv.top_k if nv else None),
        min_p=_first(request.min_p, nv.min_p if nv else None),
        seed=request.seed,
        presence_penalty=request.presence_penalty,
        frequency_penalty=request.frequency_penalty,
        repetition_penalty=_first(
            request.repetition_penalty, nv.repetition_penalty if nv else None
        ),
        logit_bias=request.logit_bias,
    )


def _stopping(request: SharedRequestFields) -> Stopping:
    return Stopping(
        strings=tuple(request.stop_strings),
        token_ids=tuple(request.stop_token_ids or ()),
        include_stop_string=bool(request.include_stop_str_in_output),
        ignore_eos=request.effective_ignore_eos,
        min_tokens=request.min_tokens or 0,
    )


def conversation_items(messages: list[WireMessage]) -> tuple[Item, ...]:
    """Chat messages as conversation items (see the module docstring)."""
    items: list[Item] = []
    for index, message in enumerate(messages):
        fields = message.model_dump(exclude_none=True)
        role = fields.pop("role")
        parts = _parts(fields.pop("content", None), index)
        if role == "tool":
            call_id = fields.pop("tool_call_id")
            items.append(FunctionCallOutput(call_id, parts or ("",), fields or None))
            continue
        if role != "assistant":
            items.append(Message(role, parts, fields or None))
            continue
        reasoning = fields.pop("reasoning_content", None)
        calls = fields.pop("tool_calls", None) or ()
        if isinstance(reasoning, str):
            items.append(Reasoning(reasoning))
        items.append(Message(role, parts, fields or None))
        for call in calls:
            function = call.pop("function")
            call.pop("type", None)
            call_id = call.pop("id")
            items.append(
                FunctionCall(call_id, function["name"], function["arguments"], call or None)
            )
    return tuple(items)


def _parts(content: Any, index: int) -> tuple[str, ...] | None:
    """A message's text parts (a refusal part counts as text); other parts are refused."""
    if content is None:
        return None
    if isinstance(content, str):
        return (content,)
    texts = []
    for part in content:
        kind = part.get("type")
        if kind == "text":
            texts.append(part["text"])
        elif kind == "refusal":
            texts.append(part["refusal"])
        else:
            raise UnsupportedFeatureError(
                f"this model accepts text only; {kind!r} content is not supported",
                param=f"messages.{index}.content",
            )
    return tuple(texts)


def _tools(tools: list[Tool] | None) -> tuple[FunctionTool, ...] | None:
    if not tools:
        return None
    return tuple(
        FunctionTool(
            tool.function.name,
            tool.function.description,
            tool.function.parameters,
            tool.function.strict,
        )
        for tool in tools
    )


def _tool_choice(choice: WireToolChoice | None) -> ToolChoice | None:
    if choice is None or isinstance(choice, str):
        return choice
    return NamedFunction(choice.function.name)


def _format(response_format: ResponseFormat | None) -> JsonFormat | None:
    if response_format is None or response_format.type == "text":
        return None
    if response_format.type == "json_object":
        return JsonFormat()
    spec = response_format.json_schema
    if spec is None:
        return JsonFormat("json_schema")
    extra = spec.model_extra or {}
    description = extra.get("description")
    return JsonFormat(
        "json_schema",
        schema=spec.schema_,
        name=spec.name,
        description=description if isinstance(description, str) else None,
        strict=spec.strict,
    )


def _refuse_unsupported(request: ChatCompletionRequest) -> None:
    if request.n is not None and request.n > 1:
        raise UnsupportedFeatureError(
            "n > 1 is not supported; send one request per choice", param="n"
        )
    if request.modalities and set(request.modalities) - {"text"}:
        raise UnsupportedFeatureError("only the text modality is supported", param="modalities")
    for name in _UNSUPPORTED:
        if getattr(request, name) is not None:
            raise UnsupportedFeatureError(f"{name} is not supported", param=name)


def _first(*values: Any) -> Any:
    return next((value for value in values if value is not None), None)
