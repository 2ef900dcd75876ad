"""The Responses API on top of the chat pipeline: one run, for both transports.

    ResponsesRequest (request.py)
      -> begin(): the conversation (stored responses along previous_response_id,
         read from the stores, then the new input items) as the neutral request
         (build.py), and the Response object (objects.py)
      -> build_prompt(): ChatPipeline.prepare (the same prepare every API's request
         goes through: template, budget, sampling, parsers) and the grammar's compile
      -> events(): `response.created`, the pipeline's typed output -> Responses
         events (events.py); at the end the response is stored, then its terminal
         event is sent
      -> complete(): the same events, folded into the final Response

HTTP calls `prepare()` (begin, then build_prompt: its errors are a 400 before any
event), then `events()` or `complete()`. WebSocket mode's job calls `begin()`
before the response's first event (its `previous_response_id` not found is an
`error` event), then `events()`, which builds the prompt after
`response.created` (its errors end the response `response.failed`). Nothing
here reads a store but `begin` and the stored-response operations, all awaited.

Errors name the Responses fields (`input`, `max_output_tokens`, `text.format`):
the neutral request carries them (`build.RESPONSES_PATHS`), so nothing is renamed.

A transport gives `prepare` the caller's owner (`owner(api_key)`) and, on a
socket, `local`: the connection's own store for `store: false` responses, which
continuations on that socket may reference and nobody else can see.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import time
from collections.abc import AsyncGenerator, Awaitable, Callable
from contextlib import aclosing
from dataclasses import dataclass, replace
from typing import Any, TypeVar

from realtime.dialects.responses import ids
from realtime.dialects.responses.build import responses_conversation, responses_generation
from realtime.dialects.responses.compaction import compact, parse_compact_request
from realtime.dialects.responses.context_management import DEFAULT_THRESHOLD_SHARE
from realtime.dialects.responses.conversations import ConversationLimits, Conversations
from realtime.dialects.responses.errors import (
    NotCancellableError,
    PreviousResponseNotFoundError,
    ResponseNotFoundError,
    StoreUnavailableError,
)
from realtime.dialects.responses.events import ResponseEvents, responses_usage
from realtime.dialects.responses.objects import new_response
from realtime.dialects.responses.reasoning_seal import ReasoningSeal
from realtime.dialects.responses.request import ResponsesRequest, parse_responses_request
from realtime.dialects.responses.steering import (
    AnswerMarks,
    Steer,
    SteerErrorCode,
    SteerFailure,
    Steering,
    failed_steer_event,
    steer_items,
)
from realtime.dialects.responses.truncation import fit_by_dropping_turns
from realtime.model.generation import FinishReason
from realtime.observability.logs import event as log_event
from realtime.pipeline import ChatPipeline, PreparedChat
from realtime.pipeline.events import Finish, Step, Usage
from realtime.pipeline.offload import off_loop, prepare_chat
from realtime.protocol.conversation import Item
from realtime.protocol.errors import InvalidRequestError, PromptTooLongError, RealtimeError
from realtime.protocol.generation_request import GenerationRequest, owned_by
from realtime.protocol.input_limits import DEFAULT_INPUT_LIMITS, InputLimits
from realtime.store.base import Chain, ResponseStore, StoredResponse, StoreError

T = TypeVar("T")

log = logging.getLogger("realtime.responses")

#: Responses followed back from a `previous_response_id` at most. The prompt's
#: token budget ends a long conversation far sooner; this bounds the lookups.
MAX_CHAIN = 10_000
#: `GET .../input_items`: `limit`'s default and maximum, as OpenAI's.
DEFAULT_LIST_LIMIT = 20
MAX_LIST_LIMIT = 100


@dataclass(slots=True)
class PreparedResponse:
    """One response between `begin` and its end: the run's state."""

    request: ResponsesRequest
    #: The neutral request that generates it (`plan`).
    generation: GenerationRequest
    events: ResponseEvents
    #: where the finished response is kept (None: nowhere, `store: false` over HTTP)
    store: ResponseStore | None
    owner: str | None
    #: False: the socket's warm-up (`generate: false`): the prompt is prefilled, no
    #: output is returned, and the response (input only) can be continued.
    generate: bool = True
    #: The cache session: the socket's, or over HTTP the one `prompt_cache_key` or an
    #: agent's session header chose (else None).
    session_id: str | None = None
    #: Characters of its frame and history: a large prompt is built off the event loop.
    size: int = 0
    #: The pipeline's prepared request, once `build_prompt` built its prompt.
    chat: PreparedChat | None = None
    #: WebSocket mode's steers (`response.steer`); None: the response takes none (HTTP).
    steering: Steering | None = None
    #: The tokens of the passes a steer ended (each steer runs a new pass), and of an
    #: automatic compaction's summary.
    prior: Usage | None = None
    #: With automatic compaction: the stored history (its items, then the input, are
    #: what is compacted); None without `context_management`.
    history: list[StoredResponse] | None = None
    #: The compaction item automatic compaction made (sent as the first output item).
    compaction: dict[str, Any] | None = None
    #: When it was created, not rounded (what the store's age limit counts from).
    created_at: float = 0.0

    @property
    def id(self) -> str:
        response_id: str = self.events.response["id"]
        return response_id

    def tokens(self) -> Usage | None:
        """The tokens so far (None until the prompt was built); a warm-up's answer
        counts none (the one token it computed is dropped)."""
        if self.chat is None:
            return self.prior  # a steer's next pass before its prompt was built
        usage = self.chat.usage
        if not self.generate:
            return Usage(usage.prompt_tokens, 0, usage.cached_tokens)
        prior = self.prior
        if prior is None:
            return usage
        return Usage(
            prior.prompt_tokens + usage.prompt_tokens,
            prior.completion_tokens + usage.completion_tokens,
            prior.cached_tokens + usage.cached_tokens,
        )

    def usage(self) -> dict[str, Any] | None:
        """The usage so far as the access log and the metrics read it."""
        tokens = self.tokens()
        return tokens.as_dict() if tokens is not None else None


