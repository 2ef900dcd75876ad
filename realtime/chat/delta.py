"""DeltaGenerator: engine progress -> `chat.completion.chunk` dicts, exactly as OpenAI shapes them.

One generator per request. Both transports send what it returns and nothing
else, so a WebSocket client and an SSE client see identical chunks. Chunks are
plain dicts (serialized with orjson by the transport): building a pydantic model
per token costs ~20x more and buys nothing on this path.

OpenAI's rules kept here:
* `id` is `chatcmpl-...`, stable for the request; `created` is fixed at start;
* the first chunk carries `delta.role = "assistant"`, later ones never do;
* the last choice chunk has an empty delta and the `finish_reason`;
* with `stream_options.include_usage` every chunk has `"usage": null` and one more
  chunk follows with `"choices": []` and the usage;
* a tool call's first delta carries `index`, `id`, `type: "function"` and
  `function: {"name": ..., "arguments": ""}`; later deltas for that index carry
  only `{"index": i, "function": {"arguments": piece}}`; the finish reason is
  `tool_calls` when calls were sent and the model stopped by itself;
* reasoning goes in `delta.reasoning_content`; when the first delta is not
  content, it says `"content": null` next to the role, as OpenAI's does;
* no chunk with an empty delta is sent, except the final one.

Parsed output (content, reasoning, tool calls) arrives as the events of
`realtime.protocol.output`; `event_chunks` turns one step's events into
chunks, one per kind of delta, neighbours of one kind merged.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Sequence
from typing import Any

from realtime.model.generation import FinishReason
from realtime.protocol.output import (
    ContentDelta,
    OutputEvent,
    ReasoningDelta,
    ToolCallStart,
    merge_adjacent,
)

_FINISH_NAMES = {
    FinishReason.EOS: "stop",
    FinishReason.STOP: "stop",
    FinishReason.LENGTH: "length",
    FinishReason.ERROR: "error",
    FinishReason.CANCELLED: "stop",
}


def finish_reason_name(reason: FinishReason) -> str:
    """The OpenAI `finish_reason` for an engine finish reason."""
    return _FINISH_NAMES[reason]


def new_completion_id() -> str:
    return f"chatcmpl-{uuid.uuid4().hex}"


class DeltaGenerator:
    def __init__(
        self,
        *,
        model: str,
        prompt_tokens: int,
        cached_tokens: int = 0,
        include_usage: bool = False,
        continuous_usage: bool = False,
        logprobs: bool = False,
        extra_fields: frozenset[str] = frozenset(),
        system_fingerprint: str | None = None,
        completion_id: str | None = None,
        created: int | None = None,
    ):
        self.id = completion_id or new_completion_id()
        self.created = int(time.time()) if created is None else created
        self.model = model
        self.system_fingerprint = system_fingerprint
        self.prompt_tokens = prompt_tokens
        self.cached_tokens = cached_tokens
        self.completion_tokens = 0
        self.include_usage = include_usage
        self.continuous_usage = continuous_usage
        self.logprobs = logprobs
        self.extra_fields = extra_fields
        self.finish_reason: str | None = None
        self._sent_role = False
        self.tool_calls_sent = 0
        self._token_ids: list[int] = []
        self._token_logprobs: list[dict[str, Any]] = []

    # --- accounting ---

    def add_tokens(self, token_ids: list[int]) -> None:
        """Count generated tokens (every token the engine produced, stop strings included)."""
        self.completion_tokens += len(token_ids)
        if self.extra_fields:
            self._token_ids.extend(token_ids)

    def set_cached_tokens(self, cached_tokens: int) -> None:
        self.cached_tokens = cached_tokens

    def usage(self) -> dict[str, Any]:
        return {
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "total_tokens": self.prompt_tokens + self.completion_tokens,
            "prompt_tokens_details": {"cached_tokens": self.cached_tokens},
        }

    # --- chunks ---

    def content_chunk(
        self, text: str, logprobs: list[dict[str, Any]] | None = None
    ) -> dict[str, Any] | None:
        """A chunk for new text (and the logprobs of the tokens behind it); None if empty."""
        if not text and not logprobs and self._sent_role:
            return None
        delta: dict[str, Any] = {"content": text}
        if not self._sent_role:
            delta = {"role": "assistant", "content": text}
            self._sent_role = True
        if logprobs is not None and "engine_data" in self.extra_fields:
            self._token_logprobs.extend(logprobs)
        choice_logprobs = {"content": logprobs, "refusal": None} if self.logprobs else None
        return self._chunk(
            [{"index": 0, "delta": delta, "logprobs": choice_logprobs, "finish_reason": None}]
        )

    def reasoning_chunk(self, text: str) -> dict[str, Any] | None:
        """A chunk for reasoning text (`delta.reasoning_content`); None if empty."""
        if not text:
            return None
        return self._delta_chunk({"reasoning_content": text})

    def tool_call_start_chunk(self, index: int, call_id: str, name: str) -> dict[str, Any]:
        """The first delta of tool call `index`: its id, type and name, empty arguments."""
        self.tool_calls_sent += 1
        call = {
            "index": index,
            "id": call_id,
            "type": "function",
            "function": {"name": name, "arguments": ""},
        }
        return self._delta_chunk({"tool_calls": [call]})

    def tool_call_arguments_chunk(self, index: int, text: str) -> dict[str, Any] | None:
        """The next piece of tool call `index`'s arguments; None if empty."""
        if not text:
            return None
        return self._delta_chunk(
            {"tool_calls": [{"index": index, "function": {"arguments": text}}]}
        )

    def event_chunks(
        self, events: Sequence[OutputEvent], logprobs: list[dict[str, Any]] | None = None
    ) -> list[dict[str, Any]]:
        """Chunks for one step of parsed output, in order; the step's logprobs ride on
        the first. With no events this is `content_chunk("", logprobs)`: the role
        chunk at the start, a logprobs-only chunk for held-back text, else nothing."""
        chunks: list[dict[str, Any]] = []
        for event in merge_adjacent(list(events)):
            chunk: dict[str, Any] | None
            if isinstance(event, ContentDelta):
                chunk = self.content_chunk(event.text) if event.text else None
            elif isinstance(event, ReasoningDelta):
                chunk = self.reasoning_chunk(event.text)
            elif isinstance(event, ToolCallStart):
                chunk = self.tool_call_start_chunk(event.index, event.id, event.name)
            else:
                chunk = self.tool_call_arguments_chunk(event.index, event.text)
            if chunk is not None:
                chunks.append(chunk)
        if not chunks:
            chunk = self.content_chunk("", logprobs)
            return [chunk] if chunk is not None else []
        if logprobs is not None:
            if "engine_data" in self.extra_fields:
                self._token_logprobs.extend(logprobs)
            if self.logprobs:
                chunks[0]["choices"][0]["logprobs"] = {"content": logprobs, "refusal": None}
        return chunks

    def _delta_chunk(self, delta: dict[str, Any]) -> dict[str, Any]:
        if not self._sent_role:
            delta = {"role": "assistant", "content": None, **delta}
            self._sent_role = True
        choice_logprobs = {"content": None, "refusal": None} if self.logprobs else None
        return self._chunk(
            [{"index": 0, "delta": delta, "logprobs": choice_logprobs, "finish_reason": None}]
        )

    def finish_chunks(self, reason: FinishReason) -> list[dict[str, Any]]:
        """The final choice chunk, then the usage chunk when the client asked for usage."""
        self.finish_reason = finish_reason_name(reason)
        if self.tool_calls_sent and reason in (FinishReason.EOS, FinishReason.STOP):
            self.finish_reason = "tool_calls"
        delta: dict[str, Any] = {}
        if not self._sent_role:
            delta = {"role": "assistant", "content": ""}
            self._sent_role = True
        final = self._chunk(
            [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": self.finish_reason}]
        )
        nvext = self._nvext()
        if nvext:
            final["nvext"] = nvext
        chunks = [final]
        if self.include_usage:
            usage_chunk = self._chunk([])
            usage_chunk["usage"] = self.usage()
            chunks.append(usage_chunk)
        return chunks

    def _chunk(self, choices: list[dict[str, Any]]) -> dict[str, Any]:
        chunk: dict[str, Any] = {
            "id": self.id,
            "object": "chat.completion.chunk",
            "created": self.created,
            "model": self.model,
            "system_fingerprint": self.system_fingerprint,
            "choices": choices,
        }
        if self.continuous_usage and choices:
            chunk["usage"] = self.usage()
        elif self.include_usage:
            chunk["usage"] = None
        return chunk

    def _nvext(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if "completion_token_ids" in self.extra_fields:
            out["completion_token_ids"] = list(self._token_ids)
        if "engine_data" in self.extra_fields:
            out["engine_data"] = {
                "completion_token_ids": list(self._token_ids),
                "completion_logprobs": list(self._token_logprobs) or None,
            }
        return out
