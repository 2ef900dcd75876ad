"""The Responses API on top of the chat pipeline: one run, for both transports.

    ResponsesRequest (request.py)
      -> begin(): the conversation (stored responses along previous_response_id,
         read from the stores, then the new input items) as chat messages
         (conversation.py), one ChatCompletionRequest-equivalent body, and the
         Response object (objects.py)
      -> build_prompt(): ChatPipeline.prepare (the same prepare every chat request
         goes through: template, budget, sampling, parsers)
      -> events(): `response.created`, the pipeline's chat chunks -> Responses
         events (events.py); at the end the response is stored, then its terminal
         event is sent
      -> complete(): the same events, folded into the final Response

HTTP calls `prepare()` (begin, then build_prompt: its errors are a 400 before any
event), then `events()` or `complete()`. WebSocket mode's job calls `begin()`
before the response's first event (its `previous_response_id` not found is an
`error` event), then `events()`, which builds the prompt after
`response.created` (its errors end the response `response.failed`). Nothing
here reads a store but `begin` and the stored-response operations, all awaited.

Errors from the chat side name chat fields (`messages`, `max_completion_tokens`,
`response_format`); they are renamed to the Responses fields here, once.

A transport gives `prepare` the caller's owner (`owner(api_key)`) and, on a
socket, `local`: the connection's own store for `store: false` responses, which
continuations on that socket may reference and nobody else can see.
"""

from __future__ import annotations

import re
from collections.abc import AsyncGenerator, Callable
from contextlib import aclosing
from dataclasses import dataclass
from typing import Any

import orjson
from pydantic import ValidationError

from realtime.dialects.chat.build import chat_generation
from realtime.dialects.chat.run import ChatRun
from realtime.dialects.responses import ids
from realtime.dialects.responses.conversation import chat_messages
from realtime.dialects.responses.errors import (
    NotCancellableError,
    PreviousResponseNotFoundError,
    ResponseNotFoundError,
)
from realtime.dialects.responses.events import ResponseEvents
from realtime.dialects.responses.objects import new_response
from realtime.dialects.responses.request import (
    ResponsesRequest,
    TextConfig,
    parse_responses_request,
)
from realtime.pipeline import ChatPipeline
from realtime.pipeline.offload import prepare_chat
from realtime.protocol.errors import InvalidRequestError, RealtimeError
from realtime.protocol.input_limits import DEFAULT_INPUT_LIMITS, InputLimits
from realtime.protocol.request import ChatCompletionRequest, validation_error_to_client
from realtime.store.base import Chain, ResponseStore, StoredResponse

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
    #: The chat request that generates it (`plan`).
    chat_request: ChatCompletionRequest
    events: ResponseEvents
    #: where the finished response is kept (None: nowhere, `store: false` over HTTP)
    store: ResponseStore | None
    owner: str | None
    #: False: the socket's warm-up (`generate: false`): the prompt is prefilled, no
    #: output is returned, and the response (input only) can be continued.
    generate: bool = True
    #: The socket's cache session (None over HTTP).
    session_id: str | None = None
    #: Characters of its frame and history: a large prompt is built off the event loop.
    size: int = 0
    #: The chat completion whose chunks the events are made from, once `build_prompt`
    #: built its prompt.
    chat: ChatRun | None = None

    @property
    def id(self) -> str:
        response_id: str = self.events.response["id"]
        return response_id

    def usage(self) -> dict[str, Any] | None:
        """The chat usage so far (None until the prompt was built)."""
        return self.chat.usage() if self.chat is not None else None


@dataclass(slots=True)
class ResponsePlan:
    chat: ChatCompletionRequest
    events: ResponseEvents
    generate: bool


