"""Events captured from a live server validate against docs/asyncapi.yaml's second channel,
and the events a client sends validate against its client messages."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml
from websockets.asyncio.client import connect

from realtime.config import ServerConfig
from realtime.dialects.realtime_events.event_models import SERVER_EVENT_NAMES

pytestmark = pytest.mark.anyio

ASYNCAPI = Path(__file__).resolve().parents[3] / "docs" / "asyncapi.yaml"
CLIENT_NAMES = {
    "session.update": "SessionUpdateEvent",
    "conversation.item.create": "ConversationItemCreateEvent",
    "conversation.item.delete": "ConversationItemDeleteEvent",
    "conversation.item.retrieve": "ConversationItemRetrieveEvent",
    "conversation.item.truncate": "ConversationItemTruncateEvent",
    "response.create": "ResponseCreateEvent",
    "response.cancel": "ResponseCancelEvent",
}


def validator(doc: dict[str, Any], name: str) -> jsonschema.Draft202012Validator:
    pointer = doc["components"]["messages"][name]["payload"]["$ref"]
    root = {k: v for k, v in doc.items() if k != "$schema"}
    return jsonschema.Draft202012Validator({**root, "$ref": pointer})


def item(text: str, **extra: Any) -> dict[str, Any]:
    return {"type": "message", "role": "user",
            "content": [{"type": "input_text", "text": text}], **extra}  # fmt: skip


async def test_live_events_validate_against_asyncapi(server_factory):
    doc = yaml.safe_load(ASYNCAPI.read_text(encoding="utf-8"))
    channel = doc["channels"]["realtimeEvents"]
    assert channel["bindings"]["ws"]["query"]["required"] == ["model"]
    assert set(channel["messages"]) == set(CLIENT_NAMES.values()) | set(SERVER_EVENT_NAMES.values())
    server = server_factory(ServerConfig(echo_delay=0.01, log_level="warning"))
    sent = [
        {"type": "session.update", "session": {"type": "realtime", "instructions": "hi",
         "tools": [{"type": "function", "name": "f", "parameters": {"type": "object"}}]}},
        {"type": "conversation.item.create", "item": item("one two three", id="item_1")},
        {"type": "conversation.item.create", "previous_item_id": "root",
         "item": {"type": "function_call_output", "call_id": "call_1", "output": "ok"}},
        {"type": "conversation.item.retrieve", "item_id": "item_1"},
        {"type": "response.create", "event_id": "evt_r", "response": {"metadata": {"k": "v"}}},
        {"type": "conversation.item.delete", "item_id": "item_1"},
        {"type": "conversation.item.truncate", "item_id": "nope", "content_index": 0,
         "audio_end_ms": 5},
        {"type": "response.create", "response": {"conversation": "none",
         "input": [item(" ".join(["w"] * 200))]}},
        {"type": "response.cancel"},
    ]  # fmt: skip
    events: list[dict[str, Any]] = []
    async with connect(server.ws_url + "?model=echo") as ws:
        events.append(json.loads(await ws.recv()))
        for event in sent[:5]:
            await ws.send(json.dumps(event))
        while events[-1]["type"] != "response.done":
            events.append(json.loads(await ws.recv()))
        for event in sent[5:7]:
            await ws.send(json.dumps(event))
            events.append(json.loads(await ws.recv()))
        await ws.send(json.dumps(sent[7]))
        while events[-1]["type"] != "response.output_text.delta":
            events.append(json.loads(await ws.recv()))
        await ws.send(json.dumps({**sent[8], "response_id": events[-1]["response_id"]}))
        while events[-1]["type"] != "response.done":
            events.append(json.loads(await ws.recv()))
    for event in events:
        validator(doc, SERVER_EVENT_NAMES[event["type"]]).validate(event)
    for event in sent:
        validator(doc, CLIENT_NAMES[event["type"]]).validate(event)
    kinds = {event["type"] for event in events}
    assert {"session.created", "session.updated", "conversation.item.retrieved",
            "conversation.item.deleted", "error", "response.done"} <= kinds  # fmt: skip
    assert events[-1]["response"]["status"] == "cancelled"
    with pytest.raises(jsonschema.ValidationError):  # the schemas do refuse
        validator(doc, "ResponseCancelEvent").validate({"type": "response.cancel", "x": 1})
    with pytest.raises(jsonschema.ValidationError):
        validator(doc, "ResponseDoneEvent").validate({**events[-1], "response": {}})
