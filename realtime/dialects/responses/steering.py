"""`response.steer`: new user input joining a running response, without I/O.

A steer names a running response of the same socket (`previous_response_id`) and
carries user input. This module parses the event, keeps each response's queue of
accepted steers (`Steering`) and renders the SDK's steer events; the run
(`service.py`) applies the queue at a step boundary and the dialect answers.

The rules (documented in docs/protocol.md, "Steering"):

* input: a string, or 1-`MAX_STEER_ITEMS` user messages (`type` optional, `role`
  `user`, `content` a string or `input_text` parts): what OpenAI's beta accepts,
  less images and files, which a text model cannot read; at most
  `MAX_STEER_CHARS` characters of text. Anything else fails `invalid_input`.
* a response takes at most `MAX_PENDING_STEERS` steers waiting at once
  (`too_many_pending_steers`) and `MAX_STEERS_PER_RESPONSE` in all (each applied
  steer prefills the conversation again), also `too_many_pending_steers`.
* once the run decides the response is over (`close`), nothing more is accepted
  (`response_already_completed`), and what was still queued fails with the code
  the run gives (`response_not_active` when the answer ended in a tool call).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from realtime.dialects.responses import ids
from realtime.dialects.responses.items import normalize_input
from realtime.pipeline.items import OutputItem
from realtime.protocol.conversation import FunctionCall, Item, Message, Reasoning
from realtime.protocol.errors import RealtimeError

#: Messages one steer may carry.
MAX_STEER_ITEMS = 16
#: Characters of text one steer may carry (over all its messages).
MAX_STEER_CHARS = 32_768
#: Steers waiting for the next step boundary, per response.
MAX_PENDING_STEERS = 4
#: Steers one response takes in all (each one prefills the conversation again).
MAX_STEERS_PER_RESPONSE = 8
#: The fields a `response.steer` event may have (`stream_id`: see `parse_steer`).
STEER_FIELDS = frozenset({"type", "previous_response_id", "input", "stream_id"})

SteerErrorCode = Literal[
    "response_not_found",
    "invalid_input",
    "steering_not_supported",
    "too_many_pending_steers",
    "response_already_completed",
    "response_not_active",
    "successor_creation_failed",
]


@dataclass(frozen=True, slots=True)
class SteerFailure:
    """Why a steer was not (or could not be) applied."""

    code: SteerErrorCode
    message: str


@dataclass(frozen=True, slots=True)
class Steer:
    """An accepted (or parsed) steer: the client's input as sent and in normal form."""

    previous_response_id: str
    #: the input as `response.steer.failed` returns it: the client's string, or its
    #: messages in normal form (`type`, `id`, `status` filled in: the SDK's shape)
    input: Any
    #: the input as items in normal form (`items.normalize_input`): stored with the
    #: response's input items once applied
    items: list[dict[str, Any]]
    #: the lane the event named (None: none named)
    stream_id: str | None = None
    id: str = field(default_factory=lambda: ids.new_id("steer"))


@dataclass(frozen=True, slots=True)
class SteerRefused:
    """A steer event that failed before it reached a response."""

    failure: SteerFailure
    #: the target's id, when usable for the failed event
    previous_response_id: str | None
    #: the input as the failed event returns it: the client's string, else `[]` (input
    #: that failed validation may not fit the event's shape; the client has it)
    input: Any


def parse_steer(data: dict[str, Any]) -> Steer | SteerRefused:
    """A decoded `response.steer` event; never raises for bad input.

    `stream_id` is not one of the SDK's fields (the target decides the lane); a
    client that sends one anyway must name the target's lane (the dialect checks)."""
    previous = data.get("previous_response_id")
    previous_id = previous if isinstance(previous, str) and previous else None
    raw = data.get("input")

    def refuse(message: str) -> SteerRefused:
        shown = raw if isinstance(raw, str) else []
        return SteerRefused(SteerFailure("invalid_input", message), previous_id, shown)

    unknown = sorted(set(data) - STEER_FIELDS)
    if unknown:
        return refuse(f"response.steer: unknown field '{unknown[0][:64]}'")
    if previous_id is None:
        return refuse("response.steer: previous_response_id must be a non-empty string")
    stream_id = data.get("stream_id")
    if stream_id is not None and not isinstance(stream_id, str):
        return refuse("response.steer: stream_id must be a string")
    problem = _check_input(raw)
    if problem is not None:
        return refuse(problem)
    try:
        items = normalize_input(raw)
    except RealtimeError as exc:
        return refuse(f"response.steer: {exc.message}")
    return Steer(previous_id, raw if isinstance(raw, str) else items, items, stream_id)