class ResponsesService:
    def __init__(
        self,
        pipeline: ChatPipeline,
        store: ResponseStore,
        *,
        limits: InputLimits = DEFAULT_INPUT_LIMITS,
        max_chain: int = MAX_CHAIN,
    ) -> None:
        self.pipeline = pipeline
        self.store = store
        self.limits = limits
        self.max_chain = max_chain

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
        warm_next_turn: bool = False,
    ) -> PreparedResponse:
        """Everything that can fail before the first event (`begin`, then `build_prompt`).
        Raises RealtimeError.

        `session_id` is the socket's cache session; `warm_next_turn` warms the next
        turn's prefix after this answer (speculative prefill) whatever the request
        says; a request asks for it itself with `nvext.agent_hints.speculative_prefill`."""
        prepared = await self.begin(
            request,
            stream=stream,
            owner=owner,
            local=local,
            session_id=session_id,
            warm_next_turn=warm_next_turn,
        )
        await self.build_prompt(prepared)
        return prepared

    async def begin(
        self,
        request: ResponsesRequest,
        *,
        stream: bool,
        owner: str | None,
        local: ResponseStore | None = None,
        session_id: str | None = None,
        warm_next_turn: bool = False,
        size: int = 0,
    ) -> PreparedResponse:
        """The response planned from its stored history (read here, awaited) and its
        input: the chat request, the event builder, where it is kept. `size`: the
        characters of the frame it came in. Raises RealtimeError."""
        history = await self._history(request.previous_response_id, owner, local)
        plan = self.plan(request, history, stream=stream, warm_next_turn=warm_next_turn)
        if history:  # a long conversation is prepared off the event loop (`prepare_chat`)
            size += len(orjson.dumps(history))
        keep = self.store if request.stores else local
        return PreparedResponse(
            request, plan.chat, plan.events, keep, owner, plan.generate, session_id, size
        )

    async def build_prompt(self, prepared: PreparedResponse) -> ChatRun:
        """`ChatPipeline.prepare` of the response's chat request (off the event loop when
        it is large), as a `ChatRun`; its errors name the Responses fields."""
        try:
            stream = prepared.chat_request.stream is True
            generation = chat_generation(prepared.chat_request)
            ready = await prepare_chat(
                self.pipeline,
                generation,
                stream=stream,
                session_id=prepared.session_id,
                size=prepared.size,
            )
        except RealtimeError as exc:
            raise responses_error(exc) from None
        chat = prepared.chat = ChatRun(self.pipeline, prepared.chat_request, ready, stream=stream)
        return chat

    def plan(
        self,
        request: ResponsesRequest,
        history: list[dict[str, Any]],
        *,
        stream: bool,
        warm_next_turn: bool = False,
    ) -> ResponsePlan:
        """The chat request that generates the response and its event builder, without I/O
        (`begin` calls it with the history it read; the chat pipeline prepares it)."""
        messages = chat_messages([*history, *request.items], request.instructions)
        if not messages:
            raise InvalidRequestError(
                "input is empty: send input items (or continue a response that has some)",
                param="input",
            )
        generate = getattr(request, "generate", None) is not False
        body = chat_body(request, messages, stream=stream, warm_next_turn=warm_next_turn)
        if not generate:
            # One token is the least the engine computes; it is dropped, and nothing
            # that could fail on an answer (a required tool call) applies.
            body.update(max_completion_tokens=1, logprobs=False, tool_choice="none")
            body.pop("top_logprobs", None)
            body.pop("nvext", None)
        try:
            chat = ChatCompletionRequest.model_validate(body)
        except ValidationError as exc:
            raise responses_error(validation_error_to_client(exc)) from None
        tokenizer = self.pipeline.engine.info.tokenizer
        response = new_response(
            request, response_id=ids.response_id(), model=self.pipeline.model_name
        )
        events = ResponseEvents(
            response,
            logprobs=request.wants_logprobs,
            count_tokens=lambda text: len(tokenizer.encode(text)),
        )
        return ResponsePlan(chat, events, generate)

    async def events(
        self,
        prepared: PreparedResponse,
        *,
        on_chunk: Callable[[dict[str, Any]], None] | None = None,
    ) -> AsyncGenerator[dict[str, Any], None]:
        """Every event of the response, the terminal one last. Closing this generator
        early closes the pipeline's and with it the engine's (a cancel). The prompt is
        built here if `prepare` did not build it: after `response.created`, so that its
        errors end the response `response.failed`."""
        events = prepared.events
        for event in events.start():
            yield event
        usage = prepared.usage
        try:
            chat = prepared.chat
            if chat is None:
                chat = await self.build_prompt(prepared)
            chunks = chat.stream()
            async with aclosing(chunks):
                async for chunk in chunks:
                    if on_chunk is not None:
                        on_chunk(chunk)
                    if not prepared.generate:
                        continue  # a warm-up: the prefill is the point, not the token
                    for event in events.feed(chunk):
                        yield event
        except RealtimeError as exc:
            terminal = events.fail(responses_error(exc), usage())
        else:
            terminal = events.finish(usage() if prepared.generate else input_only_usage(usage()))
        # Stored before the terminal event, so a continuation sent the moment it
        # arrives finds it (the SQLite store returns at once and writes on its thread).
        await self._keep(prepared)
        for event in terminal:
            yield event

    async def complete(
        self,
        prepared: PreparedResponse,
        *,
        on_chunk: Callable[[dict[str, Any]], None] | None = None,
    ) -> dict[str, Any]:
        """The final Response. A failed one raises its error (it is stored as failed)."""
        async with aclosing(self.events(prepared, on_chunk=on_chunk)) as events:
            async for _ in events:
                pass
        if prepared.events.error is not None:
            raise prepared.events.error
        return prepared.events.response

    async def _keep(self, prepared: PreparedResponse) -> None:
        if prepared.store is None:
            return
        request = prepared.request
        response = prepared.events.response
        await prepared.store.put(
            StoredResponse(
                id=response["id"],
                owner=prepared.owner,
                created_at=float(response["created_at"]),
                previous_response_id=request.previous_response_id,
                response=response,
                input_items=request.items,
            )
        )

    async def _history(
        self, previous_id: str | None, owner: str | None, local: ResponseStore | None
    ) -> list[dict[str, Any]]:
        """The items of every response along the chain, oldest first (none without one)."""
        if previous_id is None:
            return []
        walk = _ChainWalk(previous_id, self.max_chain)
        stores = [local, self.store] if local is not None else [self.store]
        while walk.next_id is not None:
            for store in stores:
                if walk.add(await store.chain(walk.next_id, owner, walk.room)):
                    break
            else:
                raise PreviousResponseNotFoundError(previous_id, walk.next_id)
        return walk.items()

    # --- stored responses ---

    async def _find(
        self, response_id: str, owner: str | None, local: ResponseStore | None
    ) -> tuple[StoredResponse, ResponseStore]:
        for store in (local, self.store):
            if store is not None:
                record = await store.get(response_id, owner)
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
        default). `after` is the id of the last item of the previous page."""
        record, _ = await self._find(response_id, owner, local)
        items = list(record.input_items)
        if order == "desc":
            items.reverse()
        if after is not None:
            positions = [i for i, item in enumerate(items) if item.get("id") == after]
            if not positions:
                raise InvalidRequestError(
                    f"after: no input item with id '{after}' in response '{response_id}'",
                    param="after",
                )
            items = items[positions[0] + 1 :]
        page = items[:limit]
        return {
            "object": "list",
            "data": page,
            "first_id": page[0]["id"] if page else None,
            "last_id": page[-1]["id"] if page else None,
            "has_more": len(items) > limit,
        }

    async def delete(
        self, response_id: str, owner: str | None, local: ResponseStore | None = None
    ) -> dict[str, Any]:
        _, store = await self._find(response_id, owner, local)
        if not await store.delete(response_id, owner):
            raise ResponseNotFoundError(response_id)
        return {"id": response_id, "object": "response", "deleted": True}

    async def cancel(
        self, response_id: str, owner: str | None, local: ResponseStore | None = None
    ) -> dict[str, Any]:
        """Only background responses can be cancelled (OpenAI); this server has none."""
        await self._find(response_id, owner, local)
        raise NotCancellableError(response_id)

    async def aclose(self) -> None:
        await self.store.close()


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

    def items(self) -> list[dict[str, Any]]:
        """Each response's input items, then its output, oldest first."""
        items: list[dict[str, Any]] = []
        for record in reversed(self.records):
            items += record.input_items
            items += record.response.get("output") or []
        return items


