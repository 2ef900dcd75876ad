"""The session without a socket: items, responses, cancel, overrides, rendering, limits."""

from __future__ import annotations

from typing import Any

import pytest

from realtime.chat.conversation import template_messages
from realtime.dialects.realtime_events.limits import EventLimits
from realtime.dialects.realtime_events.render import ResponseRenderer
from realtime.dialects.realtime_events.session_state import (
    CancelResponse,
    EventSession,
    StartResponse,
)
from realtime.model.generation import FinishReason
from realtime.pipeline.events import Step, Usage
from realtime.protocol.conversation import NamedFunction
from realtime.protocol.errors import RealtimeError
from realtime.protocol.generation_request import GenerationRequest
from realtime.protocol.output import ContentDelta, OutputEvent, ToolCallArguments, ToolCallStart
from tests.dialects.realtime_events.helpers import MODEL, error_of, send, session, user
from tests.dialects.realtime_events.sdk_types import check_server_event


def chunk(
    content: str | None = None,
    *,
    calls: list[dict[str, Any]] | None = None,
    finish: str | None = None,
) -> dict[str, Any]:
    delta: dict[str, Any] = {}
    if content is not None:
        delta["content"] = content
    if calls is not None:
        delta["tool_calls"] = calls
    return {
        "object": "chat.completion.chunk",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }


USAGE = Usage(prompt_tokens=10, completion_tokens=3, cached_tokens=7)
_FINISH = {
    "stop": FinishReason.STOP,
    "tool_calls": FinishReason.STOP,
    "length": FinishReason.LENGTH,
}


def feed(renderer: ResponseRenderer, chunk: dict[str, Any]) -> list[dict[str, Any]]:
    """The renderer's events for what a chat-chunk-shaped step carries: its text, then
    its tool-call deltas, as the pipeline's parsed events; a finish reason ends it."""
    choice = chunk["choices"][0]
    delta = choice["delta"]
    events: list[OutputEvent] = []
    if delta.get("content"):
        events.append(ContentDelta(delta["content"]))
    for call in delta.get("tool_calls") or ():
        function = call.get("function") or {}
        if "id" in call:
            events.append(ToolCallStart(call["index"], call["id"], function.get("name", "")))
        if function.get("arguments"):
            events.append(ToolCallArguments(call["index"], function["arguments"]))
    out = renderer.step(Step([1], "", events))
    if choice["finish_reason"] is not None:
        renderer.ended_with(_FINISH[choice["finish_reason"]])
    return out


def messages(request: GenerationRequest) -> list[dict[str, Any]]:
    """The chat template's messages for a response's request."""
    return template_messages(request.conversation)


def start(s: EventSession, response: dict[str, Any] | None = None) -> StartResponse:
    event: dict[str, Any] = {"type": "response.create", "event_id": "evt_rc"}
    if response is not None:
        event["response"] = response
    reply = send(s, event)
    assert isinstance(reply.action, StartResponse), reply.events
    return reply.action


def test_open_sends_session_created_with_the_model() -> None:
    s = EventSession(
        "sess_x",
        MODEL,
        MODEL,
        limits=EventLimits(),
        input_limits=__import__(
            "realtime.protocol.input_limits", fromlist=["InputLimits"]
        ).InputLimits(),
    )
    [created] = s.open()
    parsed = check_server_event(created)
    assert parsed.session.model == MODEL
    assert created["session"]["output_modalities"] == ["text"]


def test_a_model_not_served_is_an_error_after_session_created_and_fixable() -> None:
    s = EventSession(
        "sess_x",
        MODEL,
        "gpt-realtime",
        limits=EventLimits(),
        input_limits=__import__(
            "realtime.protocol.input_limits", fromlist=["InputLimits"]
        ).InputLimits(),
    )
    created, error = s.open()
    assert created["type"] == "session.created" and created["session"]["model"] is None
    assert error["error"]["code"] == "model_not_found"
    send(s, user("hi"))
    assert error_of(send(s, {"type": "response.create"}))["param"] == "session.model"
    bad = error_of(
        send(s, {"type": "session.update", "session": {"type": "realtime", "model": "other"}})
    )
    assert bad["code"] == "model_not_found"
    updated = send(s, {"type": "session.update", "session": {"type": "realtime", "model": MODEL}})
    assert check_server_event(updated.events[0]).session.model == MODEL
    assert isinstance(send(s, {"type": "response.create"}).action, StartResponse)