@dataclass(slots=True)
class ResponsePlan:
    generation: GenerationRequest
    events: ResponseEvents
    generate: bool
    #: When the response was created (`time.time()`; the Response shows it whole).
    created_at: float


class ResponsesService:
    def __init__(
        self,
        pipeline: ChatPipeline,
        store: ResponseStore,
        *,
        limits: InputLimits = DEFAULT_INPUT_LIMITS,
        max_chain: int = MAX_CHAIN,
        seal: ReasoningSeal | None = None,
        conversation_limits: ConversationLimits | None = None,
    ) -> None:
        self.pipeline = pipeline
        self.store = store
        self.limits = limits
        self.max_chain = max_chain
        #: the Conversations API, and the conversations responses belong to (same store)
        self.conversations = Conversations(store, conversation_limits or ConversationLimits())
        #: seals and opens reasoning items' `encrypted_content` (a random key if none)
        self.seal = seal if seal is not None else ReasoningSeal()

    def owner(self, api_key: bytes | None) -> str | None:
        """The owner of what a caller with `api_key` stores (None on an open server)."""
        return self.store.owner(api_key)

    def parse(
        self, data: Any, model: type[ResponsesRequest] = ResponsesRequest
    ) -> ResponsesRequest:
        return parse_responses_request(data, self.limits, model)

    # --- creating a response ---

    async def prepare(
        self,
        request: ResponsesRequest,
        *,
        stream: bool,
        owner: str | None,
        local: ResponseStore | None = None,
        session_id: str | None = None,
        cache_salt: str | None = None,
        warm_next_turn: bool = False,
        size: int = 0,
    ) -> PreparedResponse:
        """Everything that can fail before the first event (`begin`, then `build_prompt`).
        Raises RealtimeError. `size`: the bytes of the body it came in, which decide
        (with the stored history's) whether planning and the prompt run off the loop.

        `session_id` is the cache session (the socket's, or over HTTP the one
        `prompt_cache_key` or a session header names) and `cache_salt` the caller's salt
        (`owned_by`); `warm_next_turn` warms the next
        turn's prefix after this answer (speculative prefill) whatever the request
        says; a request asks for it itself with `nvext.agent_hints.speculative_prefill`."""
        prepared = await self.begin(
            request,
            stream=stream,
            owner=owner,
            local=local,
            session_id=session_id,
            cache_salt=cache_salt,
            warm_next_turn=warm_next_turn,
            size=size,
        )
        if cache_salt is not None:
            prepared.generation = replace(prepared.generation, cache_salt=cache_salt)
        await self.build_prompt(prepared, stream=stream)
        return prepared

    async def begin(
        self,
        request: ResponsesRequest,
        *,
        stream: bool,
        owner: str | None,
        local: ResponseStore | None = None,
        session_id: str | None = None,
        cache_salt: str | None = None,
        warm_next_turn: bool = False,
        size: int = 0,
    ) -> PreparedResponse:
        """The response planned from its stored history (read here, awaited) and its
        input: the chat request, the event builder, where it is kept. `size`: the
        characters of the frame it came in. Raises RealtimeError.

        The records' sizes are known before any work (the store counts them), so a
        long conversation is rebuilt, and later prepared, in a worker thread
        (`off_loop`): tens of thousands of items would stall every client's loop. A
        response in a `conversation` is planned the same way from the conversation's
        items (one record, `Conversations.context`)."""
        conversation_id = request.conversation_id
        if conversation_id is not None:
            records = [await self.conversations.context(conversation_id, owner)]
        else:
            records = await self._history(request.previous_response_id, owner, local)
        _log_hosted_tools(request)
        size += sum(record.size for record in records)
        work = functools.partial(
            self._plan_from,
            request,
            records,
            stream=stream,
            warm_next_turn=warm_next_turn,
        )
        plan = await off_loop(work, size)
        keep = self.store if request.stores else local
        generation = owned_by(plan.generation, cache_salt)
        prepared = PreparedResponse(
            request,
            generation,
            plan.events,
            keep,
            owner,
            plan.generate,
            session_id,
            size,
            created_at=plan.created_at,
        )
        if request.compact_threshold is not None:
            prepared.history = records
        return prepared

    def _plan_from(
        self,
        request: ResponsesRequest,
        records: list[StoredResponse],
        *,
        stream: bool,
        warm_next_turn: bool,
    ) -> ResponsePlan:
        if request.conversation_id is not None:
            _check_new_ids(records[0].input_items, request.items)
        return self.plan(
            request, history_items(records), stream=stream, warm_next_turn=warm_next_turn
        )

    async def build_prompt(self, prepared: PreparedResponse, *, stream: bool) -> PreparedChat:
        """`ChatPipeline.prepare` of the response's request (off the event loop when it
        is large), then its grammar's compile; errors name the Responses fields. With
        `context_management`, a prompt past the threshold (or past the context) is
        compacted first (`_compact`)."""
        try:
            chat = await self._prepare_chat(prepared, stream)
        except PromptTooLongError as too_long:
            if prepared.history is None or prepared.compaction is not None:
                if prepared.request.truncation != "auto":
                    raise
                chat = await self._truncate(prepared, stream, too_long)
            else:
                chat = None
        if prepared.history is not None and prepared.compaction is None:
            threshold = prepared.request.compact_threshold or int(
                DEFAULT_THRESHOLD_SHARE * self.pipeline.engine.info.context_length
            )
            if chat is None or chat.usage.prompt_tokens > threshold:
                history = prepared.history
                items = await off_loop(functools.partial(history_items, history), prepared.size)
                await self._compact(prepared, [*items, *prepared.request.items])
                chat = await self._prepare_chat(prepared, stream)
        assert chat is not None
        prepared.chat = chat
        await self.pipeline.constrain(chat)
        return chat

    async def _truncate(
        self, prepared: PreparedResponse, stream: bool, too_long: PromptTooLongError
    ) -> PreparedChat:
        """`truncation: "auto"`: the prompt from the longest tail of the conversation that
        fits (`truncation.py`); the stored items keep the whole conversation."""
        generation = prepared.generation

        async def attempt(conversation: tuple[Item, ...]) -> PreparedChat:
            prepared.generation = replace(generation, conversation=conversation)
            return await self._prepare_chat(prepared, stream)

        try:
            chat, dropped = await fit_by_dropping_turns(generation.conversation, attempt, too_long)
        except PromptTooLongError:
            prepared.generation = generation
            raise
        log_event(
            log,
            "responses.truncated",
            id=prepared.id,
            dropped_items=dropped,
            prompt_tokens=chat.usage.prompt_tokens,
        )
        return chat

    async def _prepare_chat(self, prepared: PreparedResponse, stream: bool) -> PreparedChat:
        return await prepare_chat(
            self.pipeline,
            prepared.generation,
            stream=stream,
            session_id=prepared.session_id,
            size=prepared.size,
            request_id=prepared.id,
        )

    async def _compact(self, prepared: PreparedResponse, context: list[dict[str, Any]]) -> None:
        """Automatic compaction: the context summarized, the response's prompt rebuilt from
        the compaction (its system messages, the summary, the kept turn)."""
        request = prepared.request
        result = await compact(
            self.pipeline,
            request.model,
            context,
            session_id=prepared.session_id,
            cache_salt=prepared.generation.cache_salt,
        )
        prepared.compaction = result.item
        prepared.prior = result.usage
        prepared.generation = dataclasses.replace(
            prepared.generation,
            conversation=responses_conversation(result.output, request.instructions),
        )

    async def compact(self, data: Any, owner: str | None, size: int = 0) -> dict[str, Any]:
        """`POST /v1/responses/compact`: the context (the chain of `previous_response_id`,
        then `input`) compacted; OpenAI's `response.compaction` object. Nothing is stored.
        `size`: the body's bytes; validating a large one's items runs off the loop."""
        request, items = await off_loop(functools.partial(parse_compact_request, data), size)
        records = await self._history(request.previous_response_id, owner, None)
        history = await off_loop(
            functools.partial(history_items, records), sum(r.size for r in records)
        )
        result = await compact(
            self.pipeline,
            request.model,
            [*history, *items],
            instructions=request.instructions,
            cache_salt=owner,
        )
        return {
            "id": ids.new_id("resp"),
            "object": "response.compaction",
            "created_at": int(time.time()),
            "output": result.output,
            "usage": responses_usage(result.usage),
        }

    def plan(
        self,
        request: ResponsesRequest,
        history: list[dict[str, Any]],
        *,
        stream: bool,
        warm_next_turn: bool = False,
    ) -> ResponsePlan:
        """The neutral request that generates the response and its event builder, without
        I/O (`begin` calls it with the history it read; the pipeline prepares it)."""
        generate = getattr(request, "generate", None) is not False
        generation = responses_generation(
            request, history, generate=generate, warm_next_turn=warm_next_turn, seal=self.seal
        )
        tokenizer = self.pipeline.engine.info.tokenizer
        created_at = time.time()
        response = new_response(
            request,
            response_id=ids.response_id(),
            model=self.pipeline.model_name,
            created_at=int(created_at),
        )
        events = ResponseEvents(
            response,
            logprobs=request.wants_logprobs,
            count_tokens=lambda text: len(tokenizer.encode(text)),
            tools=request.function_tools,
            seal=self.seal if request.wants_encrypted_reasoning else None,
        )
        return ResponsePlan(generation, events, generate, created_at)

    async def events(
        self,
        prepared: PreparedResponse,
        *,
        on_step: Callable[[Step | Finish], None] | None = None,
    ) -> AsyncGenerator[dict[str, Any], None]:
        """Every event of the response, the terminal one last. Closing this generator
        early closes the pipeline's and with it the engine's (a cancel). The prompt is
        built here if `prepare` did not build it: after `response.created`, so that its
        errors end the response `response.failed`.

        With `prepared.steering` (WebSocket mode), steers waiting at a step boundary
        end the pass (the engine's request is closed) and start the next: the
        conversation, the answer so far and the steers' input, rendering into the
        same items (`_steer`). Steers still waiting when the response ends fail
        (`response.steer.failed`, before the terminal event)."""
        events = prepared.events
        steering = prepared.steering
        for event in events.start():
            yield event
        finish: Finish | None = None
        taken: list[Steer] = []
        try:
            chat = prepared.chat
            if chat is None:
                chat = await self.build_prompt(prepared, stream=True)
            if prepared.compaction is not None:
                for event in events.add_item(prepared.compaction):
                    yield event
            marks = AnswerMarks()
            while True:
                steered = False
                async with aclosing(self.pipeline.events(chat)) as steps:
                    async for step in steps:
                        if on_step is not None:
                            on_step(step)
                        if type(step) is not Step:
                            assert isinstance(step, Finish)
                            finish = step
                        elif prepared.generate:  # a warm-up: the prefill is the point
                            for event in events.step(step):
                                yield event
                            if (
                                steering is not None
                                and steering.pending
                                and events.can_steer
                                and _has_room(prepared)
                            ):
                                steered = True
                                break  # closes the pipeline's iterator: the engine stops
                if not steered and not self._steers_after(prepared, finish):
                    break
                taken = steering.take() if steering is not None else []
                chat = await self._steer(prepared, chat, marks, taken)
                taken = []
                finish = None
        except RealtimeError as exc:
            failed = self._end_steering(prepared, "successor_creation_failed", taken)
            terminal = events.fail(exc, prepared.tokens())
        else:
            failed = self._end_steering(prepared, "response_not_active")
            # A warm-up's one token is not an answer: it is complete, never cut off.
            reason = finish.reason if finish is not None and prepared.generate else None
            terminal = events.finish(reason, prepared.tokens())
        # Stored before the terminal event, so what a client is told is stored is (the
        # store returns once the record is durable), and a continuation sent the moment
        # the terminal event arrives finds it. A record that cannot be stored makes the
        # response fail instead: it is never acknowledged.
        try:
            await self._keep(prepared)
        except StoreError as exc:
            if events.error is None:
                terminal = events.not_stored(terminal, StoreUnavailableError(str(exc)))
        except RealtimeError as exc:  # its conversation could not take its items
            if events.error is None:
                terminal = events.not_stored(terminal, exc)
        for event in failed:
            yield event
        for event in terminal:
            yield event

    @staticmethod
    def _steers_after(prepared: PreparedResponse, finish: Finish | None) -> bool:
        """Whether steers still waiting when a pass ended run the next pass: yes after
        an answer that ended by itself (not cut off, not waiting for a tool's output)."""
        steering = prepared.steering
        return (
            steering is not None
            and bool(steering.pending)
            and finish is not None
            and finish.reason in (FinishReason.EOS, FinishReason.STOP)
            and prepared.events.can_steer
            and not prepared.events.ends_in_call
            and _has_room(prepared)
        )

    async def _steer(
        self,
        prepared: PreparedResponse,
        chat: PreparedChat,
        marks: AnswerMarks,
        steers: list[Steer],
    ) -> PreparedChat:
        """The next pass: the conversation so far, the answer written since the last pass
        and the steers' input; its token limit is what the response has left."""
        prepared.prior = prepared.tokens()
        generation = prepared.generation
        limit = generation.max_tokens
        if prepared.request.max_output_tokens is not None and prepared.prior is not None:
            limit = prepared.request.max_output_tokens - prepared.prior.completion_tokens
        conversation = (
            *generation.conversation,
            *marks.since(prepared.events.output_items),
            *steer_items(steers),
        )
        prepared.generation = dataclasses.replace(
            generation, conversation=conversation, max_tokens=limit
        )
        prepared.chat = None
        return await self.build_prompt(prepared, stream=True)

    @staticmethod
    def _end_steering(
        prepared: PreparedResponse, code: SteerErrorCode, taken: list[Steer] | None = None
    ) -> list[dict[str, Any]]:
        """Close the response to steers; `response.steer.failed` for those not applied."""
        steering = prepared.steering
        if steering is None:
            return []
        left = [*(taken or []), *steering.close()]
        message = (
            "the response ended before this input could join it (it ended with a tool call,"
            " reached its token limit, or failed); send it with the next response.create"
        )
        return [failed_steer_event(steer, SteerFailure(code, message)) for steer in left]

    async def complete(
        self,
        prepared: PreparedResponse,
        *,
        on_step: Callable[[Step | Finish], None] | None = None,
    ) -> dict[str, Any]:
        """The final Response. A failed one raises its error (it is stored as failed)."""
        async with aclosing(self.events(prepared, on_step=on_step)) as events:
            async for _ in events:
                pass
        if prepared.events.error is not None:
            raise prepared.events.error
        return prepared.events.response

    async def _keep(self, prepared: PreparedResponse) -> None:
        """The response's items added to its conversation (a response that did not fail),
        then the response stored; each durable before the terminal event is sent."""
        request = prepared.request
        response = prepared.events.response
        input_items = request.items + (
            prepared.steering.items if prepared.steering is not None else []
        )
        conversation_id = request.conversation_id
        if conversation_id is not None and prepared.events.error is None:
            items = [*input_items, *(response.get("output") or [])]
            await self.conversations.append(conversation_id, prepared.owner, items)
        if prepared.store is None:
            return
        await prepared.store.put(
            StoredResponse(
                id=response["id"],
                owner=prepared.owner,
                created_at=prepared.created_at or float(response["created_at"]),
                previous_response_id=request.previous_response_id,
                response=response,
                input_items=input_items,
            )
        )

    async def _history(
        self, previous_id: str | None, owner: str | None, local: ResponseStore | None
    ) -> list[StoredResponse]:
        """The records along the chain, newest first (none without one)."""
        if previous_id is None:
            return []
        walk = _ChainWalk(previous_id, self.max_chain)
        stores = [local, self.store] if local is not None else [self.store]
        while walk.next_id is not None:
            for store in stores:
                if walk.add(await _reading(store.chain(walk.next_id, owner, walk.room))):
                    break
            else:
                raise PreviousResponseNotFoundError(previous_id, walk.next_id)
        if walk.records[0].response.get("status") in ("queued", "in_progress"):
            raise InvalidRequestError(  # a background response has no answer to continue yet
                f"Previous response with id '{previous_id}' has not finished (status"
                f" {walk.records[0].response['status']}); continue it once it has",
                param="previous_response_id",
                code="previous_response_not_finished",
            )
        return walk.records

    # --- stored responses ---

    async def _find(
        self, response_id: str, owner: str | None, local: ResponseStore | None
    ) -> tuple[StoredResponse, ResponseStore]:
        for store in (local, self.store):
            if store is not None:
                record = await _reading(store.get(response_id, owner))
                if record is not None:
                    return record, store
        raise ResponseNotFoundError(response_id)

    async def retrieve(
        self, response_id: str, owner: str | None, local: ResponseStore | None = None
    ) -> dict[str, Any]:
        record, _ = await self._find(response_id, owner, local)
        return record.response

    async def input_items(
        self,
        response_id: str,
        owner: str | None,
        *,
        after: str | None = None,
        limit: int = DEFAULT_LIST_LIMIT,
        order: str = "desc",
        local: ResponseStore | None = None,
    ) -> dict[str, Any]:
        """A page of the response's input items (OpenAI's list object, newest first by
        default). `after` is the id of the last item of the previous page. Paged in a
        worker thread when the record is large."""
        record, _ = await self._find(response_id, owner, local)
        work = functools.partial(input_items_page, record, after=after, limit=limit, order=order)
        return await off_loop(work, record.size)

    async def delete(
        self, response_id: str, owner: str | None, local: ResponseStore | None = None
    ) -> dict[str, Any]:
        _, store = await self._find(response_id, owner, local)
        if not await _reading(store.delete(response_id, owner)):
            raise ResponseNotFoundError(response_id)
        return {"id": response_id, "object": "response", "deleted": True}

    async def cancel(
        self, response_id: str, owner: str | None, local: ResponseStore | None = None
    ) -> dict[str, Any]:
        """A response that is not a background one cannot be cancelled (OpenAI's 400);
        background ones are cancelled by `BackgroundRuns.cancel`."""
        await self._find(response_id, owner, local)
        raise NotCancellableError(response_id)

    async def aclose(self) -> None:
        await self.store.close()


