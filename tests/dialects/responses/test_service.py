"""ResponsesService over a real ChatPipeline and the echo engine, without sockets.

The echo model answers with the last user message, so a reply with `<think>` or
`<tool_call>` markup goes through the real reasoning and tool parsers, and every
expected event is computed from the text sent. Every event and Response is
validated against the openai SDK's own types.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from realtime.chat.conversation import template_messages
from realtime.dialects.responses import (
    NotCancellableError,
    PreviousResponseNotFoundError,
    ResponseNotFoundError,
    ResponsesService,
)
from realtime.dialects.responses.service import PreparedResponse
from realtime.engine.echo import EchoEngine
from realtime.pipeline import ChatPipeline
from realtime.protocol.errors import InvalidRequestError, ModelNotFoundError
from realtime.store import MemoryResponseStore
from tests.dialects.responses.sdk_types import check_event, check_item, check_response

WEATHER = {
    "type": "function",
    "name": "get_weather",
    "description": "Weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
    "strict": True,
}


def make_service(**parsers: str) -> ResponsesService:
    engine = EchoEngine()
    asyncio.run(engine.start())
    pipeline = ChatPipeline(
        engine, **{"tool_parser": "none", "reasoning_parser": "none", **parsers}
    )
    return ResponsesService(pipeline, MemoryResponseStore())


def prepare(service: ResponsesService, stream: bool = True, **body: Any) -> PreparedResponse:
    request = service.parse({"model": "echo", **body})
    return asyncio.run(service.prepare(request, stream=stream, owner=None))


def run(service: ResponsesService, **body: Any) -> list[dict[str, Any]]:
    async def go() -> list[dict[str, Any]]:
        request = service.parse({"model": "echo", **body})
        prepared = await service.prepare(request, stream=True, owner=None)
        return [event async for event in service.events(prepared)]

    events = asyncio.run(go())
    for event in events:
        check_event(event)
    return events


def types(events: list[dict[str, Any]]) -> list[str]:
    return [event["type"] for event in events]


def test_a_text_answer_is_one_message_item_with_numbered_events() -> None:
    events = run(make_service(), input="Hello there, world")
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    kinds = types(events)
    assert kinds[:4] == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
    ]
    assert kinds[-4:] == [
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.completed",
    ]
    deltas = [e["delta"] for e in events if e["type"] == "response.output_text.delta"]
    assert len(deltas) > 1 and "".join(deltas) == "Hello there, world"
    created, final = events[0]["response"], events[-1]["response"]
    assert created["status"] == "in_progress" and created["output"] == []
    assert final["status"] == "completed" and final["completed_at"] is not None
    [message] = final["output"]
    assert message["content"][0]["text"] == "Hello there, world"
    assert message["status"] == "completed" and message["id"].startswith("msg_")
    usage = final["usage"]
    assert usage["output_tokens"] == len(deltas)
    assert usage["total_tokens"] == usage["input_tokens"] + usage["output_tokens"]
    check_response(final)


def test_reasoning_and_a_function_call_become_their_own_items() -> None:
    service = make_service(tool_parser="hermes", reasoning_parser="qwen3")
    text = (
        "<think>They want the weather.</think>Let me check."
        '<tool_call>{"name": "get_weather", "arguments": {"city": "Oslo"}}</tool_call>'
    )
    events = run(service, input=text, tools=[WEATHER])
    final = events[-1]["response"]
    assert final["status"] == "completed"
    reasoning, message, call = final["output"]
    assert reasoning["type"] == "reasoning" and reasoning["id"].startswith("rs_")
    assert reasoning["content"] == [{"type": "reasoning_text", "text": "They want the weather."}]
    assert message["content"][0]["text"].strip() == "Let me check."
    assert call["type"] == "function_call" and call["name"] == "get_weather"
    assert call["call_id"].startswith("call_") and call["id"].startswith("fc_")
    assert json.loads(call["arguments"]) == {"city": "Oslo"}
    # the streamed pieces add up to the items
    reasoning_deltas = "".join(
        e["delta"] for e in events if e["type"] == "response.reasoning_text.delta"
    )
    assert reasoning_deltas == "They want the weather."
    argument_deltas = "".join(
        e["delta"] for e in events if e["type"] == "response.function_call_arguments.delta"
    )
    assert argument_deltas == call["arguments"]
    done = [e for e in events if e["type"] == "response.function_call_arguments.done"]
    assert [e["arguments"] for e in done] == [call["arguments"]]
    indexes = [e["output_index"] for e in events if e["type"] == "response.output_item.added"]
    assert indexes == [0, 1, 2]
    item_done = [e["item"] for e in events if e["type"] == "response.output_item.done"]
    assert item_done == final["output"]
    assert final["usage"]["output_tokens_details"]["reasoning_tokens"] > 0
    for item in final["output"]:
        check_item(item)


def test_max_output_tokens_ends_incomplete_with_the_reason() -> None:
    events = run(make_service(), input="one two three four five six seven", max_output_tokens=2)
    final = events[-1]
    assert final["type"] == "response.incomplete"
    response = final["response"]
    assert response["status"] == "incomplete"
    assert response["incomplete_details"] == {"reason": "max_output_tokens"}
    assert response["output"][0]["status"] == "incomplete"
    assert response["usage"]["output_tokens"] == 2 and response["completed_at"] is None


def test_logprobs_ride_on_the_text_when_included() -> None:
    events = run(
        make_service(),
        input="Hello there",
        include=["message.output_text.logprobs"],
        top_logprobs=2,
    )
    deltas = [e for e in events if e["type"] == "response.output_text.delta"]
    assert all(len(e["logprobs"]) >= 1 for e in deltas)
    final = events[-1]["response"]
    part = final["output"][0]["content"][0]
    assert "".join(entry["token"] for entry in part["logprobs"]) == "Hello there"
    assert all(len(entry["top_logprobs"]) <= 2 for entry in part["logprobs"])
    plain = run(make_service(), input="Hello there")
    assert all(e["logprobs"] == [] for e in plain if e["type"] == "response.output_text.delta")
    assert "logprobs" not in plain[-1]["response"]["output"][0]["content"][0]


def test_the_json_form_is_the_fold_of_the_stream() -> None:
    service = make_service(tool_parser="hermes", reasoning_parser="qwen3")
    text = '<think>hm</think>ok <tool_call>{"name": "get_weather", "arguments": {}}</tool_call>'
    streamed = run(service, input=text, tools=[WEATHER])[-1]["response"]
    prepared = prepare(service, stream=False, input=text, tools=[WEATHER])
    complete = asyncio.run(service.complete(prepared))
    check_response(complete)

    def shape(response: dict[str, Any]) -> list[Any]:
        return [
            (item["type"], item.get("content"), item.get("name"), item.get("arguments"))
            for item in response["output"]
        ]

    assert shape(complete) == shape(streamed)


def test_a_continuation_rebuilds_the_conversation_from_the_store() -> None:
    service = make_service()
    first = run(service, input="first question", instructions="Be brief.")[-1]["response"]
    prepared = prepare(
        service, input="second question", previous_response_id=first["id"], instructions="New."
    )
    messages = template_messages(prepared.generation.conversation)
    assert messages == [
        {"role": "system", "content": "New."},  # instructions are not carried over
        {"role": "user", "content": "first question"},
        {"role": "assistant", "content": "first question"},
        {"role": "user", "content": "second question"},
    ]


def test_store_false_keeps_nothing_and_cannot_be_continued() -> None:
    service = make_service()
    response = run(service, input="secret", store=False)[-1]["response"]
    assert response["store"] is False
    with pytest.raises(ResponseNotFoundError):
        asyncio.run(service.retrieve(response["id"], None))
    with pytest.raises(PreviousResponseNotFoundError) as info:
        prepare(service, input="more", previous_response_id=response["id"])
    assert info.value.param == "previous_response_id" and response["id"] in info.value.message


def test_a_socket_local_store_holds_store_false_responses_for_its_owner_only() -> None:
    service = make_service()
    local = MemoryResponseStore()

    async def go() -> tuple[dict[str, Any], PreparedResponse]:
        request = service.parse({"model": "echo", "input": "hidden", "store": False})
        prepared = await service.prepare(request, stream=True, owner=None, local=local)
        async for _ in service.events(prepared):
            pass
        first = prepared.events.response
        follow = service.parse(
            {"model": "echo", "input": "next", "previous_response_id": first["id"]}
        )
        return first, await service.prepare(follow, stream=True, owner=None, local=local)

    first, follow = asyncio.run(go())
    assert len(local) == 1 and asyncio.run(service.retrieve(first["id"], None, local))
    messages = template_messages(follow.generation.conversation)
    assert messages[0] == {"role": "user", "content": "hidden"}
    # the shared store never saw it
    with pytest.raises(ResponseNotFoundError):
        asyncio.run(service.retrieve(first["id"], None))


def test_owners_do_not_see_each_others_responses() -> None:
    service = make_service()
    alice, bob = service.owner(b"key-alice"), service.owner(b"key-bob")
    assert alice != bob and alice is not None and b"key-alice".decode() not in alice

    async def go() -> dict[str, Any]:
        request = service.parse({"model": "echo", "input": "mine"})
        prepared = await service.prepare(request, stream=False, owner=alice)
        return await service.complete(prepared)

    response = asyncio.run(go())
    assert asyncio.run(service.retrieve(response["id"], alice))["id"] == response["id"]
    for call in (service.retrieve, service.delete, service.cancel):
        with pytest.raises(ResponseNotFoundError):
            asyncio.run(call(response["id"], bob))
    with pytest.raises(PreviousResponseNotFoundError):
        asyncio.run(
            service.prepare(
                service.parse(
                    {"model": "echo", "input": "x", "previous_response_id": response["id"]}
                ),
                stream=True,
                owner=bob,
            )
        )
    with pytest.raises(NotCancellableError):
        asyncio.run(service.cancel(response["id"], alice))


def test_a_broken_chain_names_the_missing_response() -> None:
    service = make_service()
    first = run(service, input="one")[-1]["response"]
    second = run(service, input="two", previous_response_id=first["id"])[-1]["response"]
    asyncio.run(service.delete(first["id"], None))
    with pytest.raises(PreviousResponseNotFoundError) as info:
        prepare(service, input="three", previous_response_id=second["id"])
    assert first["id"] in info.value.message and second["id"] in info.value.message


def test_input_items_pages_newest_first_by_default() -> None:
    service = make_service()
    items = [{"role": "user", "content": f"m{i}"} for i in range(5)]
    response = run(service, input=items)[-1]["response"]

    def page(**query: Any) -> dict[str, Any]:
        return asyncio.run(service.input_items(response["id"], None, **query))

    first = page(limit=2)
    texts = [item["content"][0]["text"] for item in first["data"]]
    assert texts == ["m4", "m3"] and first["has_more"] is True
    second = page(limit=2, after=first["last_id"])
    assert [item["content"][0]["text"] for item in second["data"]] == ["m2", "m1"]
    last = page(limit=2, after=second["last_id"])
    assert [i["content"][0]["text"] for i in last["data"]] == ["m0"] and not last["has_more"]
    ascending = page(order="asc")
    assert [i["content"][0]["text"] for i in ascending["data"]] == [f"m{i}" for i in range(5)]
    for item in ascending["data"]:
        check_item(item)
    with pytest.raises(InvalidRequestError) as info:
        page(after="msg_unknown")
    assert info.value.param == "after"


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"model": "nope", "input": "x"}, "model"),
        ({"input": "x", "max_output_tokens": 10**9}, "max_output_tokens"),
        ({"input": "x", "text": {"format": {"type": "json_schema", "name": "n"}}}, "text.format"),
        ({"input": "x", "text": {"format": {"type": "json_object"}}}, "text.format"),
        ({"input": []}, "input"),
        (
            {"input": "x", "tools": [WEATHER], "tool_choice": "required"},
            "tool_choice",  # no tool parser on this server
        ),
    ],
)
def test_prepare_errors_name_the_responses_field(body: dict[str, Any], param: str) -> None:
    service = make_service(max_tokens_policy="error")  # max_output_tokens beyond: refused
    request = service.parse({"model": "echo", **body})
    with pytest.raises(InvalidRequestError) as info:
        asyncio.run(service.prepare(request, stream=True, owner=None))
    assert info.value.param == param, info.value.to_body()
    assert "max_completion_tokens" not in info.value.message
    assert "response_format" not in info.value.message
    if body.get("model") == "nope":
        assert isinstance(info.value, ModelNotFoundError)


def test_the_socket_error_event_is_the_sdks_ws_error() -> None:
    from openai.types.responses import ResponsesServerEvent
    from pydantic import TypeAdapter

    from realtime.dialects.responses import socket_error_event

    error = PreviousResponseNotFoundError("resp_x")
    event = socket_error_event(error, stream_id="lane")
    parsed = TypeAdapter(ResponsesServerEvent).validate_python(event)
    assert parsed.type == "error" and parsed.stream_id == "lane" and parsed.status == 400
    assert parsed.error.code == "previous_response_not_found"
    assert parsed.error.param == "previous_response_id"
    assert "sequence_number" not in event


def test_a_warm_up_returns_no_output_and_can_be_continued() -> None:
    """The socket's `generate: false`: the prompt goes through the engine (its prefix is
    then cached), the response has no output and no output tokens, and is stored."""
    from realtime.dialects.responses import ResponseCreateEvent

    service = make_service()

    async def go() -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        warm = service.parse(
            {
                "type": "response.create",
                "model": "echo",
                "input": "warm this",
                "generate": False,
                "tools": [WEATHER],
                "tool_choice": "required",
            },
            ResponseCreateEvent,
        )
        prepared = await service.prepare(warm, stream=True, owner=None)
        first = [event async for event in service.events(prepared)]
        follow = service.parse(
            {"model": "echo", "input": "now answer", "previous_response_id": prepared.id}
        )
        second = await service.prepare(follow, stream=True, owner=None)
        return first, [event async for event in service.events(second)]

    warm_events, answer_events = asyncio.run(go())
    for event in warm_events:
        check_event(event)
    assert types(warm_events) == ["response.created", "response.in_progress", "response.completed"]
    response = warm_events[-1]["response"]
    assert response["output"] == [] and response["status"] == "completed"
    assert response["usage"]["input_tokens"] > 0 and response["usage"]["output_tokens"] == 0
    assert answer_events[-1]["response"]["output"][0]["content"][0]["text"] == "now answer"
    # the continuation's prompt holds the warmed input
    assert (
        answer_events[-1]["response"]["usage"]["input_tokens"] > response["usage"]["input_tokens"]
    )