def test_text_response_events_in_order_and_valid_for_the_sdk() -> None:
    s = session()
    for event in send(s, user("hello")).events:
        check_server_event(event)
    action = start(s)
    renderer = action.renderer
    assert [m["role"] for m in messages(action.request)] == ["user"]
    events = [renderer.created()]
    events += feed(renderer, chunk("Hel"))
    events += feed(renderer, chunk("lo", finish="stop"))
    events += renderer.finish(USAGE)
    for event in events:
        check_server_event(event)
    assert [e["type"] for e in events] == [
        "response.created",
        "response.output_item.added",
        "conversation.item.added",
        "response.content_part.added",
        "response.output_text.delta",
        "response.output_text.delta",
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "conversation.item.done",
        "response.done",
    ]
    done = events[-1]["response"]
    assert done["status"] == "completed"
    assert done["output"][0]["content"] == [{"type": "output_text", "text": "Hello"}]
    assert done["usage"]["input_token_details"]["cached_tokens"] == 7
    assert done["usage"]["output_tokens"] == 3
    assert events[1]["item"]["status"] == "in_progress"  # sent before the text grew
    assert events[1]["item"]["content"] == []
    # the answer is in the conversation, and the next request sees it
    s.response_ended(renderer.id)
    assert [i["role"] for i in s.conversation.items()] == ["user", "assistant"]
    send(s, user("again"))
    assert [m["role"] for m in messages(start(s).request)] == ["user", "assistant", "user"]


def test_function_call_round_trip() -> None:
    s = session()
    send(
        s,
        {
            "type": "session.update",
            "session": {
                "type": "realtime",
                "tools": [
                    {"type": "function", "name": "get_weather", "parameters": {"type": "object"}}
                ],
                "tool_choice": "required",
            },
        },
    )
    send(s, user("weather?"))
    action = start(s)
    assert action.request.tools is not None and action.request.tool_choice == "required"
    r = action.renderer
    events = feed(
        r,
        chunk(
            calls=[
                {
                    "index": 0,
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": ""},
                }
            ]
        ),
    )
    events += feed(r, chunk(calls=[{"index": 0, "function": {"arguments": '{"city"'}}]))
    events += feed(
        r, chunk(calls=[{"index": 0, "function": {"arguments": ': "Oslo"}'}}], finish="tool_calls")
    )
    events += r.finish(USAGE)
    for event in events:
        check_server_event(event)
    kinds = [e["type"] for e in events]
    assert kinds.count("response.function_call_arguments.delta") == 2
    done_args = next(e for e in events if e["type"] == "response.function_call_arguments.done")
    assert (done_args["name"], done_args["arguments"], done_args["call_id"]) == (
        "get_weather",
        '{"city": "Oslo"}',
        "call_1",
    )
    s.response_ended(r.id)
    send(
        s,
        {
            "type": "conversation.item.create",
            "item": {"type": "function_call_output", "call_id": "call_1", "output": "sunny"},
        },
    )
    sent = messages(start(s).request)
    assert [m["role"] for m in sent] == ["user", "assistant", "tool"]
    assert sent[1]["tool_calls"][0]["id"] == "call_1"
    assert sent[2]["tool_call_id"] == "call_1"