def _check_input(raw: Any) -> str | None:
    """What is wrong with a steer's `input` (None: nothing), before it is normalized."""
    if isinstance(raw, str):
        if not raw:
            return "response.steer: input must not be empty"
        if len(raw) > MAX_STEER_CHARS:
            return f"response.steer: input has {len(raw)} characters; at most {MAX_STEER_CHARS}"
        return None
    if not isinstance(raw, list) or not raw:
        return "response.steer: input must be a non-empty string or a non-empty list of messages"
    if len(raw) > MAX_STEER_ITEMS:
        return f"response.steer: input has {len(raw)} items; at most {MAX_STEER_ITEMS}"
    chars = 0
    for index, item in enumerate(raw):
        where = f"input.{index}"
        if not isinstance(item, dict):
            return f"response.steer: {where} must be an object"
        if item.get("type", "message") != "message" or item.get("role") != "user":
            return f"response.steer: {where}: steering takes only messages with the user role"
        extra = sorted(set(item) - {"type", "role", "content"})
        if extra:
            return f"response.steer: {where}: unknown field '{extra[0][:64]}'"
        content = item.get("content")
        if isinstance(content, str):
            chars += len(content)
        elif isinstance(content, list) and content:
            for part_index, part in enumerate(content):
                if not isinstance(part, dict) or part.get("type") != "input_text":
                    return (
                        f"response.steer: {where}.content.{part_index}: only input_text parts"
                        " (this server serves a text model)"
                    )
                text = part.get("text")
                chars += len(text) if isinstance(text, str) else 0
        else:
            return f"response.steer: {where}.content must be a string or a list of parts"
        if chars > MAX_STEER_CHARS:
            return f"response.steer: input has more than {MAX_STEER_CHARS} characters of text"
    return None


class Steering:
    """One running response's steers: accepted, waiting, applied, or failed at its end."""

    def __init__(
        self,
        *,
        max_pending: int = MAX_PENDING_STEERS,
        max_steers: int = MAX_STEERS_PER_RESPONSE,
        unsupported: str | None = None,
    ) -> None:
        self.max_pending = max_pending
        self.max_steers = max_steers
        #: why this response takes no steers at all (None: it takes them)
        self.unsupported = unsupported
        self.pending: list[Steer] = []
        self.applied: list[Steer] = []
        self.closed = False

    def offer(self, steer: Steer) -> SteerFailure | None:
        """Queue `steer` for the next step boundary; the failure when it is refused."""
        if self.unsupported is not None:
            return SteerFailure("steering_not_supported", self.unsupported)
        if self.closed:
            return SteerFailure(
                "response_already_completed",
                f"response '{steer.previous_response_id}' has ended; send the input with the"
                " next response.create",
            )
        if len(self.pending) >= self.max_pending:
            return SteerFailure(
                "too_many_pending_steers",
                f"{self.max_pending} steers are already waiting for this response's next step",
            )
        if len(self.pending) + len(self.applied) >= self.max_steers:
            return SteerFailure(
                "too_many_pending_steers",
                f"a response takes at most {self.max_steers} steers",
            )
        self.pending.append(steer)
        return None

    def take(self) -> list[Steer]:
        """The waiting steers, now applied (in the order they were accepted)."""
        taken, self.pending = self.pending, []
        self.applied += taken
        return taken

    def close(self) -> list[Steer]:
        """The response is over: accept nothing more; the steers still waiting."""
        self.closed = True
        left, self.pending = self.pending, []
        return left

    @property
    def items(self) -> list[dict[str, Any]]:
        """The input items of every applied steer, in order (stored with the response)."""
        return [item for steer in self.applied for item in steer.items]


class AnswerMarks:
    """How much of each output item the model had already been shown again: each
    continuation's prompt carries only the answer written since the previous one."""

    def __init__(self) -> None:
        self._shown: dict[str, int] = {}

    def since(self, items: Iterable[OutputItem]) -> tuple[Item, ...]:
        """The answer written since the last call, as conversation items (an assistant
        message, reasoning, function calls), and mark it shown."""
        out: list[Item] = []
        for item in items:
            text = item.text
            start = self._shown.get(item.id, 0)
            if item.kind == "function_call":
                if start == 0 and item.status is not None:  # a closed call, once
                    out.append(FunctionCall(item.call_id, item.name, text))
                    self._shown[item.id] = max(len(text), 1)
                continue
            if len(text) > start:
                piece = text[start:]
                out.append(
                    Message("assistant", (piece,)) if item.kind == "message" else Reasoning(piece)
                )
                self._shown[item.id] = len(text)
        return tuple(out)


def steer_items(steers: Sequence[Steer]) -> tuple[Item, ...]:
    """The steers' input as user messages of the conversation."""
    out: list[Item] = []
    for steer in steers:
        for item in steer.items:
            texts = tuple(
                part["text"] for part in item["content"] if part.get("type") == "input_text"
            )
            out.append(Message("user", texts))
    return tuple(out)


# --- the SDK's steer events (`sequence_number` and `stream_id` are the dialect's) ---


def accepted_event(steer: Steer) -> dict[str, Any]:
    """`response.steer.accepted` (the SDK's `ResponseSteerAcceptedEvent`)."""
    return {
        "type": "response.steer.accepted",
        "steer": {"id": steer.id, "previous_response_id": steer.previous_response_id},
        "sequence_number": 0,
    }


def failed_event(
    failure: SteerFailure,
    previous_response_id: str,
    steer_input: Any,
    steer_id: str | None = None,
) -> dict[str, Any]:
    """`response.steer.failed` (the SDK's `ResponseSteerFailedEvent`): the input returned
    as sent, so the client can carry it into its next `response.create`."""
    steer: dict[str, Any] = {"previous_response_id": previous_response_id, "input": steer_input}
    if steer_id is not None:
        steer["id"] = steer_id
    return {
        "type": "response.steer.failed",
        "error": {
            "type": "invalid_request_error",
            "code": failure.code,
            "message": failure.message,
        },
        "steer": steer,
        "sequence_number": 0,
    }


def failed_steer_event(steer: Steer, failure: SteerFailure) -> dict[str, Any]:
    return failed_event(failure, steer.previous_response_id, steer.input, steer.id)