def _log_hosted_tools(request: ResponsesRequest) -> None:
    """One INFO line per request that declares hosted tools: which fields were left out
    (their paths and types, never their contents)."""
    hosted = request.function_tools.hosted
    if hosted:
        params = [f"{path} ({kind})" for path, kind in hosted]
        log_event(log, "responses.hosted_tools", params=params)


class _ChainWalk:
    """Records gathered from `previous_response_id` backwards, across stores."""

    def __init__(self, previous_id: str, max_chain: int) -> None:
        self.previous_id = previous_id
        self.max_chain = max_chain
        self.records: list[StoredResponse] = []
        self.next_id: str | None = previous_id

    @property
    def room(self) -> int:
        return self.max_chain - len(self.records)

    def add(self, chain: Chain) -> bool:
        """Take what one store found; False when it had nothing of the chain."""
        if chain.truncated or len(self.records) + len(chain.records) >= self.max_chain:
            raise InvalidRequestError(
                f"the conversation before '{self.previous_id}' is longer than"
                f" {self.max_chain} responses",
                param="previous_response_id",
            )
        if not chain.records:
            return False
        self.records += chain.records
        self.next_id = chain.missing
        return True


def _check_new_ids(history: list[dict[str, Any]], items: list[dict[str, Any]]) -> None:
    """A response's input items may not reuse an id its conversation already holds."""
    held = {item.get("id") for item in history}
    for index, item in enumerate(items):
        if item["id"] in held:
            raise InvalidRequestError(
                f"Duplicate item id {item['id']!r} in input: input.{index}.id is already an"
                " item of the conversation; item ids must be unique within a conversation",
                param=f"input.{index}.id",
                code="duplicate_item_id",
            )


