"""The chat-completion pipeline both transports call.

    ChatCompletionRequest -> prepare() -> PreparedChat -> stream() -> chunk dicts

`prepare` does everything that can fail before generation starts (model lookup,
unsupported features, template rendering, tokenization, then the shared path to
an engine request in `engine_requests.py`: the token budget with the server's cap,
stops, sampling, and the plan of a constraint: `constraints.py`), so a transport
can answer with a proper status code before it commits to a stream, and never
adjusts what `prepare` returns. Then both transports `await constrain(prepared)`:
a constraint's grammar is compiled on a worker thread, and an invalid schema is
still a 400 (an `error` frame) there, before the first chunk.
`stream` drives the engine and turns its tokens into chunks; closing the
returned iterator closes the engine's iterator, which is how cancellation and
client disconnects reach the engine.

A request with `nvext.agent_hints.speculative_prefill` also gets its next turn
warmed after its answer (`speculative.py`); that is scheduled here, so both
transports get it. `aclose()` cancels pending warm-ups; `end_session()` tells the
engine a session's cache entries may go.
"""

from __future__ import annotations

import hashlib
from collections.abc import AsyncGenerator
from contextlib import aclosing
from dataclasses import dataclass
from typing import Any

from realtime import __version__
from realtime.chat.aggregate import ChunkAggregator
from realtime.chat.conversation import TemplateInput, template_message
from realtime.chat.delta import DeltaGenerator, new_completion_id
from realtime.chat.logprobs import format_logprobs
from realtime.chat.reasoning.registry import resolve_reasoning_parser
from realtime.chat.stops import StopMatcher
from realtime.chat.tools.base import tool_specs
from realtime.chat.tools.choice import ToolChoiceError
from realtime.chat.tools.events import OutputEvent, fold_events
from realtime.chat.tools.output import ChatOutputParser, build_output_parser
from realtime.chat.tools.registry import resolve_tool_parser
from realtime.constrain import ConstraintLimits
from realtime.engine.base import Engine, EngineRequest, SessionAwareEngine
from realtime.model.generation import FinishReason
from realtime.observability.vllm_metrics import VllmMetrics
from realtime.pipeline.budget import OutputAsk, PromptOverflow, TokenBudget
from realtime.pipeline.constraints import ConstraintPlan, Constraints
from realtime.pipeline.engine_requests import EngineRequestBuilder
from realtime.pipeline.generation import text_steps
from realtime.pipeline.sampling import check_token_ids
from realtime.pipeline.speculative import NextTurn, SpeculativePrefill
from realtime.protocol.errors import (
    EngineError,
    InvalidRequestError,
    ToolChoiceNotSatisfiedError,
    UnsupportedFeatureError,
)
from realtime.protocol.request import ChatCompletionRequest

#: Template variables the request itself decides; kwargs may not override them.
_RESERVED_TEMPLATE_KWARGS = frozenset({"messages", "tools", "add_generation_prompt"})


@dataclass(slots=True)
class PreparedChat:
    request: ChatCompletionRequest
    engine_request: EngineRequest
    delta: DeltaGenerator
    stops: StopMatcher
    top_logprobs: int
    #: Splits visible text into content, reasoning and tool calls (a no-op without parsers).
    output: ChatOutputParser
    #: The template input, kept only when the answer's next turn is to be warmed.
    next_turn: TemplateInput | None = None
    #: The constraint still to compile (`constrain()` puts it on the engine request).
    constraint: ConstraintPlan | None = None


