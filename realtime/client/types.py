"""Value types of the client library: the terminal frame, a folded answer, events, the retry policy.

Chunks themselves are `realtime.dialects.chat.response.ChatCompletionChunk`, the same
pydantic models that document the wire shape, so client and server cannot drift.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from realtime.dialects.chat.response import ChatCompletionChunk, FinishReasonName, Usage


class ResponseDone(BaseModel):
    """The `response.done` frame: the terminal frame of a request that ended without error."""

    model_config = ConfigDict(extra="allow")

    type: Literal["response.done"] = "response.done"
    request_id: str
    #: The chunks' `chatcmpl-` id; None when the request was cancelled before it started.
    id: str | None = None
    status: Literal["completed", "cancelled"]
    finish_reason: FinishReasonName | None = None
    #: Tokens so far; None when the request was cancelled before it started.
    usage: Usage | None = None


@dataclass
class ToolCall:
    """One tool call, folded from the `delta.tool_calls` pieces that share an `index`."""

    index: int
    id: str | None = None
    type: str = "function"
    name: str = ""
    arguments: str = ""

    def as_message_part(self) -> dict[str, Any]:
        """The shape an assistant message's `tool_calls` entry has in the next request."""
        return {
            "id": self.id,
            "type": self.type,
            "function": {"name": self.name, "arguments": self.arguments},
        }


def fold_tool_calls(calls: dict[int, ToolCall], pieces: list[dict[str, Any]]) -> None:
    """Add one chunk's `delta.tool_calls` to `calls`: ids arrive once, arguments in parts."""
    for piece in pieces:
        raw_index = piece.get("index", 0)
        index = raw_index if isinstance(raw_index, int) else 0
        call = calls.setdefault(index, ToolCall(index=index))
        if piece.get("id"):
            call.id = str(piece["id"])
        if piece.get("type"):
            call.type = str(piece["type"])
        function = piece.get("function") or {}
        if function.get("name"):
            call.name += str(function["name"])
        if function.get("arguments"):
            call.arguments += str(function["arguments"])


@dataclass
class ChatResult:
    """A whole answer, folded from its chunks (`ChatStream.collect()`)."""

    request_id: str
    text: str = ""
    reasoning: str = ""
    tool_calls: list[ToolCall] = field(default_factory=list)
    #: The terminal frame; None if the request was cancelled before it was sent.
    done: ResponseDone | None = None
    chunks: list[ChatCompletionChunk] = field(default_factory=list)

    @property
    def status(self) -> str:
        return self.done.status if self.done is not None else "cancelled"

    @property
    def finish_reason(self) -> str | None:
        return self.done.finish_reason if self.done is not None else None

    @property
    def usage(self) -> Usage | None:
        return self.done.usage if self.done is not None else None


ConnectionState = Literal["idle", "connecting", "open", "reconnecting", "closed"]


@dataclass(frozen=True)
class ClientEvent:
    """Something happened to the connection; passed to `RealtimeClient(on_event=...)`.

    kinds: `open` (connected or reconnected; `attempt` 0 for the first connection),
    `lost` (the socket closed; `code`, `reason`), `reconnecting` (the next attempt
    and its `delay`), `closed` (for good; `code`, `reason`), `server_error` (an
    `error` frame with `request_id` null, which ends no request; `error`).
    """

    kind: Literal["open", "lost", "reconnecting", "closed", "server_error"]
    attempt: int = 0
    delay: float | None = None
    code: int | None = None
    reason: str = ""
    error: Any = None


EventHandler = Callable[[ClientEvent], None]

#: Close codes after which connecting again may help: going away (a restart),
#: no close frame (the network), internal error (engine down), restart, try later.
RETRYABLE_CLOSE_CODES = frozenset({1001, 1006, 1011, 1012, 1013, 1014})


@dataclass(frozen=True)
class ReconnectPolicy:
    """When and how often to reconnect after the socket drops.

    The delay before attempt n (0-based) is `initial_delay * multiplier**n`,
    capped at `max_delay`, minus a random part of up to `jitter` of it, so that
    many clients dropped by one server restart do not come back in lock step.
    Reconnecting never resends a request that was already sent: such requests
    fail with `RequestInterruptedError`. Requests not yet sent wait for the new
    socket. After `max_attempts` failed attempts (None: never give up) the client
    is closed and waiting requests fail.
    """

    initial_delay: float = 0.25
    max_delay: float = 10.0
    multiplier: float = 2.0
    jitter: float = 0.5
    max_attempts: int | None = 8
    retry_on: frozenset[int] = RETRYABLE_CLOSE_CODES
    #: A connection that stayed open this long counts as healthy: the attempt count restarts.
    stable_after: float = 5.0

    def delay(self, attempt: int, rand: Callable[[], float] = random.random) -> float:
        base = min(self.max_delay, self.initial_delay * self.multiplier**attempt)
        return base * (1 - self.jitter * rand())

    def gives_up(self, attempt: int) -> bool:
        return self.max_attempts is not None and attempt >= self.max_attempts
