"""What Codex CLI sends and gets back, through ResponsesService and a real pipeline.

Namespace tools flattened (their calls carry the namespace), custom tools as
`custom_tool_call` items, hosted tools never offered and logged once, reasoning
sealed into `encrypted_content` and read back from a stateless client's resent
history, and `generate: false` on the scripted engine. Every event and item is
checked against the openai SDK's own types.
"""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any

import pytest

from realtime.dialects.responses import ResponseCreateEvent, ResponsesService
from realtime.dialects.responses.reasoning_seal import ReasoningSeal
from realtime.engine.echo import EchoEngine
from realtime.engine.scripted import SCRIPTED_TEMPLATE, ScriptedEngine
from realtime.pipeline import ChatPipeline
from realtime.protocol.errors import InvalidRequestError
from realtime.store import MemoryResponseStore
from tests.dialects.responses.sdk_types import check_event, check_item

SPAWN = {
    "type": "function",
    "name": "spawn_agent",
    "description": "Spawn a sub-agent",
    "strict": False,
    "parameters": {"type": "object", "properties": {"message": {"type": "string"}}},
}
NAMESPACE = {
    "type": "namespace",
    "name": "multi_agent_v1",
    "description": "Tools for sub-agents.",
    "tools": [SPAWN],
}
PATCH = {
    "type": "custom",
    "name": "apply_patch",
    "description": "Apply a patch",
    "format": {"type": "grammar", "syntax": "lark", "definition": 'start: "*** Begin Patch" /.*/'},
}
HOSTED = [
    {"type": "web_search", "external_web_access": False},
    {"type": "mcp", "server_label": "x"},
    {"type": "web_search_preview_2031_01_02"},  # a dated variant no SDK has yet
]

#: The scripted template, plus each assistant turn's reasoning (as thinking templates
#: render it), so a test can see what reasoning reached the prompt.
REASONING_TEMPLATE = SCRIPTED_TEMPLATE.replace(
    "{{- ': ' + text(message.content) -}}",
    "{{- ': ' -}}{%- if message.reasoning_content -%}"
    "{{- '<think>' + message.reasoning_content + '</think>' -}}{%- endif -%}"
    "{{- text(message.content) -}}",
)


def service_on(engine: Any, seal: ReasoningSeal | None = None, **parsers: str) -> ResponsesService:
    asyncio.run(engine.start())
    pipeline = ChatPipeline(
        engine, **{"tool_parser": "none", "reasoning_parser": "none", **parsers}
    )
    return ResponsesService(pipeline, MemoryResponseStore(), seal=seal)


def run(service: ResponsesService, body: dict[str, Any], model: type[Any] | None = None) -> Any:
    async def go() -> tuple[Any, list[dict[str, Any]]]:
        request = service.parse(
            {"model": service.pipeline.model_name, **body}, *((model,) if model else ())
        )
        prepared = await service.prepare(request, stream=True, owner=None)
        return prepared, [event async for event in service.events(prepared)]

    prepared, events = asyncio.run(go())
    for event in events:
        check_event(event)
    return prepared, events


def test_namespace_functions_are_offered_flat_and_their_calls_carry_the_namespace(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="realtime.responses")
    service = service_on(EchoEngine(), tool_parser="hermes")
    call = '<tool_call>{"name": "spawn_agent", "arguments": {"message": "hi"}}</tool_call>'
    prepared, events = run(service, {"input": call, "tools": [*HOSTED, NAMESPACE]})
    # offered: the namespace's function by its own name; the hosted tools not at all
    assert [tool.name for tool in prepared.generation.tools] == ["spawn_agent"]
    [item] = events[-1]["response"]["output"]
    assert item["type"] == "function_call" and item["name"] == "spawn_agent"
    assert item["namespace"] == "multi_agent_v1"
    assert json.loads(item["arguments"]) == {"message": "hi"}
    check_item(item)
    added = [e["item"] for e in events if e["type"] == "response.output_item.added"]
    assert added[0]["namespace"] == "multi_agent_v1"
    # the response echoes the tools as sent, but for a dated variant the SDK lacks
    assert events[-1]["response"]["tools"] == [*HOSTED[:2], NAMESPACE]
    # the hosted tools are logged once, by field path and type, never their fields
    lines = [r.getMessage() for r in caplog.records if r.name == "realtime.responses"]
    assert lines == ["responses.hosted_tools"]
    [record] = [r for r in caplog.records if r.name == "realtime.responses"]
    assert record.levelno == logging.INFO
    assert record.fields["params"] == [  # type: ignore[attr-defined]
        "tools.0 (web_search)",
        "tools.1 (mcp)",
        "tools.2 (web_search_preview_2031_01_02)",
    ]
    assert "server_label" not in str(record.fields)  # type: ignore[attr-defined]


def test_a_custom_tool_is_offered_as_one_string_and_called_as_a_custom_tool_call() -> None:
    service = service_on(EchoEngine(), tool_parser="hermes")
    patch = "*** Begin Patch\n*** End Patch"
    text = "<tool_call>" + json.dumps({"name": "apply_patch", "arguments": {"input": patch}})
    prepared, events = run(service, {"input": text + "</tool_call>", "tools": [PATCH]})
    [offered] = prepared.generation.tools
    assert offered.name == "apply_patch"
    assert offered.parameters["properties"] == {"input": {"type": "string"}}
    [item] = events[-1]["response"]["output"]
    assert item["type"] == "custom_tool_call" and item["input"] == patch
    assert item["name"] == "apply_patch" and item["call_id"]
    check_item(item)
    kinds = [e["type"] for e in events]
    assert "response.function_call_arguments.delta" not in kinds
    [delta] = [e for e in events if e["type"] == "response.custom_tool_call_input.delta"]
    [done] = [e for e in events if e["type"] == "response.custom_tool_call_input.done"]
    assert delta["delta"] == done["input"] == patch


