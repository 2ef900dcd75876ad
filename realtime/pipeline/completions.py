"""The /v1/completions pipeline: prompts in, typed per-choice events out.

It shares everything below the response shape with chat: the engine, the path
to engine requests (`engine_requests.py`: model check, token budget with the
server's cap, stops, sampling and the model's defaults, the id checks), the
visible-text loop (`generation.py`) and the errors. Each prompt becomes one
choice; several prompts are generated concurrently and their chunks interleave,
each tagged with its choice index, as OpenAI does.

Like the chat pipeline it yields typed events (`ChoiceEcho`, `ChoiceStep`,
`ChoiceFinish`), never wire shapes: the chat dialect's `CompletionRun` renders
them as `text_completion` chunks.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator
from contextlib import aclosing
from dataclasses import dataclass

from realtime.chat.completion_chunks import new_text_completion_id
from realtime.chat.stops import StopMatcher
from realtime.engine.base import EngineRequest
from realtime.model.generation import FinishReason
from realtime.pipeline.budget import OutputAsk, PromptOverflow
from realtime.pipeline.chat import ChatPipeline
from realtime.pipeline.constraints import ConstraintPlan, response_format_of
from realtime.pipeline.engine_errors import failed_generation
from realtime.pipeline.generation import TextStep, text_steps
from realtime.pipeline.prompt_floor import tokens_beyond_context
from realtime.pipeline.sampling import check_token_ids
from realtime.protocol.errors import InvalidRequestError
from realtime.protocol.generation_request import FieldPaths, GenerationRequest


@dataclass(frozen=True, slots=True)
class ChoiceEcho:
    """Choice `index` starts with its prompt's text (`echo`)."""

    index: int
    text: str


@dataclass(frozen=True, slots=True)
class ChoiceStep:
    """One engine step of choice `index`: its visible text, tokens and logprobs."""

    index: int
    step: TextStep


@dataclass(frozen=True, slots=True)
class ChoiceFinish:
    """Choice `index` ended. An `ERROR` finish is followed by the error, raised."""

    index: int
    reason: FinishReason


#: What `CompletionPipeline.events` yields; the choices' events interleave.
CompletionEvent = ChoiceEcho | ChoiceStep | ChoiceFinish


@dataclass(slots=True)
class PreparedCompletion:
    request: GenerationRequest
    engine_requests: list[EngineRequest]
    prompt_texts: list[str]
    #: prompt tokens of each choice
    prompt_tokens: list[int]
    id: str
    #: The `response_format` constraint still to compile (`constrain()`), shared by
    #: every choice: each starts its own matcher from it.
    constraint: ConstraintPlan | None = None
    #: each choice starts with its prompt's text
    echo: bool = False


class CompletionPipeline:
    """Text completions on the chat pipeline's engine and model."""

    def __init__(self, chat: ChatPipeline):
        self.chat = chat

    def prepare(
        self,
        request: GenerationRequest,
        *,
        echo: bool = False,
        session_id: str | None = None,
    ) -> PreparedCompletion:
        """Validate against the model and build one engine request per prompt.
        `echo`: each choice starts with its prompt's text; `session_id`: the cache
        session the transport chose (as `ChatPipeline.prepare`)."""
        chat = self.chat
        requests, paths = chat.requests, request.paths
        requests.check_model(request)
        info = requests.check_ready()
        completion_id = new_text_completion_id()
        prompts: list[list[int]] = []
        texts: list[str] = []
        request_ids: list[str] = []
        counts: list[int] = []
        for index, prompt in enumerate(request.prompts):
            if isinstance(prompt, str):
                floor = tokens_beyond_context(prompt, info)
                if floor is not None:
                    raise InvalidRequestError(
                        f"prompt {index} is at least {floor} tokens ({len(prompt)} characters); "
                        f"the model's context is {info.context_length} tokens",
                        param=paths.input,
                        code="context_length_exceeded",
                    )
                ids, text = info.tokenizer.encode(prompt), prompt
            else:
                ids = list(prompt)
                check_token_ids(ids, info.vocab_size, paths.input)
                text = info.tokenizer.decode(ids)
            prompts.append(ids)
            texts.append(text)
            request_ids.append(f"{completion_id}-{index}")
            counts.append(len(ids))
        engine_requests = requests.build(
            request,
            prompts,
            request_ids,
            ask=OutputAsk(
                request.max_tokens,
                explicit=request.max_tokens_explicit,
                field=paths.max_tokens,
                clamp=request.max_tokens_clamp,
            ),
            overflow=lambda overflow: _overflow(overflow, paths),
            logprobs=request.logprobs,
            session_id=session_id,
        )
        plan = chat.constraints.plan_completion(response_format_of(request.format), paths)
        return PreparedCompletion(
            request, engine_requests, texts, counts, completion_id, plan, echo
        )

    async def constrain(self, prepared: PreparedCompletion) -> None:
        """Compile the `response_format` constraint onto every choice's engine request
        (see `ChatPipeline.constrain`; `stream` calls it too)."""
        plan, prepared.constraint = prepared.constraint, None
        if plan is not None:
            compiled = await self.chat.constraints.compile(plan)
            for engine_request in prepared.engine_requests:
                engine_request.constraint = compiled

    async def events(self, prepared: PreparedCompletion) -> AsyncGenerator[CompletionEvent, None]:
        """Every choice's events; closing this closes every choice's engine iterator."""
        await self.constrain(prepared)
        queue: asyncio.Queue[CompletionEvent | BaseException | None] = asyncio.Queue()
        tasks = [
            asyncio.create_task(self._choice(prepared, index, queue))
            for index in range(len(prepared.engine_requests))
        ]
        try:
            remaining = len(tasks)
            while remaining:
                item = await queue.get()
                if item is None:
                    remaining -= 1
                elif isinstance(item, BaseException):
                    raise item
                else:
                    yield item
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    async def _choice(
        self,
        prepared: PreparedCompletion,
        index: int,
        queue: asyncio.Queue[CompletionEvent | BaseException | None],
    ) -> None:
        request = prepared.request
        try:
            if prepared.echo:
                queue.put_nowait(ChoiceEcho(index, prepared.prompt_texts[index]))
            stopping = request.stopping
            stops = StopMatcher(list(stopping.strings), include_stop=stopping.include_stop_string)
            steps = text_steps(
                self.chat.engine,
                prepared.engine_requests[index],
                self.chat.engine.info.tokenizer,
                stops,
                skip_special_tokens=request.skip_special_tokens is not False,
                paths=request.paths,
                meter=self.chat.meter,
            )
            async with aclosing(steps):
                async for step in steps:
                    queue.put_nowait(ChoiceStep(index, step))
                    if step.finish is not None:
                        queue.put_nowait(ChoiceFinish(index, step.finish))
                        if step.error is not None or step.finish.value == "error":
                            constraint = prepared.engine_requests[index].constraint
                            raise failed_generation(
                                step.error,
                                step.error_part,
                                constraint.param if constraint is not None else None,
                                request.paths,
                            )
            queue.put_nowait(None)
        except asyncio.CancelledError:
            raise
        except BaseException as exc:
            queue.put_nowait(exc)


def _overflow(overflow: PromptOverflow, paths: FieldPaths) -> InvalidRequestError:
    return InvalidRequestError(
        f"prompt {overflow.index} is {overflow.prompt_tokens} tokens and asks for "
        f"{overflow.asked} more; the model's context is {overflow.context_length} tokens",
        param=paths.max_tokens if overflow.room > 0 else paths.input,
        code="context_length_exceeded",
    )