class ChatPipeline:
    def __init__(
        self,
        engine: Engine,
        *,
        tool_parser: str | None = "auto",
        reasoning_parser: str | None = "auto",
        speculative_timeout: float = 30.0,
        max_speculative: int = 8,
        max_tokens_cap: int | None = None,
        constraint_limits: ConstraintLimits | None = None,
        meter: VllmMetrics | None = None,
    ):
        """`tool_parser`/`reasoning_parser`: a parser name, "auto" (chosen from the
        chat template when it clearly matches a family) or "none". Unknown names
        raise UnknownParserError listing the valid ones, at startup.

        `speculative_timeout`: seconds a next-turn warm-up may run (0 ignores the
        hint); `max_speculative`: warm-ups pending at once (the oldest goes).

        `max_tokens_cap`: the server's cap on an answer's tokens (`--max-tokens-cap`),
        shared with the text-completion pipeline built on this one.

        `constraint_limits`: what a client may ask the grammar engine to compile
        (`--max-schema-bytes`, `--max-schema-depth`, `--grammar-cache-size`).

        `meter`: records every engine request for vLLM's metrics, shared with
        `CompletionPipeline`."""
        self.engine = engine
        self.meter = meter
        self.speculative = SpeculativePrefill(
            engine, timeout=speculative_timeout, max_pending=max_speculative
        )
        info = engine.info
        self.model_name = info.name
        #: the path to engine requests, shared with `CompletionPipeline`
        self.requests = EngineRequestBuilder(engine, info.name, TokenBudget(max_tokens_cap))
        #: constrained decoding's plans and compiler, shared with `CompletionPipeline`
        self.constraints = Constraints(engine, constraint_limits)
        self.tool_parser = resolve_tool_parser(tool_parser, info.chat_template.source)
        self.reasoning_parser = resolve_reasoning_parser(
            reasoning_parser, info.chat_template.source
        )
        digest = hashlib.sha256(f"{__version__}:{type(engine).__name__}:{info.name}".encode())
        self.system_fingerprint = "fp_" + digest.hexdigest()[:10]

    # --- before generation ---

    def prepare(
        self,
        request: ChatCompletionRequest,
        *,
        stream: bool = True,
        session_id: str | None = None,
    ) -> PreparedChat:
        """Validate against the model and build the engine request. Raises RealtimeError.

        `session_id` names the conversation (a WebSocket session) the request belongs
        to: the engine's cache hint and, with `cache_salt`, its isolation key. It must
        come from the server (never from the client), so nobody can join another's.
        """
        requests = self.requests
        requests.check_model(request)
        _reject_unsupported(request)
        requests.check_ready()
        conversation = self._template_input(request)
        prompt_text, prompt_ids = self._render_prompt(request, conversation)
        completion_id = new_completion_id()
        limit = request.output_limit
        field = "max_completion_tokens" if request.max_completion_tokens else "max_tokens"
        [engine_request] = requests.build(
            request,
            [prompt_ids],
            [completion_id],
            ask=OutputAsk(limit, explicit=limit is not None, field=field),
            overflow=_overflow,
            logprobs=(request.top_logprobs or 0) if request.logprobs else None,
            session_id=session_id,
        )
        options = request.stream_options
        delta = DeltaGenerator(
            model=self.model_name,
            prompt_tokens=len(prompt_ids),
            # A non-streamed answer is folded from chunks; it always needs the usage.
            include_usage=request.include_usage or not stream,
            continuous_usage=bool(options and options.continuous_usage_stats),
            logprobs=bool(request.logprobs),
            extra_fields=request.extra_fields,
            system_fingerprint=self.system_fingerprint,
            completion_id=completion_id,
        )
        stops = StopMatcher(
            request.stop_strings, include_stop=bool(request.include_stop_str_in_output)
        )
        demands_call = request.tool_choice is not None and request.tool_choice not in (
            "none",
            "auto",
        )
        if demands_call and self.tool_parser in (None, "passthrough"):
            raise UnsupportedFeatureError(
                "tool_choice 'required' or a named function needs a tool parser; "
                "start the server with --tool-parser",
                param="tool_choice",
            )
        tools = [t.model_dump(exclude_none=True) for t in request.tools] if request.tools else None
        try:
            output = build_output_parser(
                tool_parser=self.tool_parser,
                reasoning_parser=self.reasoning_parser,
                tools=tools,
                tool_choice=request.tool_choice,
                parallel_tool_calls=request.parallel_tool_calls,
                chat_template_kwargs=request.chat_template_kwargs,
                prompt=prompt_text,
                incremental=stream,
            )
        except ToolChoiceError as exc:
            raise InvalidRequestError(str(exc), param="tool_choice") from None
        response_format = request.response_format
        plan = self.constraints.plan_chat(
            response_format=response_format.model_dump(by_alias=True, exclude_none=True)
            if response_format is not None
            else None,
            tools=tool_specs(tools),
            tool_parser=self.tool_parser,
            output=output,
        )
        warm = conversation is not None and _wants_warmup(request) and self.speculative.enabled
        return PreparedChat(
            request,
            engine_request,
            delta,
            stops,
            request.top_logprobs or 0,
            output,
            next_turn=conversation if warm else None,
            constraint=plan,
        )

    async def constrain(self, prepared: PreparedChat) -> None:
        """Compile the request's constraint (off the event loop) onto its engine request.

        Transports await this right after `prepare`, before they commit to an
        answer: an unenforceable schema is an InvalidRequestError here. `stream`
        calls it too (then it does nothing), so no constraint is ever skipped.
        """
        plan, prepared.constraint = prepared.constraint, None
        if plan is not None:
            prepared.engine_request.constraint = await self.constraints.compile(plan)

    def _template_input(self, request: ChatCompletionRequest) -> TemplateInput | None:
        """What the chat template gets; None when the client sent token ids instead."""
        if request.nvext is not None and request.nvext.token_data is not None:
            return None
        template_kwargs = request.chat_template_kwargs or {}
        reserved = sorted(set(template_kwargs) & _RESERVED_TEMPLATE_KWARGS)
        if reserved:
            raise InvalidRequestError(
                f"chat_template_kwargs may not set {reserved[0]!r};"
                " it comes from the request itself",
                param="chat_template_kwargs",
            )
        messages = [template_message(m.model_dump(exclude_none=True)) for m in request.messages]
        tools = [t.model_dump(exclude_none=True) for t in request.tools] if request.tools else None
        return TemplateInput(messages, tools, dict(template_kwargs))

    def _render_prompt(
        self, request: ChatCompletionRequest, conversation: TemplateInput | None
    ) -> tuple[str | None, list[int]]:
        """The prompt text (None when the client sent token ids) and its token ids."""
        info = self.engine.info
        if conversation is None:
            assert request.nvext is not None and request.nvext.token_data is not None
            check_token_ids(request.nvext.token_data, info.vocab_size, "nvext.token_data")
            return None, list(request.nvext.token_data)
        prompt = info.chat_template.render(
            conversation.messages,
            add_generation_prompt=True,
            tools=conversation.tools,
            **conversation.kwargs,
        )
        return prompt, info.tokenizer.encode(prompt)

    # --- generation ---

    async def stream(self, prepared: PreparedChat) -> AsyncGenerator[dict[str, Any], None]:
        """Chunks for one request. Engine faults end it with an `error` finish, then raise."""
        await self.constrain(prepared)
        tokenizer = self.engine.info.tokenizer
        delta, stops, output = prepared.delta, prepared.stops, prepared.output
        # Parsers must see their markers; some ([TOOL_CALLS], [THINK]) are special tokens.
        skip_special = prepared.request.skip_special_tokens is not False and not any(
            tokenizer.is_special(marker) for marker in output.markers
        )
        want_logprobs = prepared.engine_request.logprobs is not None
        finish: FinishReason | None = None
        #: the parsed answer, collected only when its next turn is to be warmed
        answer: list[OutputEvent] | None = [] if prepared.next_turn is not None else None
        plain = not output.active and answer is None
        steps = text_steps(
            self.engine,
            prepared.engine_request,
            tokenizer,
            stops,
            skip_special_tokens=skip_special,
            meter=self.meter,
        )
        try:
            async with aclosing(steps):
                async for step in steps:
                    if step.cached_tokens is not None:
                        delta.set_cached_tokens(step.cached_tokens)
                    delta.add_tokens(step.token_ids)
                    finish = step.finish
                    logprobs = (
                        format_logprobs(tokenizer, step.logprobs, prepared.top_logprobs)
                        if want_logprobs and step.logprobs
                        else None
                    )
                    if plain:
                        # No parser and nothing to collect: text goes straight to a chunk.
                        chunk = delta.content_chunk(step.text, logprobs)
                        if chunk is not None:
                            yield chunk
                    else:
                        events = output.feed(step.text)
                        if finish is not None and finish is not FinishReason.ERROR:
                            events += output.finish()
                        if answer is not None:
                            answer += events
                        for chunk in delta.event_chunks(events, logprobs):
                            yield chunk
                    if finish is FinishReason.ERROR:
                        raise EngineError(step.error or "the engine failed while generating")
            assert finish is not None  # text_steps ends on the finishing step or raises
            # A safety net (engines that constrain enforce tool_choice by grammar); an
            # answer cut off by max_tokens ends with "length" instead, like any other.
            violation = (
                output.tool_choice_violation() if finish is not FinishReason.LENGTH else None
            )
            if violation is not None:
                raise ToolChoiceNotSatisfiedError(violation, param="tool_choice")
        except EngineError:
            for chunk in delta.finish_chunks(FinishReason.ERROR):
                yield chunk
            raise
        if answer is not None:
            # Before the final chunk: a consumer may stop iterating right after it.
            self._warm_next_turn(prepared, answer)
        for chunk in delta.finish_chunks(finish):
            yield chunk

    async def complete(self, prepared: PreparedChat) -> dict[str, Any]:
        """The non-streaming `chat.completion`, folded from the same chunks."""
        aggregator = ChunkAggregator()
        async with aclosing(self.stream(prepared)) as chunks:
            async for chunk in chunks:
                aggregator.add(chunk)
        return aggregator.result()

    def _warm_next_turn(self, prepared: PreparedChat, answer: list[OutputEvent]) -> None:
        assert prepared.next_turn is not None
        request = prepared.engine_request
        self.speculative.schedule(
            NextTurn(
                completion_id=prepared.delta.id,
                conversation=prepared.next_turn,
                answer=fold_events(answer),
                cache_salt=request.cache_salt,
                session_id=request.session_id,
            )
        )

    # --- sessions and shutdown ---

    def end_session(self, session_id: str) -> None:
        """A session (socket) is over: cancel its warm-up, let the engine free its cache."""
        self.speculative.cancel_session(session_id)
        if isinstance(self.engine, SessionAwareEngine):
            self.engine.end_session(session_id)

    async def aclose(self) -> None:
        """Cancel pending warm-ups and start no more. Call before closing the engine."""
        await self.speculative.aclose()


