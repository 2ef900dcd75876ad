"""The pipeline's typed output in, Responses server events out: one generator for SSE and
the socket.

The pipeline yields steps of parsed output (text, reasoning, tool calls) and a
finish; the output-item lifecycle every item API shares (`realtime.pipeline.items`)
says when each item opens, grows and closes, and `ResponseEvents` renders those
changes as the Responses event stream, numbering every event with
`sequence_number` from 0:

    response.created, response.in_progress
    per output item, in order:
      response.output_item.added
      message:   response.content_part.added, response.output_text.delta...,
                 response.output_text.done, response.content_part.done
      reasoning: response.content_part.added (reasoning_text),
                 response.reasoning_text.delta..., response.reasoning_text.done,
                 response.content_part.done
      function_call: response.function_call_arguments.delta...,
                     response.function_call_arguments.done
      custom_tool_call: response.custom_tool_call_input.delta (the whole input,
                     once the call is complete: the model writes it as the JSON
                     arguments `{"input": ...}`, which are only read whole),
                     response.custom_tool_call_input.done
      response.output_item.done
    then exactly one of response.completed / response.incomplete / response.failed

Reasoning is the model's own reasoning text (`<think>` blocks and the like, as
the reasoning parser splits them), so it is sent as `reasoning_text` content of
a `reasoning` item, never as a summary: nothing here summarizes. With a `seal`
(`include: ["reasoning.encrypted_content"]`) the finished item also carries the
text sealed as `encrypted_content`. A call of a function that came from a
`namespace` tool carries that `namespace`.

It is pure: no I/O, no clock beyond `completed_at`, events are plain dicts. A
transport frames them (SSE: `event:` and `data:` lines; the socket: one JSON
message each, with its `stream_id` added) and never changes what they say.
Treat the dicts as read-only: the terminal event carries the same `Response`
object that is stored.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import orjson

from realtime.dialects.responses import ids
from realtime.dialects.responses.reasoning_seal import ReasoningSeal
from realtime.dialects.responses.tools import CUSTOM_INPUT, FunctionTools
from realtime.model.generation import FinishReason
from realtime.pipeline.events import Step, Usage
from realtime.pipeline.items import (
    ItemChange,
    ItemClosed,
    ItemDelta,
    ItemKind,
    ItemOpened,
    OutputItem,
    OutputItems,
)
from realtime.protocol.errors import RealtimeError

_NEW_IDS: dict[ItemKind, Callable[[], str]] = {
    "message": ids.message_id,
    "reasoning": ids.reasoning_id,
    "function_call": ids.function_call_id,
}


def _new_id(kind: ItemKind) -> str:
    return _NEW_IDS[kind]()


def custom_input(arguments: str) -> str:
    """A custom tool's input from the arguments the model wrote (`{"input": "..."}`);
    arguments of another shape are the input as they are."""
    try:
        parsed = orjson.loads(arguments)
    except orjson.JSONDecodeError:
        return arguments
    if isinstance(parsed, dict) and isinstance(parsed.get(CUSTOM_INPUT), str):
        return str(parsed[CUSTOM_INPUT])
    return arguments


def socket_error_event(
    error: RealtimeError, *, stream_id: str | None = None, sequence_number: int | None = None
) -> dict[str, Any]:
    """The WebSocket mode's `error` event (the SDK's `ResponseWsError`): the OpenAI error
    object nested under `error`, with the HTTP status it would have had.

    Its shape differs from the SSE stream's flat `error` event (`error_event`): a
    socket error may belong to no response at all (a bad `response.create`), so it
    carries `status` and, when the request named one, its `stream_id`."""
    event: dict[str, Any] = {
        "type": "error",
        "status": error.status,
        "error": error.to_body()["error"],
    }
    if sequence_number is not None:
        event["sequence_number"] = sequence_number
    if stream_id is not None:
        event["stream_id"] = stream_id
    return event


#: The events whose `delta` concatenates: a slow reader may get two as one.
_DELTAS = frozenset(
    {
        "response.output_text.delta",
        "response.reasoning_text.delta",
        "response.function_call_arguments.delta",
    }
)


def fold_delta(held: dict[str, Any], event: dict[str, Any]) -> bool:
    """Append `event`'s delta to `held` (in place) when both are deltas of one item's
    text and nothing else differs; True when folded. The folded event keeps the later
    `sequence_number`, so the numbers still grow (with a gap where one was folded away,
    as a client resuming `starting_after` expects)."""
    kind = event.get("type")
    if (
        kind not in _DELTAS
        or held.get("type") != kind
        or held.keys() != event.keys()
        or held.get("item_id") != event.get("item_id")
        or held.get("output_index") != event.get("output_index")
        or held.get("content_index") != event.get("content_index")
        or held.get("stream_id") != event.get("stream_id")
    ):
        return False
    held["delta"] += event["delta"]
    if "logprobs" in event:
        held["logprobs"] = [*held["logprobs"], *event["logprobs"]]
    held["sequence_number"] = event["sequence_number"]
    return True


def responses_usage(usage: Usage | None, reasoning_tokens: int = 0) -> dict[str, Any]:
    """An answer's usage in the Responses spelling.

    `cache_write_tokens` is always 0: the engines here do not account cache
    writes separately (the SDK's type requires the field)."""
    prompt = usage.prompt_tokens if usage is not None else 0
    completion = usage.completion_tokens if usage is not None else 0
    cached = usage.cached_tokens if usage is not None else 0
    return {
        "input_tokens": prompt,
        "input_tokens_details": {"cached_tokens": cached, "cache_write_tokens": 0},
        "output_tokens": completion,
        "output_tokens_details": {"reasoning_tokens": min(reasoning_tokens, completion)},
        "total_tokens": prompt + completion,
    }


class ResponseEvents:
    """The events of one response, rendered from the pipeline's steps.

    `response` is the Response object (status `in_progress`, empty `output`); it is
    completed in place and is what the terminal event carries. `count_tokens`
    counts the reasoning text's tokens for `output_tokens_details.reasoning_tokens`.
    """

    def __init__(
        self,
        response: dict[str, Any],
        *,
        logprobs: bool = False,
        count_tokens: Callable[[str], int] = lambda text: 0,
        tools: FunctionTools | None = None,
        seal: ReasoningSeal | None = None,
    ) -> None:
        self.response = response
        self.logprobs = logprobs
        self.tools = tools if tools is not None else FunctionTools()
        self.seal = seal
        self._count_tokens = count_tokens
        self._sequence = 0
        self._items = OutputItems(_new_id, reasoning=True, logprobs=logprobs)
        #: The error a failed response ended with.
        self.error: RealtimeError | None = None
        #: A background response's `response.created` was sent at status `queued`
        #: (`queue`), so `start` sends only `response.in_progress`.
        self._queued = False

    # --- the answer so far (steering reads it) ---

    @property
    def output_items(self) -> list[OutputItem]:
        """Every output item so far, the open one included."""
        return self._items.items

    @property
    def can_steer(self) -> bool:
        """Whether the answer may be cut here for a steer: not inside a function call."""
        current = self._items.current
        return current is None or current.kind != "function_call"

    @property
    def ends_in_call(self) -> bool:
        """Whether the answer's last item is a function call (it waits for its output)."""
        items = self._items.items
        return bool(items) and items[-1].kind == "function_call"

    # --- events ---

    def _event(self, kind: str, **fields: Any) -> dict[str, Any]:
        event = {"type": kind, **fields, "sequence_number": self._sequence}
        self._sequence += 1
        return event

    def _snapshot(self) -> dict[str, Any]:
        return {**self.response, "output": list(self.response["output"])}

    def queue(self) -> list[dict[str, Any]]:
        """A background response's first events, as OpenAI's: `response.created` and
        `response.queued`, at status `queued`."""
        self._queued = True
        self.response["status"] = "queued"
        return [
            self._event("response.created", response=self._snapshot()),
            self._event("response.queued", response=self._snapshot()),
        ]

    def start(self) -> list[dict[str, Any]]:
        """`response.created` and `response.in_progress` (after `queue`: only the latter)."""
        if self._queued:
            self.response["status"] = "in_progress"
            return [self._event("response.in_progress", response=self._snapshot())]
        return [
            self._event("response.created", response=self._snapshot()),
            self._event("response.in_progress", response=self._snapshot()),
        ]

    def add_item(self, item: dict[str, Any]) -> list[dict[str, Any]]:
        """An item made whole before the answer (a compaction item): added and done at
        once, at the next output index."""
        index = self._items.offset
        self._items.offset += 1
        self.response["output"].append(item)
        return [
            self._event("response.output_item.added", output_index=index, item=item),
            self._event("response.output_item.done", output_index=index, item=item),
        ]

    def step(self, step: Step) -> list[dict[str, Any]]:
        """The events for one step of the answer (often one delta event, sometimes none)."""
        out: list[dict[str, Any]] = []
        for change in self._items.step(step):
            out += self._render(change)
        return out

    def finish(self, reason: FinishReason | None, usage: Usage | None) -> list[dict[str, Any]]:
        """Close the open item; `response.completed`, or `response.incomplete` when the
        answer reached its token limit."""
        if reason is FinishReason.LENGTH:
            status, incomplete = "incomplete", "max_output_tokens"
        else:
            status, incomplete = "completed", None
        out = self._close(status)
        response = self.response
        response["status"] = status
        if incomplete is None:
            response["completed_at"] = int(time.time())
        else:
            response["incomplete_details"] = {"reason": incomplete}
        response["usage"] = self._final_usage(usage)
        out.append(self._event(f"response.{status}", response=response))
        return out

    def fail(self, error: RealtimeError, usage: Usage | None = None) -> list[dict[str, Any]]:
        """Close the open item as incomplete; `response.failed` with the error."""
        self.error = error
        out = self._close("incomplete")
        response = self.response
        response["status"] = "failed"
        response["error"] = error.to_body()["error"]
        response["usage"] = self._final_usage(usage)
        out.append(self._event("response.failed", response=response))
        return out

    def cancel(self, usage: Usage | None = None) -> list[dict[str, Any]]:
        """A background response cancelled: the open item closed as incomplete, status
        `cancelled`. No terminal event: the SDK's stream events have none for it."""
        out = self._close("incomplete")
        response = self.response
        response["status"] = "cancelled"
        response["usage"] = self._final_usage(usage)
        return out

    def not_stored(
        self, terminal: list[dict[str, Any]], error: RealtimeError
    ) -> list[dict[str, Any]]:
        """`terminal` (from `finish`, not sent yet) with its last event, the response's
        end, made `response.failed` with `error`: the response could not be stored, so
        it is not acknowledged (its items were closed as they were)."""
        self.error = error
        response = self.response
        response["status"] = "failed"
        response["error"] = error.to_body()["error"]
        response["completed_at"] = None
        response["incomplete_details"] = None
        end = terminal[-1]
        failed = {"type": "response.failed", "response": response}
        return [*terminal[:-1], {**failed, "sequence_number": end["sequence_number"]}]

    def error_event(self, error: RealtimeError) -> dict[str, Any]:
        """An `error` event: for a stream that cannot end with its terminal event
        (the server's shutdown grace ran out, or an unexpected failure)."""
        body = error.to_body()["error"]
        return self._event("error", code=body["code"], message=body["message"], param=body["param"])

    # --- items ---

    def _close(self, status: str) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        for change in self._items.close("completed" if status == "completed" else "incomplete"):
            out += self._render(change)
        return out

    def _render(self, change: ItemChange) -> list[dict[str, Any]]:
        item = change.item
        index = item.index
        if isinstance(change, ItemDelta):
            if item.kind == "message":
                return [
                    self._event(
                        "response.output_text.delta",
                        item_id=item.id,
                        output_index=index,
                        content_index=0,
                        delta=change.text,
                        logprobs=change.logprobs,
                    )
                ]
            if item.kind == "reasoning":
                return [
                    self._event(
                        "response.reasoning_text.delta",
                        item_id=item.id,
                        output_index=index,
                        content_index=0,
                        delta=change.text,
                    )
                ]
            if item.name in self.tools.custom:
                return []  # its input is read from the whole arguments at the end
            return [
                self._event(
                    "response.function_call_arguments.delta",
                    item_id=item.id,
                    output_index=index,
                    delta=change.text,
                )
            ]
        if isinstance(change, ItemOpened):
            return self._opened(item)
        assert isinstance(change, ItemClosed)
        return self._closed(item, change.status)

    def _opened(self, item: OutputItem) -> list[dict[str, Any]]:
        """`response.output_item.added` for a new item, then its first content part's
        `response.content_part.added` where it has one."""
        part: dict[str, Any] | None
        if item.kind == "message":
            body, part = self._message(item, "in_progress", []), self._text_part(item, "")
        elif item.kind == "reasoning":
            body = self._reasoning_item(item, "in_progress", [])
            part = {"type": "reasoning_text", "text": ""}
        else:
            body, part = self._call_item(item, "in_progress"), None
        events = [self._event("response.output_item.added", output_index=item.index, item=body)]
        if part is not None:
            events.append(
                self._event(
                    "response.content_part.added",
                    item_id=item.id,
                    output_index=item.index,
                    content_index=0,
                    part=part,
                )
            )
        return events

    def _closed(self, item: OutputItem, status: str) -> list[dict[str, Any]]:
        index = item.index
        if item.kind == "message":
            part = self._text_part(item, item.text)
            done = self._message(item, status, [part])
            out = [
                self._event(
                    "response.output_text.done",
                    item_id=item.id,
                    output_index=index,
                    content_index=0,
                    text=item.text,
                    logprobs=list(item.logprobs) if self.logprobs else [],
                ),
                self._event(
                    "response.content_part.done",
                    item_id=item.id,
                    output_index=index,
                    content_index=0,
                    part=part,
                ),
            ]
        elif item.kind == "reasoning":
            part = {"type": "reasoning_text", "text": item.text}
            done = self._reasoning_item(item, status, [part])
            out = [
                self._event(
                    "response.reasoning_text.done",
                    item_id=item.id,
                    output_index=index,
                    content_index=0,
                    text=item.text,
                ),
                self._event(
                    "response.content_part.done",
                    item_id=item.id,
                    output_index=index,
                    content_index=0,
                    part=part,
                ),
            ]
        elif item.name in self.tools.custom:
            done = self._call_item(item, status)
            text = done["input"]
            out = [
                self._event(
                    "response.custom_tool_call_input.delta",
                    item_id=item.id,
                    output_index=index,
                    delta=text,
                ),
                self._event(
                    "response.custom_tool_call_input.done",
                    item_id=item.id,
                    output_index=index,
                    input=text,
                ),
            ]
        else:
            done = self._call_item(item, status)
            out = [
                self._event(
                    "response.function_call_arguments.done",
                    item_id=item.id,
                    output_index=index,
                    arguments=item.text,
                )
            ]
        self.response["output"].append(done)
        out.append(self._event("response.output_item.done", output_index=index, item=done))
        return out

    def _text_part(self, item: OutputItem, text: str) -> dict[str, Any]:
        part: dict[str, Any] = {"type": "output_text", "text": text, "annotations": []}
        if self.logprobs:
            part["logprobs"] = list(item.logprobs) if text else []
        return part

    @staticmethod
    def _message(item: OutputItem, status: str, content: list[dict[str, Any]]) -> dict[str, Any]:
        return {
            "id": item.id,
            "type": "message",
            "status": status,
            "role": "assistant",
            "content": content,
        }

    def _reasoning_item(
        self, item: OutputItem, status: str, content: list[dict[str, Any]]
    ) -> dict[str, Any]:
        body: dict[str, Any] = {
            "id": item.id,
            "type": "reasoning",
            "summary": [],
            "content": content,
            "status": status,
        }
        if self.seal is not None and content:
            body["encrypted_content"] = self.seal.seal(item.text)
        return body

    def _call_item(self, item: OutputItem, status: str) -> dict[str, Any]:
        body: dict[str, Any]
        if item.name in self.tools.custom:
            body = {
                "id": item.id,
                "type": "custom_tool_call",
                "status": status,
                "call_id": item.call_id,
                "name": item.name,
                "input": custom_input(item.text) if status != "in_progress" else "",
            }
        else:
            body = {
                "id": item.id,
                "type": "function_call",
                "status": status,
                "call_id": item.call_id,
                "name": item.name,
                "arguments": item.text,
            }
        namespace = self.tools.namespaces.get(item.name)
        if namespace is not None:
            body["namespace"] = namespace
        return body

    def _final_usage(self, usage: Usage | None) -> dict[str, Any]:
        reasoning = self._items.reasoning_text
        return responses_usage(usage, self._count_tokens(reasoning) if reasoning else 0)
