"""One Realtime session's state and its answer to each client event, without I/O.

`EventSession.receive(text)` decodes an event, applies it, and returns what to
send and what to do: server events to send now, and at most one action (start
a response, cancel one). The dialect (I/O) carries the actions out and reports
back with `response_ended`. A refused event changes nothing and answers with an
`error` event naming the client's `event_id`; the session carries on.

Responses: at most one at a time writes to the conversation (OpenAI's rule);
out-of-band ones (`conversation: "none"`) may run beside it, all of them within
`--max-concurrent`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from realtime.dialects.realtime_events.build import realtime_generation
from realtime.dialects.realtime_events.conversation import (
    Conversation,
    item_bytes,
    item_chars,
    item_object,
)
from realtime.dialects.realtime_events.decode import decode_event, parse_input_entry
from realtime.dialects.realtime_events.errors import (
    ActiveResponseError,
    ConversationFullError,
    EventError,
    NoActiveResponseError,
    TooManyResponsesError,
    error_event,
)
from realtime.dialects.realtime_events.ids import EventIds, new_response_id
from realtime.dialects.realtime_events.limits import EventLimits
from realtime.dialects.realtime_events.models import (
    ClientEvent,
    ItemCreateEvent,
    ItemDeleteEvent,
    ItemReference,
    ItemRetrieveEvent,
    ItemTruncateEvent,
    ResponseCancelEvent,
    ResponseCreateEvent,
    SessionUpdateEvent,
)
from realtime.dialects.realtime_events.render import ResponseRenderer
from realtime.dialects.realtime_events.session_config import (
    GenerationConfig,
    check_model,
    check_tool_choice,
    session_object,
)
from realtime.protocol.errors import RealtimeError
from realtime.protocol.generation_request import GenerationRequest
from realtime.protocol.input_limits import InputLimits


@dataclass(slots=True)
class StartResponse:
    """Run `request`, rendered by `renderer`; a refusal by prepare names `client_event_id`."""

    request: GenerationRequest
    renderer: ResponseRenderer
    client_event_id: str | None


@dataclass(frozen=True, slots=True)
class CancelResponse:
    response_id: str


#: What a client event asks the dialect to do beyond sending events.
ResponseAction = StartResponse | CancelResponse


@dataclass(slots=True)
class EventReply:
    """The session's answer to one client event: events to send now, at most one action."""

    events: list[dict[str, Any]] = field(default_factory=list)
    action: ResponseAction | None = None
    #: The event's type, or "rejected" when it was refused (the frames-received metric's label).
    label: str = "rejected"


@dataclass(slots=True)
class _Active:
    renderer: ResponseRenderer
    in_conversation: bool