def test_one_response_at_a_time_in_the_conversation_and_cancel() -> None:
    s = session()
    send(s, user("hi"))
    first = start(s)
    assert error_of(send(s, {"type": "response.create"}))["code"] == (
        "conversation_already_has_active_response"
    )
    # out of band runs beside it, and writes nothing to the conversation
    oob = start(
        s, {"conversation": "none", "instructions": "summarise", "metadata": {"purpose": "title"}}
    )
    assert messages(oob.request)[0]["role"] == "system"
    oob_events = feed(oob.renderer, chunk("t")) + oob.renderer.finish(USAGE)
    assert "conversation.item.added" not in [e["type"] for e in oob_events]
    assert oob_events[-1]["response"]["metadata"] == {"purpose": "title"}
    assert oob_events[-1]["response"]["conversation_id"] is None
    s.response_ended(oob.renderer.id)
    cancel = send(s, {"type": "response.cancel"})
    assert cancel.action == CancelResponse(first.renderer.id)
    events = feed(first.renderer, chunk("partial")) + first.renderer.finish(USAGE, cancelled=True)
    done = events[-1]
    check_server_event(done)
    assert done["response"]["status"] == "cancelled"
    assert done["response"]["status_details"]["reason"] == "client_cancelled"
    assert done["response"]["output"][0]["status"] == "incomplete"
    s.response_ended(first.renderer.id)
    assert error_of(send(s, {"type": "response.cancel"}))["code"] == "response_cancel_not_active"
    assert error_of(send(s, {"type": "response.cancel", "response_id": "resp_x"}))["param"] == (
        "response_id"
    )


def test_overrides_apply_to_one_response_only() -> None:
    s = session()
    send(
        s,
        {
            "type": "session.update",
            "session": {"type": "realtime", "instructions": "A", "temperature": 0.5},
        },
    )
    send(s, user("hi"))
    request = start(
        s,
        {
            "instructions": "B",
            "max_output_tokens": 5,
            "temperature": 0,
            "tools": [{"type": "function", "name": "f"}],
            "tool_choice": {"type": "function", "name": "f"},
        },
    ).request
    assert messages(request)[0]["content"] == "B"
    assert (request.max_tokens, request.sampling.temperature) == (5, 0)
    assert isinstance(request.tool_choice, NamedFunction) and request.tool_choice.name == "f"
    assert s.config.instructions == "A" and s.config.temperature == 0.5


def test_input_replaces_the_context_and_references_items() -> None:
    s = session()
    added = send(s, user("first"))
    first_id = added.events[0]["item"]["id"]
    send(s, user("second"))
    request = start(
        s,
        {
            "conversation": "none",
            "input": [
                {"type": "item_reference", "id": first_id},
                {
                    "type": "message",
                    "role": "user",
                    "content": [{"type": "input_text", "text": "new"}],
                },
            ],
        },
    ).request
    texts = [m["content"] for m in messages(request)]
    assert texts == ["first", "new"]
    error = error_of(
        send(
            s,
            {
                "type": "response.create",
                "response": {
                    "conversation": "none",
                    "input": [{"type": "item_reference", "id": "item_nope"}],
                },
            },
        )
    )
    assert (error["code"], error["param"]) == ("item_not_found", "response.input.0.id")


def test_items_insert_delete_retrieve_truncate() -> None:
    s = session()
    a = send(s, user("a", id="item_a")).events[0]
    assert a["previous_item_id"] is None
    b = send(s, {**user("b", id="item_b"), "previous_item_id": "root"}).events[0]
    assert b["previous_item_id"] is None
    c = send(s, {**user("c", id="item_c"), "previous_item_id": "item_b"}).events[0]
    assert c["previous_item_id"] == "item_b"
    assert [i["id"] for i in s.conversation.items()] == ["item_b", "item_c", "item_a"]
    assert error_of(send(s, user("dup", id="item_a")))["code"] == "item_id_already_exists"
    assert error_of(send(s, {**user("x"), "previous_item_id": "nope"}))["param"] == (
        "previous_item_id"
    )
    retrieved = send(s, {"type": "conversation.item.retrieve", "item_id": "item_c"}).events[0]
    check_server_event(retrieved)
    assert retrieved["item"]["content"][0]["text"] == "c"
    deleted = send(s, {"type": "conversation.item.delete", "item_id": "item_c"}).events[0]
    check_server_event(deleted)
    assert (
        error_of(send(s, {"type": "conversation.item.delete", "item_id": "item_c"}))["code"]
        == "item_not_found"
    )
    truncate = {
        "type": "conversation.item.truncate",
        "item_id": "item_a",
        "content_index": 0,
        "audio_end_ms": 10,
    }
    assert error_of(send(s, truncate))["param"] == "item_id"  # a user item
    send(
        s,
        {
            "type": "conversation.item.create",
            "item": {
                "id": "item_asst",
                "type": "message",
                "role": "assistant",
                "content": [{"type": "output_text", "text": "hi"}],
            },
        },
    )
    assert error_of(send(s, {**truncate, "item_id": "item_asst"}))["code"] == (
        "audio_not_supported"
    )
    assert len(s.conversation) == 3


