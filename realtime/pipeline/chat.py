"""The chat pipeline every chat-style API calls (chat completions, Responses, Realtime...).

    GenerationRequest -> prepare() -> PreparedChat -> events() -> Steps, then a Finish

`prepare` does everything that can fail before generation starts (model lookup,
unsupported features, template rendering, tokenization, then the shared path to
an engine request in `engine_requests.py`: the token budget with the server's cap,
stops, sampling, and the plan of a constraint: `constraints.py`), so a transport
can answer with a proper status code before it commits to a stream, and never
adjusts what `prepare` returns. Then both transports `await constrain(prepared)`:
a constraint's grammar is compiled on a worker thread, and an invalid schema is
still a 400 (an `error` frame) there, before the first chunk.
`events` drives the engine and turns its tokens into typed output (text,
reasoning, tool calls: `realtime.pipeline.events`), which each API renders in its
own wire shapes; closing the returned iterator closes the engine's iterator, which
is how cancellation and client disconnects reach the engine. Errors name the field
the client sent (`request.paths`), whichever API it came through.

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

from realtime import __version__
from realtime.chat.conversation import (
    TemplateInput,
    template_input,
    template_tools,
)
from realtime.chat.delta import new_completion_id
from realtime.chat.logprobs import format_logprobs
from realtime.chat.reasoning.registry import resolve_reasoning_parser
from realtime.chat.stops import StopMatcher
from realtime.chat.tools.base import tool_specs
from realtime.chat.tools.choice import ToolChoiceError
from realtime.chat.tools.output import ChatOutputParser, build_output_parser
from realtime.chat.tools.registry import resolve_tool_parser
from realtime.constrain import ConstraintLimits
from realtime.engine.base import Engine, EngineRequest, SessionAwareEngine
from realtime.model.generation import FinishReason
from realtime.observability.vllm_metrics import VllmMetrics
from realtime.pipeline.budget import OutputAsk, PromptOverflow, TokenBudget
from realtime.pipeline.constraints import ConstraintPlan, Constraints, response_format_of
from realtime.pipeline.engine_errors import failed_generation
from realtime.pipeline.engine_requests import EngineRequestBuilder
from realtime.pipeline.events import Finish, Step, Usage
from realtime.pipeline.generation import text_steps
from realtime.pipeline.prompt_floor import refuse_beyond_context
from realtime.pipeline.sampling import check_token_ids
from realtime.pipeline.speculative import NextTurn, SpeculativePrefill
from realtime.protocol.errors import (
    EngineError,
    InvalidRequestError,
    PromptTooLongError,
    ToolChoiceNotSatisfiedError,
    UnsupportedFeatureError,
)
from realtime.protocol.generation_request import FieldPaths, GenerationRequest
from realtime.protocol.output import OutputEvent, fold_events


@dataclass(slots=True)
class PreparedChat:
    request: GenerationRequest
    engine_request: EngineRequest
    stops: StopMatcher
    #: Splits visible text into content, reasoning and tool calls (a no-op without parsers).
    output: ChatOutputParser
    #: the prompt's tokens, the cached ones and the answer's, as it grows
    usage: Usage
    #: The template input, kept only when the answer's next turn is to be warmed.
    next_turn: TemplateInput | None = None
    #: The constraint still to compile (`constrain()` puts it on the engine request).
    constraint: ConstraintPlan | None = None

    @property
    def id(self) -> str:
        """The id the engine request (and, for chat, every chunk) carries."""
        return self.engine_request.request_id


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
        max_tokens_policy: str = "clamp",
        constraint_limits: ConstraintLimits | None = None,
        meter: VllmMetrics | None = None,
    ):
        """`tool_parser`/`reasoning_parser`: a parser name, "auto" (chosen from the
        chat template when it clearly matches a family) or "none". Unknown names
        raise UnknownParserError listing the valid ones, at startup.

        `speculative_timeout`: seconds a next-turn warm-up may run (0 ignores the
        hint); `max_speculative`: warm-ups pending at once (the oldest goes).

        `max_tokens_cap`: the server's cap on an answer's tokens (`--max-tokens-cap`),
        shared with the text-completion pipeline built on this one;
        `max_tokens_policy`: "clamp" cuts a `max_tokens` beyond what fits to what fits,
        "error" refuses it (`--max-tokens-policy`, see `budget.py`).

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
        self.requests = EngineRequestBuilder(
            engine, info.name, TokenBudget(max_tokens_cap, max_tokens_policy)
        )
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
        request: GenerationRequest,
        *,
        stream: bool = True,
        session_id: str | None = None,
        request_id: str | None = None,
    ) -> PreparedChat:
        """Validate against the model and build the engine request. Raises RealtimeError.

        `session_id` names the conversation (a WebSocket session) the request belongs
        to: the engine's cache hint and, with `cache_salt`, its isolation key. It must
        come from the server (never from the client), so nobody can join another's.
        `request_id` is the engine request's id (default: a chat completion id);
        `stream` False parses the answer once, at its end.
        """
        requests, paths = self.requests, request.paths
        requests.check_model(request)
        requests.check_ready()
        conversation = self.template_input(request)
        prompt_text, prompt_ids = self.render_prompt(request, conversation, fit_context=True)
        request_id = request_id or new_completion_id()
        limit = request.max_tokens
        [engine_request] = requests.build(
            request,
            [prompt_ids],
            [request_id],
            ask=OutputAsk(
                limit,
                explicit=request.max_tokens_explicit,
                field=paths.max_tokens,
                clamp=request.max_tokens_clamp,
            ),
            overflow=lambda overflow: _overflow(overflow, paths),
            logprobs=request.logprobs,
            session_id=session_id,
        )
        stops = StopMatcher(
            list(request.stopping.strings), include_stop=request.stopping.include_stop_string
        )
        choice = request.tool_choice
        if choice is not None and choice not in ("none", "auto"):
            if self.tool_parser in (None, "passthrough"):
                raise UnsupportedFeatureError(
                    "tool_choice 'required' or a named function needs a tool parser; "
                    "start the server with --tool-parser",
                    param=paths.tool_choice,
                )
        tools = conversation.tools if conversation is not None else template_tools(request.tools)
        try:
            output = build_output_parser(
                tool_parser=self.tool_parser,
                reasoning_parser=self.reasoning_parser,
                tools=tools,
                tool_choice=choice,
                parallel_tool_calls=request.parallel_tool_calls,
                chat_template_kwargs=conversation.kwargs if conversation is not None else None,
                prompt=prompt_text,
                incremental=stream,
            )
        except ToolChoiceError as exc:
            raise InvalidRequestError(str(exc), param=paths.tool_choice) from None
        plan = self.constraints.plan_chat(
            response_format=response_format_of(request.format),
            tools=tool_specs(tools),
            tool_parser=self.tool_parser,
            output=output,
            paths=paths,
            thinking_budget=request.thinking_budget,
        )
        warm = conversation is not None and request.speculative_prefill and self.speculative.enabled
        return PreparedChat(
            request,
            engine_request,
            stops,
            output,
            Usage(len(prompt_ids)),
            next_turn=conversation if warm else None,
            constraint=plan,
        )

    async def constrain(self, prepared: PreparedChat) -> None:
        """Compile the request's constraint (off the event loop) onto its engine request.

        Transports await this right after `prepare`, before they commit to an
        answer: an unenforceable schema is an InvalidRequestError here. `events`
        calls it too (then it does nothing), so no constraint is ever skipped.
        """
        plan, prepared.constraint = prepared.constraint, None
        if plan is not None:
            prepared.engine_request.constraint = await self.constraints.compile(plan)

    def template_input(self, request: GenerationRequest) -> TemplateInput | None:
        """What the chat template gets (`realtime.chat.conversation.template_input`)."""
        return template_input(request)

    def render_prompt(
        self,
        request: GenerationRequest,
        conversation: TemplateInput | None,
        *,
        add_generation_prompt: bool = True,
        fit_context: bool = False,
    ) -> tuple[str | None, list[int]]:
        """The prompt text (None when the client sent token ids) and its token ids:
        exactly what generation sees (`/tokenize` answers with the same).

        `fit_context` refuses a text too long for the context whatever it encodes to
        (PromptTooLongError) before encoding it (`prompt_floor.py` says why)."""
        info = self.engine.info
        if conversation is None:
            assert request.prompt_token_ids is not None
            ids = list(request.prompt_token_ids)
            check_token_ids(ids, info.vocab_size, request.paths.token_ids)
            return None, ids
        prompt = info.chat_template.render(
            conversation.messages,
            add_generation_prompt=add_generation_prompt,
            tools=conversation.tools,
            **conversation.kwargs,
        )
        if fit_context:
            refuse_beyond_context(prompt, info, request.paths.input)
        return prompt, info.tokenizer.encode(prompt)

    # --- generation ---

    async def events(self, prepared: PreparedChat) -> AsyncGenerator[Step | Finish, None]:
        """One `Step` per engine step, then one `Finish`. Engine faults end it with an
        `ERROR` finish, then raise; a tool choice the answer missed raises at the end."""
        await self.constrain(prepared)
        tokenizer = self.engine.info.tokenizer
        request, stops, output, usage = (
            prepared.request,
            prepared.stops,
            prepared.output,
            prepared.usage,
        )
        # Parsers must see their markers; some ([TOOL_CALLS], [THINK]) are special tokens.
        skip_special = request.skip_special_tokens is not False and not any(
            tokenizer.is_special(marker) for marker in output.markers
        )
        top_logprobs = request.logprobs
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
            paths=request.paths,
            meter=self.meter,
        )
        try:
            async with aclosing(steps):
                async for step in steps:
                    if step.cached_tokens is not None:
                        usage.cached_tokens = step.cached_tokens
                    usage.completion_tokens += len(step.token_ids)
                    finish = step.finish
                    logprobs = (
                        format_logprobs(tokenizer, step.logprobs, top_logprobs)
                        if top_logprobs is not None and step.logprobs
                        else None
                    )
                    if plain:
                        # No parser and nothing to collect: the text is all content.
                        yield Step(step.token_ids, step.text, None, logprobs, step.cached_tokens)
                    else:
                        events = output.feed(step.text)
                        if finish is not None and finish is not FinishReason.ERROR:
                            events += output.finish()
                        if answer is not None:
                            answer += events
                        yield Step(step.token_ids, step.text, events, logprobs, step.cached_tokens)
                    if finish is FinishReason.ERROR:
                        constraint = prepared.engine_request.constraint
                        raise failed_generation(
                            step.error,
                            step.error_part,
                            constraint.param if constraint is not None else None,
                            request.paths,
                        )
            assert finish is not None  # text_steps ends on the finishing step or raises
            # A safety net (engines that constrain enforce tool_choice by grammar); an
            # answer cut off by max_tokens ends with "length" instead, like any other.
            violation = (
                output.tool_choice_violation() if finish is not FinishReason.LENGTH else None
            )
            if violation is not None:
                raise ToolChoiceNotSatisfiedError(violation, param=request.paths.tool_choice)
        except EngineError:
            yield Finish(FinishReason.ERROR, usage)
            raise
        except InvalidRequestError:
            if finish is FinishReason.ERROR:  # the request's grammar failed mid-answer
                yield Finish(FinishReason.ERROR, usage)
            raise
        if answer is not None:
            # Before the finish: a consumer may stop iterating right after it.
            self._warm_next_turn(prepared, answer)
        yield Finish(finish, usage)

    def _warm_next_turn(self, prepared: PreparedChat, answer: list[OutputEvent]) -> None:
        assert prepared.next_turn is not None
        request = prepared.engine_request
        self.speculative.schedule(
            NextTurn(
                completion_id=prepared.id,
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
        self.constraints.close()


def _overflow(overflow: PromptOverflow, paths: FieldPaths) -> InvalidRequestError:
    if overflow.room <= 0:
        return PromptTooLongError(
            f"the prompt is {overflow.prompt_tokens} tokens; the model's context is "
            f"{overflow.context_length} tokens",
            prompt_tokens=overflow.prompt_tokens,
            context_length=overflow.context_length,
            param=paths.input,
        )
    return InvalidRequestError(
        f"{overflow.field} is {overflow.asked} but only {overflow.room} tokens fit after the "
        f"{overflow.prompt_tokens}-token prompt (context {overflow.context_length})",
        param=overflow.field,
        code="context_length_exceeded",
    )