class EventSession:
    def __init__(
        self,
        session_id: str,
        served_model: str,
        requested_model: str | None,
        *,
        limits: EventLimits,
        input_limits: InputLimits,
    ):
        self.session_id = session_id
        self.served_model = served_model
        self.limits = limits
        self.input_limits = input_limits
        self.event_id = EventIds()
        self.config = GenerationConfig(model=None)
        #: The handshake's model, if not the served one: refused right after `session.created`.
        self._refusal: RealtimeError | None = None
        if requested_model is not None:
            try:
                self.config = GenerationConfig(
                    model=check_model(requested_model, served_model, "model")
                )
            except RealtimeError as exc:
                self._refusal = exc
        self.conversation = Conversation(limits)
        self.conversation_id = f"conv_{session_id.removeprefix('sess_')[:24]}"
        self.active: dict[str, _Active] = {}

    # --- the socket opens ---

    def open(self) -> list[dict[str, Any]]:
        """`session.created`, then an `error` if the handshake named a model not served."""
        events = [self._session_event("session.created")]
        if self._refusal is not None:
            events.append(error_event(self.event_id(), self._refusal, None))
        return events

    def _session_event(self, kind: str) -> dict[str, Any]:
        return {
            "type": kind,
            "event_id": self.event_id(),
            "session": session_object(self.session_id, self.config),
        }

    # --- client events ---

    def receive(self, text: str | bytes) -> EventReply:
        try:
            event = decode_event(text, self.input_limits, self.limits.max_item_parts)
        except EventError as exc:
            return EventReply([error_event(self.event_id(), exc.error, exc.client_event_id)])
        try:
            reply = self.handle(event)
        except RealtimeError as exc:
            return EventReply([error_event(self.event_id(), exc, event.event_id)])
        reply.label = event.type
        return reply

    def handle(self, event: ClientEvent) -> EventReply:
        """Apply one decoded event. Raises RealtimeError, having changed nothing."""
        if isinstance(event, SessionUpdateEvent):
            self.config = self.config.updated(event.session, self.served_model, self.limits)
            return EventReply([self._session_event("session.updated")])
        if isinstance(event, ItemCreateEvent):
            return EventReply(self._create_item(event))
        if isinstance(event, ItemDeleteEvent):
            return self._delete_item(event.item_id)
        if isinstance(event, ItemRetrieveEvent):
            return EventReply(
                [
                    {
                        "type": "conversation.item.retrieved",
                        "event_id": self.event_id(),
                        "item": self.conversation.snapshot(event.item_id),
                    }
                ]
            )
        if isinstance(event, ItemTruncateEvent):
            self.conversation.truncate(event.item_id, event.content_index)  # always refuses
        if isinstance(event, ResponseCreateEvent):
            return self._create_response(event)
        assert isinstance(event, ResponseCancelEvent)
        return EventReply(action=CancelResponse(self._to_cancel(event.response_id)))

    def _delete_item(self, item_id: str) -> EventReply:
        """Remove an item. No event names it after `conversation.item.deleted`: a
        response writing it is cancelled (the answer had nowhere left to go), one that
        finished writing it goes on and leaves it out of its `response.done`. An item
        of a running response that followed the deleted one is shown after the one
        before it (its `conversation.item.done` never names the deleted item)."""
        previous = self.conversation.delete(item_id)
        for active in self.active.values():
            active.renderer.relink(item_id, previous)
        deleted = {
            "type": "conversation.item.deleted",
            "event_id": self.event_id(),
            "item_id": item_id,
        }
        for response_id, active in self.active.items():
            renderer = active.renderer
            if active.in_conversation and renderer.writes(item_id):
                if renderer.forget(item_id):
                    return EventReply([deleted], CancelResponse(response_id))
                break
        return EventReply([deleted])

    def _create_item(self, event: ItemCreateEvent) -> list[dict[str, Any]]:
        item = item_object(event.parsed)
        previous = self.conversation.add(item, event.previous_item_id)
        return [
            {
                "type": kind,
                "event_id": self.event_id(),
                "previous_item_id": previous,
                "item": item,
            }
            for kind in ("conversation.item.added", "conversation.item.done")
        ]

    def _create_response(self, event: ResponseCreateEvent) -> EventReply:
        settings = event.response
        config = self.config
        in_conversation = True
        metadata = None
        items = None
        if settings is not None:
            config = config.overridden(settings, "response", self.limits)
            in_conversation = settings.conversation != "none"
            metadata = settings.metadata
            if settings.input is not None:
                items = [
                    self._input_item(entry, f"response.input.{index}")
                    for index, entry in enumerate(settings.input)
                ]
                self._check_input(items)
        overrides = settings.model_fields_set if settings is not None else set()
        check_tool_choice(config, "response" if {"tools", "tool_choice"} & overrides else "session")
        if len(self.active) >= self.limits.max_active_responses:
            raise TooManyResponsesError(
                f"{len(self.active)} responses are running on this socket, its limit "
                "(--max-concurrent); wait for one to finish"
            )
        if in_conversation and any(a.in_conversation for a in self.active.values()):
            raise ActiveResponseError(
                "a response is already writing to the conversation; wait for its "
                "response.done or send response.cancel, or create this one with "
                "conversation: 'none'"
            )
        request = realtime_generation(
            self.conversation.items() if items is None else items, config, overrides=overrides
        )
        renderer = ResponseRenderer(
            new_response_id(),
            self.event_id,
            config,
            on_item=self._add_output_item if in_conversation else None,
            metadata=metadata,
            conversation_id=self.conversation_id,
        )
        self.active[renderer.id] = _Active(renderer, in_conversation)
        return EventReply(action=StartResponse(request, renderer, event.event_id))

    def _check_input(self, items: list[dict[str, Any]]) -> None:
        """A response's own input is held while it runs: the conversation's limits bound
        it as they bound the conversation."""
        limits = self.limits
        if len(items) > limits.max_items:
            raise ConversationFullError(
                f"response.input has {len(items)} items; at most {limits.max_items}"
                " (this server's --realtime-max-items)",
                param="response.input",
            )
        if sum(item_chars(item) for item in items) > limits.max_conversation_chars:
            raise ConversationFullError(
                f"response.input holds more than {limits.max_conversation_chars} characters"
                " (this server's --realtime-max-conversation-chars)",
                param="response.input",
            )
        if sum(item_bytes(item) for item in items) > limits.max_conversation_bytes:
            raise ConversationFullError(
                f"response.input holds more than {limits.max_conversation_bytes} bytes"
                " (this server's --realtime-max-conversation-bytes)",
                param="response.input",
            )

    def _input_item(self, entry: dict[str, Any], param: str) -> dict[str, Any]:
        parsed = parse_input_entry(entry, param, self.limits.max_item_parts)
        if isinstance(parsed, ItemReference):
            return self.conversation.get(parsed.id, param=f"{param}.id")
        return item_object(parsed)

    def _add_output_item(self, item: dict[str, Any]) -> str | None:
        """A model item opens: it goes at the end of the conversation (even when full:
        the response was accepted; the next item the client creates is refused)."""
        try:
            return self.conversation.add(item)
        except RealtimeError:
            return None

    def _to_cancel(self, response_id: str | None) -> str:
        if response_id is not None:
            if response_id not in self.active:
                raise NoActiveResponseError(
                    f"no response {response_id!r} is in progress", param="response_id"
                )
            return response_id
        for active_id, active in self.active.items():
            if active.in_conversation:
                return active_id
        raise NoActiveResponseError("there is no response in progress to cancel")

    # --- the dialect reports back ---

    def response_ended(self, response_id: str) -> None:
        """A response's task is over (done, cancelled, failed or refused by prepare)."""
        active = self.active.pop(response_id, None)
        if active is None:
            return
        if active.in_conversation:
            for item in active.renderer.output:
                self.conversation.settle(item["id"])