def test_custom_tool_calls_and_their_outputs_are_accepted_as_input() -> None:
    engine = ScriptedEngine([{"match": "patched", "reply": "Applied."}])
    service = service_on(engine)
    history = [
        {"type": "message", "role": "user", "content": "fix it"},
        {"type": "custom_tool_call", "call_id": "c1", "name": "apply_patch", "input": "PATCH"},
        {"type": "custom_tool_call_output", "call_id": "c1", "output": "patched ok"},
    ]
    _, events = run(service, {"input": history, "tools": [PATCH], "tool_choice": "auto"})
    assert events[-1]["response"]["output"][0]["content"][0]["text"] == "Applied."
    prompt = engine.prompts[-1]
    assert '{"name": "apply_patch", "arguments": {"input": "PATCH"}}' in prompt
    assert "tool c1: patched ok" in prompt


def test_tool_choice_can_name_a_custom_tool() -> None:
    service = service_on(EchoEngine(), tool_parser="hermes")
    request = service.parse(
        {
            "model": "echo",
            "input": "x",
            "tools": [PATCH],
            "tool_choice": {"type": "custom", "name": "apply_patch"},
        }
    )
    assert request.chat_tool_choice == {"type": "function", "function": {"name": "apply_patch"}}
    with pytest.raises(InvalidRequestError) as info:
        service.parse(
            {
                "model": "echo",
                "input": "x",
                "tools": [PATCH],
                "tool_choice": {"type": "function", "name": "apply_patch"},
            }
        )
    assert info.value.param == "tool_choice.name"


def reasoning_service(seal: ReasoningSeal) -> tuple[ScriptedEngine, ResponsesService]:
    engine = ScriptedEngine(
        [
            {"match": "again", "reply": "Second answer."},
            {"match": "go", "reply": "<think>the secret plan</think>First answer."},
        ],
        chat_template=REASONING_TEMPLATE,
    )
    return engine, service_on(engine, seal, reasoning_parser="qwen3")


def test_a_stateless_client_keeps_its_reasoning_across_turns() -> None:
    """store: false, the history resent each turn, as Codex does."""
    engine, service = reasoning_service(ReasoningSeal("replica-secret"))
    first = {"input": "go", "store": False, "include": ["reasoning.encrypted_content"]}
    _, events = run(service, first)
    reasoning, message = events[-1]["response"]["output"]
    sealed = reasoning["encrypted_content"]
    assert "secret" not in sealed and check_item(reasoning)
    done = [e["item"] for e in events if e["type"] == "response.output_item.done"]
    assert done[0]["encrypted_content"] == sealed
    # the next turn sends the reasoning back with only its encrypted_content
    resent = {
        "type": "reasoning",
        "id": reasoning["id"],
        "summary": [],
        "encrypted_content": sealed,
    }
    history = [{"role": "user", "content": "go"}, resent, message]
    _, events = run(service, {"input": [*history, {"role": "user", "content": "again"}]})
    assert events[-1]["response"]["output"][0]["content"][0]["text"] == "Second answer."
    assert "assistant: <think>the secret plan</think>First answer." in engine.prompts[-1]
    # another replica with the same --reasoning-key reads it too
    other_engine, other = reasoning_service(ReasoningSeal("replica-secret"))
    run(other, {"input": [*history, {"role": "user", "content": "again"}]})
    assert "<think>the secret plan</think>" in other_engine.prompts[-1]
    # without include, no encrypted_content
    _, events = run(service, {"input": "go"})
    assert "encrypted_content" not in events[-1]["response"]["output"][0]


@pytest.mark.parametrize("where", ["tampered", "foreign", "garbage"])
def test_reasoning_this_server_did_not_seal_is_a_400_naming_the_field(where: str) -> None:
    seal = ReasoningSeal("k1")
    sealed = seal.seal("plan")
    token = {
        "tampered": sealed[:-6] + ("A" if sealed[-6] != "A" else "B") + sealed[-5:],
        "foreign": ReasoningSeal("k2").seal("plan"),
        "garbage": "not a token \u00e9",
    }[where]
    _, service = reasoning_service(seal)
    items = [
        {"role": "user", "content": "go"},
        {"type": "reasoning", "summary": [], "encrypted_content": token},
        {"role": "user", "content": "again"},
    ]
    request = service.parse({"model": "scripted", "input": items})
    with pytest.raises(InvalidRequestError) as info:
        asyncio.run(service.prepare(request, stream=False, owner=None))
    assert info.value.param == "input.1.encrypted_content"
    assert info.value.code == "invalid_value" and "plan" not in info.value.message


def test_the_seal_never_shows_its_key() -> None:
    seal = ReasoningSeal("very-secret-key")
    assert "very-secret-key" not in repr(seal) and "very-secret-key" not in str(vars(seal))
    assert seal.open(seal.seal("x"), "p") == "x"


def test_the_scripted_engine_answers_a_warm_up_without_a_script_reply() -> None:
    engine = ScriptedEngine(["the only reply"])
    service = service_on(engine)
    warm = {"type": "response.create", "input": "warm", "generate": False}
    _, events = run(service, warm, ResponseCreateEvent)
    assert [e["type"] for e in events][-1] == "response.completed"
    assert events[-1]["response"]["output"] == []
    assert engine.stats.warm_ups == 1 and engine.replies_total == 0
    assert engine.remaining == ["the only reply"]
    _, events = run(service, {"input": "now"})
    assert events[-1]["response"]["output"][0]["content"][0]["text"] == "the only reply"
