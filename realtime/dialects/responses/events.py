"""Chat chunks in, Responses server events out: one generator for SSE and the socket.

The chat pipeline already turns engine output into chunks, with the output
parsers applied (`reasoning_content`, `tool_calls`, `content`). `ResponseEvents`
folds those chunks into the Responses event stream, numbering every event with
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
      response.output_item.done
    then exactly one of response.completed / response.incomplete / response.failed

Reasoning is the model's own reasoning text (`<think>` blocks and the like, as
the reasoning parser splits them), so it is sent as `reasoning_text` content of
a `reasoning` item, never as a summary: nothing here summarizes.

It is pure: no I/O, no clock beyond `completed_at`, events are plain dicts. A
transport frames them (SSE: `event:` and `data:` lines; the socket: one JSON
message each, with its `stream_id` added) and never changes what they say.
Treat the dicts as read-only: the terminal event carries the same `Response`
object that is stored.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from realtime.dialects.responses import ids
from realtime.protocol.errors import RealtimeError

#: chat finish_reason -> (Response status, incomplete reason)
_STATUS = {
    "stop": ("completed", None),
    "tool_calls": ("completed", None),
    "length": ("incomplete", "max_output_tokens"),
}


@dataclass(slots=True)
class _Item:
    kind: str  # "message", "reasoning" or "function_call"
    id: str
    output_index: int
    pieces: list[str] = field(default_factory=list)
    logprobs: list[dict[str, Any]] = field(default_factory=list)
    call_id: str = ""
    name: str = ""

    @property
    def text(self) -> str:
        return "".join(self.pieces)


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


def responses_usage(chat_usage: dict[str, Any], reasoning_tokens: int = 0) -> dict[str, Any]:
    """A chat `usage` in the Responses spelling.

    `cache_write_tokens` is always 0: the engines here do not account cache
    writes separately (the SDK's type requires the field)."""
    prompt = chat_usage.get("prompt_tokens", 0)
    completion = chat_usage.get("completion_tokens", 0)
    cached = (chat_usage.get("prompt_tokens_details") or {}).get("cached_tokens", 0) or 0
    return {
        "input_tokens": prompt,
        "input_tokens_details": {"cached_tokens": cached, "cache_write_tokens": 0},
        "output_tokens": completion,
        "output_tokens_details": {"reasoning_tokens": min(reasoning_tokens, completion)},
        "total_tokens": prompt + completion,
    }


class ResponseEvents:
    """The events of one response, built from its chat chunks.

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
    ) -> None:
        self.response = response
        self.logprobs = logprobs
        self._count_tokens = count_tokens
        self._sequence = 0
        self._current: _Item | None = None
        #: chat tool-call index -> the function_call item it became
        self._calls: dict[int, _Item] = {}
        #: logprobs of tokens whose text is still held back (no delta yet)
        self._pending_logprobs: list[dict[str, Any]] = []
        self._finish_reason: str | None = None
        self._usage: dict[str, Any] | None = None
        self._reasoning: list[str] = []
        self._next_index = 0
        #: The error a failed response ended with.
        self.error: RealtimeError | None = None

    # --- events ---

    def _event(self, kind: str, **fields: Any) -> dict[str, Any]:
        event = {"type": kind, **fields, "sequence_number": self._sequence}
        self._sequence += 1
        return event

    def _snapshot(self) -> dict[str, Any]:
        return {**self.response, "output": list(self.response["output"])}

    def start(self) -> list[dict[str, Any]]:
        """`response.created` and `response.in_progress`."""
        return [
            self._event("response.created", response=self._snapshot()),
            self._event("response.in_progress", response=self._snapshot()),
        ]

    def feed(self, chunk: dict[str, Any]) -> list[dict[str, Any]]:
        """The events for one chat chunk (often one delta event, sometimes none)."""
        usage = chunk.get("usage")
        if usage:
            self._usage = usage
        choices = chunk.get("choices")
        if not choices:
            return []
        choice = choices[0]
        if choice.get("finish_reason") is not None:
            self._finish_reason = choice["finish_reason"]
        delta = choice["delta"]
        out: list[dict[str, Any]] = []
        reasoning = delta.get("reasoning_content")
        if reasoning:
            out += self._reasoning_delta(reasoning)
        calls = delta.get("tool_calls")
        if calls:
            for call in calls:
                out += self._tool_call_delta(call)
        content = delta.get("content")
        logprobs = choice.get("logprobs")
        # Logprobs belong to the message's text: those riding on a reasoning or
        # tool-call chunk are of tokens that are not in it.
        token_logprobs = (
            (logprobs.get("content") or []) if logprobs and isinstance(content, str) else []
        )
        if content:
            out += self._text_delta(content, token_logprobs)
        elif token_logprobs and self.logprobs:
            self._pending_logprobs += token_logprobs
        return out

    def finish(self, usage: dict[str, Any] | None = None) -> list[dict[str, Any]]:
        """Close the open item; `response.completed` or `response.incomplete` (length)."""
        status, reason = _STATUS.get(self._finish_reason or "stop", ("completed", None))
        out = self._close_current(status)
        response = self.response
        response["status"] = status
        if status == "completed":
            response["completed_at"] = int(time.time())
        else:
            response["incomplete_details"] = {"reason": reason}
        response["usage"] = self._final_usage(usage)
        out.append(self._event(f"response.{status}", response=response))
        return out

    def fail(
        self, error: RealtimeError, usage: dict[str, Any] | None = None
    ) -> list[dict[str, Any]]:
        """Close the open item as incomplete; `response.failed` with the error."""
        self.error = error
        out = self._close_current("incomplete")
        response = self.response
        response["status"] = "failed"
        response["error"] = error.to_body()["error"]
        response["usage"] = self._final_usage(usage)
        out.append(self._event("response.failed", response=response))
        return out

    def error_event(self, error: RealtimeError) -> dict[str, Any]:
        """An `error` event: for a stream that cannot end with its terminal event
        (the server's shutdown grace ran out, or an unexpected failure)."""
        body = error.to_body()["error"]
        return self._event("error", code=body["code"], message=body["message"], param=body["param"])

    # --- items ---

    def _open(self, kind: str, item_id: str) -> tuple[_Item, list[dict[str, Any]]]:
        out = self._close_current("completed")
        item = _Item(kind, item_id, self._next_index)
        self._next_index += 1
        self._current = item
        return item, out

    def _added(
        self, item: _Item, body: dict[str, Any], part: dict[str, Any] | None = None
    ) -> list[dict[str, Any]]:
        """`response.output_item.added` for a new item, then its first content part's
        `response.content_part.added` where it has one."""
        events = [
            self._event("response.output_item.added", output_index=item.output_index, item=body)
        ]
        if part is not None:
            events.append(
                self._event(
                    "response.content_part.added",
                    item_id=item.id,
                    output_index=item.output_index,
                    content_index=0,
                    part=part,
                )
            )
        return events

    def _text_delta(self, text: str, logprobs: list[dict[str, Any]]) -> list[dict[str, Any]]:
        item = self._current
        out: list[dict[str, Any]] = []
        if item is None or item.kind != "message":
            item, out = self._open("message", ids.message_id())
            out += self._added(
                item, self._message(item, "in_progress", []), self._text_part(item, "")
            )
        item.pieces.append(text)
        if self.logprobs:
            logprobs = self._pending_logprobs + logprobs if self._pending_logprobs else logprobs
            self._pending_logprobs = []
            item.logprobs += logprobs
        else:
            logprobs = []
        out.append(
            self._event(
                "response.output_text.delta",
                item_id=item.id,
                output_index=item.output_index,
                content_index=0,
                delta=text,
                logprobs=logprobs,
            )
        )
        return out

    def _reasoning_delta(self, text: str) -> list[dict[str, Any]]:
        item = self._current
        out: list[dict[str, Any]] = []
        if item is None or item.kind != "reasoning":
            item, out = self._open("reasoning", ids.reasoning_id())
            body = self._reasoning_item(item, "in_progress", [])
            out += self._added(item, body, {"type": "reasoning_text", "text": ""})
        item.pieces.append(text)
        self._reasoning.append(text)
        out.append(
            self._event(
                "response.reasoning_text.delta",
                item_id=item.id,
                output_index=item.output_index,
                content_index=0,
                delta=text,
            )
        )
        return out

    def _tool_call_delta(self, call: dict[str, Any]) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        function = call.get("function") or {}
        if "id" in call:  # the call's first delta: its id and name
            item, out = self._open("function_call", ids.function_call_id())
            item.call_id, item.name = call["id"], function.get("name", "")
            self._calls[call["index"]] = item
            out += self._added(item, self._call_item(item, "in_progress"))
        target = self._calls.get(call["index"])
        arguments = function.get("arguments")
        # Parsers finish one call before they start the next, so a delta is for the open one.
        if arguments and target is not None and target is self._current:
            target.pieces.append(arguments)
            out.append(
                self._event(
                    "response.function_call_arguments.delta",
                    item_id=target.id,
                    output_index=target.output_index,
                    delta=arguments,
                )
            )
        return out

    def _close_current(self, status: str) -> list[dict[str, Any]]:
        item = self._current
        if item is None:
            return []
        self._current = None
        index = item.output_index
        if item.kind == "message":
            if self.logprobs and self._pending_logprobs:
                item.logprobs += self._pending_logprobs
                self._pending_logprobs = []
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

    def _text_part(self, item: _Item, text: str) -> dict[str, Any]:
        part: dict[str, Any] = {"type": "output_text", "text": text, "annotations": []}
        if self.logprobs:
            part["logprobs"] = list(item.logprobs) if text else []
        return part

    @staticmethod
    def _message(item: _Item, status: str, content: list[dict[str, Any]]) -> dict[str, Any]:
        return {
            "id": item.id,
            "type": "message",
            "status": status,
            "role": "assistant",
            "content": content,
        }

    @staticmethod
    def _reasoning_item(item: _Item, status: str, content: list[dict[str, Any]]) -> dict[str, Any]:
        return {
            "id": item.id,
            "type": "reasoning",
            "summary": [],
            "content": content,
            "status": status,
        }

    @staticmethod
    def _call_item(item: _Item, status: str) -> dict[str, Any]:
        return {
            "id": item.id,
            "type": "function_call",
            "status": status,
            "call_id": item.call_id,
            "name": item.name,
            "arguments": item.text,
        }

    def _final_usage(self, usage: dict[str, Any] | None) -> dict[str, Any]:
        chat_usage = self._usage or usage or {}
        reasoning = "".join(self._reasoning)
        return responses_usage(chat_usage, self._count_tokens(reasoning) if reasoning else 0)