def _has_room(prepared: PreparedResponse) -> bool:
    """Whether the answer may grow: it has not used up `max_output_tokens`."""
    limit = prepared.request.max_output_tokens
    tokens = prepared.tokens()
    return limit is None or tokens is None or tokens.completion_tokens < limit


def history_items(records: list[StoredResponse]) -> list[dict[str, Any]]:
    """Each record's input items, then its output, oldest first (`records`: newest first)."""
    items: list[dict[str, Any]] = []
    for record in reversed(records):
        items += record.input_items
        items += record.response.get("output") or []
    return items


def input_items_page(
    record: StoredResponse, *, after: str | None, limit: int, order: str
) -> dict[str, Any]:
    """One page of `record`'s input items. Each page starts after the last item whose id
    is `after` (ids are unique within a response; in a record stored before they had to
    be, the last of equal ids), so following `last_id` always moves forward and ends."""
    items = record.input_items
    ordered = list(reversed(items)) if order == "desc" else list(items)
    start = 0
    if after is not None:
        positions = [i for i, item in enumerate(ordered) if item.get("id") == after]
        if not positions:
            raise InvalidRequestError(
                f"after: no input item with id '{after}' in response '{record.id}'",
                param="after",
            )
        start = positions[-1] + 1
    page = ordered[start : start + limit]
    return {
        "object": "list",
        "data": page,
        "first_id": page[0]["id"] if page else None,
        "last_id": page[-1]["id"] if page else None,
        "has_more": len(ordered) > start + limit,
    }


async def _reading(operation: Awaitable[T]) -> T:
    """A store operation, its `StoreError` as the client's 503."""
    try:
        return await operation
    except StoreError as exc:
        raise StoreUnavailableError(str(exc)) from None