def _reject_unsupported(request: ChatCompletionRequest) -> None:
    if request.n is not None and request.n > 1:
        raise UnsupportedFeatureError(
            "n > 1 is not supported; send one request per choice", param="n"
        )
    if request.modalities and set(request.modalities) - {"text"}:
        raise UnsupportedFeatureError("only the text modality is supported", param="modalities")
    for name in ("audio", "prediction", "web_search_options", "functions", "function_call"):
        if getattr(request, name) is not None:
            raise UnsupportedFeatureError(f"{name} is not supported", param=name)
    for index, message in enumerate(request.messages):
        content = getattr(message, "content", None)
        if isinstance(content, list):
            for part in content:
                if part.type not in ("text", "refusal"):
                    raise UnsupportedFeatureError(
                        f"this model accepts text only; {part.type!r} content is not supported",
                        param=f"messages.{index}.content",
                    )


def _overflow(overflow: PromptOverflow) -> InvalidRequestError:
    if overflow.room <= 0:
        return InvalidRequestError(
            f"the prompt is {overflow.prompt_tokens} tokens; the model's context is "
            f"{overflow.context_length} tokens",
            param="messages",
            code="context_length_exceeded",
        )
    return InvalidRequestError(
        f"{overflow.field} is {overflow.asked} but only {overflow.room} tokens fit after the "
        f"{overflow.prompt_tokens}-token prompt (context {overflow.context_length})",
        param=overflow.field,
        code="context_length_exceeded",
    )


def _wants_warmup(request: ChatCompletionRequest) -> bool:
    hints = request.nvext.agent_hints if request.nvext is not None else None
    return bool(hints is not None and hints.speculative_prefill)