def test_conversation_limits() -> None:
    s = session(EventLimits(max_items=2, max_conversation_chars=10))
    send(s, user("12345"))
    assert error_of(send(s, user("123456")))["code"] == "conversation_full"
    send(s, user("12345"))
    assert error_of(send(s, user("")))["code"] == "conversation_full"
    send(s, {"type": "conversation.item.delete", "item_id": s.conversation.items()[0]["id"]})
    assert send(s, user("1")).events[0]["type"] == "conversation.item.added"
    assert s.conversation.chars == 6


def test_tool_and_response_limits() -> None:
    s = session(EventLimits(max_tools=1, max_active_responses=1))
    tools = [{"type": "function", "name": "a"}, {"type": "function", "name": "b"}]
    error = error_of(
        send(s, {"type": "session.update", "session": {"type": "realtime", "tools": tools}})
    )
    assert error["param"] == "session.tools"
    send(s, user("x"))
    start(s)
    error = error_of(send(s, {"type": "response.create", "response": {"conversation": "none"}}))
    assert error["code"] == "too_many_active_responses"


def test_empty_conversation_is_refused() -> None:
    assert error_of(send(session(), {"type": "response.create"}))["code"] == "empty_conversation"


def test_failed_and_incomplete_statuses() -> None:
    s = session()
    send(s, user("x"))
    r = start(s).renderer
    feed(r, chunk("a", finish="length"))
    assert r.finish(USAGE)[-1]["response"]["status_details"] == {
        "type": "incomplete",
        "reason": "max_output_tokens",
    }
    s.response_ended(r.id)
    r = start(s).renderer
    done = r.finish(None, error=RealtimeError("engine broke"))[-1]
    check_server_event(done)
    assert done["response"]["status"] == "failed"
    assert done["response"]["usage"]["total_tokens"] == 0


@pytest.mark.parametrize("text", ["a" * 3, "b"])
def test_assistant_text_then_call_is_one_chat_message(text: str) -> None:
    s = session()
    send(s, user("q"))
    r = start(s).renderer
    feed(r, chunk(text))
    feed(
        r, chunk(calls=[{"index": 0, "id": "call_9", "function": {"name": "f", "arguments": "{}"}}])
    )
    r.finish(USAGE)
    s.response_ended(r.id)
    send(
        s,
        {
            "type": "conversation.item.create",
            "item": {"type": "function_call_output", "call_id": "call_9", "output": "ok"},
        },
    )
    sent = messages(start(s).request)
    assert [m["role"] for m in sent] == ["user", "assistant", "tool"]
    assert sent[1]["content"] == text


def test_a_tool_choice_the_tools_cannot_meet_is_refused_before_the_response() -> None:
    s = session()
    send(s, user("x"))
    named = error_of(
        send(
            s,
            {
                "type": "response.create",
                "response": {
                    "tools": [{"type": "function", "name": "f"}],
                    "tool_choice": {"type": "function", "name": "g"},
                },
            },
        )
    )
    assert (named["param"], named["event_id"]) == ("response.tool_choice", None)
    send(s, {"type": "session.update", "session": {"type": "realtime", "tool_choice": "required"}})
    assert error_of(send(s, {"type": "response.create"}))["param"] == "session.tool_choice"
    assert not s.active