def input_only_usage(usage: dict[str, Any] | None) -> dict[str, Any] | None:
    """A warm-up's usage: its prompt, and no output (the token it computed is dropped)."""
    if usage is None:
        return None
    return {**usage, "completion_tokens": 0, "total_tokens": usage.get("prompt_tokens", 0)}


def chat_body(
    request: ResponsesRequest,
    messages: list[dict[str, Any]],
    *,
    stream: bool,
    warm_next_turn: bool = False,
) -> dict[str, Any]:
    """The chat request that generates this response (validated by the caller)."""
    body: dict[str, Any] = {"model": request.model, "messages": messages, "stream": stream}
    if stream:
        body["stream_options"] = {"include_usage": True}
    if request.max_output_tokens is not None:
        body["max_completion_tokens"] = request.max_output_tokens
    if request.temperature is not None:
        body["temperature"] = request.temperature
    if request.top_p is not None:
        body["top_p"] = request.top_p
    if request.wants_logprobs:
        body["logprobs"] = True
        if request.top_logprobs:
            body["top_logprobs"] = request.top_logprobs
    tools = request.function_tools.chat
    if tools:
        body["tools"] = tools
    if request.chat_tool_choice is not None:
        body["tool_choice"] = request.chat_tool_choice
    if request.parallel_tool_calls is not None:
        body["parallel_tool_calls"] = request.parallel_tool_calls
    response_format = chat_response_format(request.text)
    if response_format is not None:
        body["response_format"] = response_format
    if warm_next_turn or request.warms_next_turn:
        body["nvext"] = {"agent_hints": {"speculative_prefill": True}}
    return body


def chat_response_format(text: TextConfig | None) -> dict[str, Any] | None:
    """`text.format` as the chat request's `response_format` (structured outputs).

    The Responses form is flat (`{"type": "json_schema", "name", "schema", ...}`); the
    chat form nests the schema under `json_schema`. The chat pipeline then enforces it
    on the engines that constrain generation and refuses it on the others, and its
    errors name `text.format` (see `responses_error`).
    """
    fmt = text.format if text is not None else None
    if fmt is None or fmt.type == "text":
        return None
    if fmt.type == "json_object":
        return {"type": "json_object"}
    spec: dict[str, Any] = {"name": fmt.name, "schema": fmt.schema_}
    if fmt.description is not None:
        spec["description"] = fmt.description
    if fmt.strict is not None:
        spec["strict"] = fmt.strict
    return {"type": "json_schema", "json_schema": spec}


#: Chat field names in errors -> the Responses fields they come from.
_RENAMED = {
    "messages": "input",
    "max_completion_tokens": "max_output_tokens",
    "max_tokens": "max_output_tokens",
    "response_format": "text.format",
    "logprobs": "include",
}
_CHAT_FIELD = re.compile(r"\b(max_completion_tokens|max_tokens|response_format)\b")


def responses_error(error: RealtimeError) -> RealtimeError:
    """`error` with the chat fields it names renamed to the Responses ones (in place)."""
    param = error.param
    if param:
        head, _, rest = param.partition(".")
        if head == "messages":
            error.param = "input"  # items and messages do not map one to one
        elif head == "tools" and ".function." in param:
            error.param = param.replace(".function.", ".", 1)
        elif head in _RENAMED:
            error.param = _RENAMED[head] + (f".{rest}" if rest else "")
    message = _CHAT_FIELD.sub(lambda m: _RENAMED[m.group(1)], error.message)
    if message != error.message:
        error.message = message
        error.args = (message,)
    return error
