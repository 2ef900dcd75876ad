"""Generate the parts of the documentation that the code already knows.

    python -m realtime.docgen           # rewrite the generated files and sections
    python -m realtime.docgen --check   # exit 1 if any of them is out of date

* docs/protocol.md: the socket and request state diagrams (Mermaid, from the
  tables in `realtime.protocol.states`) and the limits table (from the flag
  table, `realtime.config.flags`, with the defaults of `ServerConfig`), between
  `<!-- generated: NAME -->` markers;
* docs/flags.md: every `realtime serve` flag, from the same flag table;
* docs/openapi.json: the HTTP routes (from the app's route table) with the
  request and response schemas generated from the pydantic models;
* docs/asyncapi.yaml: /v1/realtime, with one message per frame type generated
  from `realtime.dialects.chat.frame_models`.

The tests run the check, so a change to a model, a route, a state table or a
default that is not reflected in the docs fails the build.
"""

from __future__ import annotations

import argparse
import importlib
import json
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pydantic import BaseModel
from pydantic.json_schema import JsonSchemaMode, models_json_schema
from starlette.routing import BaseRoute, Route

from realtime import __version__
from realtime.config import ServerConfig
from realtime.config.flags import FLAGS, GROUPS, Flag
from realtime.config.values import Integer, Number
from realtime.dialects.chat.completions import CompletionRequest, TextCompletion
from realtime.dialects.chat.frame_models import CLIENT_FRAMES, SERVER_FRAMES
from realtime.dialects.chat.request import ChatCompletionRequest
from realtime.dialects.chat.response import ChatCompletion, ChatCompletionChunk, ErrorBody
from realtime.dialects.chat.tokenize import (
    DetokenizeRequest,
    DetokenizeResponse,
    TokenizeRequest,
    TokenizeResponse,
)
from realtime.dialects.messages.models import CountTokensRequest, MessagesRequest
from realtime.dialects.realtime_events.event_models import CLIENT_EVENTS_DOC, SERVER_EVENTS_DOC
from realtime.dialects.responses.compaction import CompactRequest
from realtime.dialects.responses.conversations import (
    ConversationCreateRequest,
    ConversationItemsRequest,
    ConversationUpdateRequest,
)
from realtime.dialects.responses.items import (
    CompactionItem,
    FunctionCallItem,
    FunctionCallOutputItem,
    MessageItem,
    ReasoningItem,
)
from realtime.dialects.responses.request import ResponseCreateEvent, ResponsesRequest
from realtime.dialects.responses.schemas import (
    CompactedResponse,
    Conversation,
    ConversationItemList,
    DeletedConversation,
    DeletedResponse,
    InputItemList,
    ResponseStreamEvent,
    SocketErrorEvent,
    SocketResponseEvent,
    SocketSteerAcceptedEvent,
    SocketSteerEvent,
    SocketSteerFailedEvent,
)
from realtime.dialects.responses.schemas import Response as ResponseObject
from realtime.dialects.responses.tools import FunctionTool
from realtime.http.schemas import Health, ModelList, Readiness, ServedModel
from realtime.protocol.states import REQUEST, SETUP, SOCKET

DOCS = Path(__file__).resolve().parent.parent / "docs"
REF = "#/components/schemas/{model}"

# --- docs/protocol.md sections ----------------------------------------------------


def config_default(field: str) -> str:
    value = getattr(ServerConfig(), field)
    if value is None:
        return "none"
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    return str(value)


def limits_table() -> str:
    rows = ["| Flag | Default | Unit | At the limit |", "| --- | --- | --- | --- |"]
    for flag in FLAGS:
        if flag.limit is not None and flag.field is not None:
            rows.append(
                f"| `{flag.option}` | {config_default(flag.field)} | {flag.limit.unit}"
                f" | {flag.limit.at_limit} |"
            )
    return "\n".join(rows)


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def _flag_value(flag: Flag) -> str:
    """What the flag takes: its choices, its range, or the kind of text."""
    if flag.kind in ("switch", "off"):
        return "none (a switch)"
    if flag.choices is not None:
        taken = ", ".join(f"`{choice}`" for choice in flag.choices)
    elif isinstance(flag.value, (Integer, Number)):
        taken = flag.value.describe()
    elif flag.value in (int, float):
        taken = "number"
    else:
        taken = f"`{_cell(flag.metavar or flag.dest.upper())}`"
    return taken + (", repeatable" if flag.kind == "repeat" else "")


def _flag_default(flag: Flag) -> str:
    if flag.engine is not None:
        return "the engine's"
    if flag.kind in ("switch", "off"):
        return "off"
    if flag.field is None or flag.kind == "repeat":
        return "none"
    return config_default(flag.field)


def _flag_target(flag: Flag) -> str:
    """Where the flag lands in `ServerConfig`."""
    if flag.engine is not None:
        return f'`engine_options["{flag.engine.keyword}"]`'
    if flag.adds_to is not None:
        return f"adds to `{flag.adds_to}`"
    target = f"`{flag.field}`"
    if flag.kind == "off":
        return f"{target} (False when given)"
    if flag.none_as is not None:
        return f"{target} ({flag.none_as} is None)"
    return target


def _flag_help(flag: Flag) -> str:
    """The `--help` text, with the default filled in as argparse fills it."""
    return _cell((flag.help or "").replace("%(default)s", str(flag.default())))


def flags_reference() -> str:
    """One table per `--help` group: every flag, what it takes, its default, its field."""
    parts = []
    for group in GROUPS:
        parts += [
            f"### {group}",
            "",
            "| Flag | Takes | Default | `ServerConfig` | What it does |",
            "| --- | --- | --- | --- | --- |",
        ]
        for flag in FLAGS:
            if flag.group == group:
                parts.append(
                    f"| `{flag.option}` | {_flag_value(flag)} | {_flag_default(flag)}"
                    f" | {_flag_target(flag)} | {_flag_help(flag)} |"
                )
        parts.append("")
    return "\n".join(parts[:-1])


PROTOCOL_SECTIONS: dict[str, Callable[[], str]] = {
    "socket-states": lambda: f"```mermaid\n{SOCKET.mermaid()}\n```",
    "request-states": lambda: f"```mermaid\n{REQUEST.mermaid()}\n```",
    "setup-states": lambda: f"```mermaid\n{SETUP.mermaid()}\n```",
    "limits": limits_table,
}

FLAGS_SECTIONS: dict[str, Callable[[], str]] = {"flags": flags_reference}

_SECTION = re.compile(
    r"(<!-- generated: (?P<name>[a-z-]+) [^\n]*-->\n)(?P<body>.*?)(<!-- end generated -->)", re.S
)


def render_sections(text: str, sections: dict[str, Callable[[], str]], document: str) -> str:
    """`text` with each `<!-- generated: NAME -->` section of `sections` rewritten."""

    def replace(match: re.Match[str]) -> str:
        name = match["name"]
        if name not in sections:
            raise KeyError(f"{document}: unknown generated section {name!r}")
        return match.group(1) + sections[name]() + "\n" + match.group(4)

    rendered = _SECTION.sub(replace, text)
    missing = set(sections) - {m["name"] for m in _SECTION.finditer(text)}
    if missing:
        raise KeyError(f"{document} lacks generated sections: {sorted(missing)}")
    return rendered


def render_protocol_md(text: str) -> str:
    return render_sections(text, PROTOCOL_SECTIONS, "docs/protocol.md")


# --- schemas -----------------------------------------------------------------------


def component_schemas(
    models: list[tuple[type[BaseModel], JsonSchemaMode]],
) -> tuple[dict[tuple[Any, JsonSchemaMode], Any], dict[str, Any]]:
    refs, definitions = models_json_schema(models, ref_template=REF)
    return dict(refs), dict(definitions.get("$defs", {}))


# --- docs/openapi.json ------------------------------------------------------------------

_ERROR_STATUSES = {
    "400": "Invalid request (validation, unknown field, unsupported feature, context length,"
    " max_tokens over the cap, a key in the query string)",
    "401": "Missing or wrong API key (when the server has keys)",
    "403": "Origin not allowed",
    "404": "Unknown model, or an unknown response id",
    "409": "The background response runs on another server sharing the store",
    "429": "Too many background responses queued or running (in all, or for this key)",
    "500": "Engine or internal error",
    "503": "Engine unavailable, or the server is shutting down",
}

_OPEN_PATHS = {"/health", "/ready"}


def _path_param(name: str) -> dict[str, Any]:
    return {"name": name, "in": "path", "required": True, "schema": {"type": "string"}}


def _query_param(name: str, kind: str) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": kind}
    if kind == "array":
        schema["items"] = {"type": "string"}
    return {"name": name, "in": "query", "required": False, "schema": schema}


def _openapi_path(path: str) -> str:
    return re.sub(r"\{(\w+):\w+\}", r"{\1}", path)


def http_routes(routes: list[BaseRoute]) -> list[tuple[str, str, Route]]:
    """(OpenAPI path, method, route) for every API route; HEAD is implied by GET.

    The chat page's routes (named "ui...") serve files, not the API, and are left out.
    """
    found = []
    for route in routes:
        if isinstance(route, Route) and not route.name.startswith("ui"):
            for method in sorted(route.methods or ()):
                if method != "HEAD":
                    found.append((_openapi_path(route.path), method.lower(), route))
    return found


#: Anthropic's `Message` and stream events, described rather than modelled (the server
#: builds them as plain dicts: `realtime/dialects/messages/render.py`).
_ANTHROPIC_MESSAGE: dict[str, Any] = {
    "type": "object",
    "description": "Anthropic's Message: id, type `message`, role `assistant`, model,"
    " content (`thinking`, `text`, `tool_use` blocks), stop_reason (`end_turn`,"
    " `max_tokens`, `stop_sequence`, `tool_use`), stop_sequence, usage (input_tokens,"
    " output_tokens, cache_read_input_tokens, cache_creation_input_tokens)",
    "required": ["id", "type", "role", "model", "content", "stop_reason", "usage"],
}
_ANTHROPIC_EVENT: dict[str, Any] = {
    "type": "object",
    "description": "One Messages stream event; its `type` is also its SSE `event:` name",
    "required": ["type"],
}
_ANTHROPIC_ERROR: dict[str, Any] = {
    "type": "object",
    "required": ["type", "error"],
    "properties": {
        "type": {"const": "error"},
        "error": {
            "type": "object",
            "required": ["type", "message"],
            "properties": {"type": {"type": "string"}, "message": {"type": "string"}},
        },
    },
}


def _anthropic_errors(*statuses: str) -> dict[str, Any]:
    return {
        status: {
            "description": _ERROR_STATUSES[status],
            "content": {"application/json": {"schema": _ANTHROPIC_ERROR}},
        }
        for status in statuses
    }


def _conversation_operations(
    ref: Any, json_body: Any, errors: Any
) -> dict[tuple[str, str], dict[str, Any]]:
    """The Conversations API's routes (`realtime/http/conversations.py`)."""
    one = "/v1/conversations/{conversation_id}"
    item = one + "/items/{item_id}"
    conversation, item_list = ref(Conversation), ref(ConversationItemList)
    missing = errors("400", "401", "403", "404", "503")

    def body(model: type[BaseModel]) -> dict[str, Any]:
        schema = ref(model, "validation")
        return {"required": True, "content": {"application/json": {"schema": schema}}}

    return {
        ("/v1/conversations", "post"): {
            "summary": "Create a conversation (its first items: at most 20 input items)",
            "description": "A response created with `conversation` reads its items as the"
            " context before its input, and adds its input and output items to it.",
            "requestBody": body(ConversationCreateRequest),
            "responses": {"200": json_body(conversation, "The conversation"),
                          **errors("400", "401", "403", "503")},
        },
        (one, "get"): {
            "summary": "A conversation",
            "parameters": [_path_param("conversation_id")],
            "responses": {"200": json_body(conversation, "The conversation"), **missing},
        },
        (one, "post"): {
            "summary": "Replace a conversation's metadata",
            "parameters": [_path_param("conversation_id")],
            "requestBody": body(ConversationUpdateRequest),
            "responses": {"200": json_body(conversation, "The conversation"), **missing},
        },
        (one, "delete"): {
            "summary": "Delete a conversation and its items",
            "parameters": [_path_param("conversation_id")],
            "responses": {"200": json_body(ref(DeletedConversation), "Deleted"), **missing},
        },
        (one + "/items", "get"): {
            "summary": "A conversation's items, a page at a time",
            "parameters": [
                _path_param("conversation_id"),
                _query_param("after", "string"),
                _query_param("limit", "integer"),
                _query_param("order", "string"),
                _query_param("include", "array"),
            ],
            "responses": {"200": json_body(item_list, "A page of items"), **missing},
        },
        (one + "/items", "post"): {
            "summary": "Add items to a conversation (at most 20 at a time)",
            "parameters": [_path_param("conversation_id"), _query_param("include", "array")],
            "requestBody": body(ConversationItemsRequest),
            "responses": {"200": json_body(item_list, "The items added"), **missing},
        },
        (item, "get"): {
            "summary": "One item of a conversation",
            "parameters": [
                _path_param("conversation_id"),
                _path_param("item_id"),
                _query_param("include", "array"),
            ],
            "responses": {"200": json_body({"type": "object"}, "The item"), **missing},
        },
        (item, "delete"): {
            "summary": "Delete one item of a conversation; answers with the conversation",
            "parameters": [_path_param("conversation_id"), _path_param("item_id")],
            "responses": {"200": json_body(conversation, "The conversation"), **missing},
        },
    }  # fmt: skip


def openapi(routes: list[BaseRoute]) -> dict[str, Any]:
    models: list[tuple[type[BaseModel], JsonSchemaMode]] = [
        (ChatCompletionRequest, "validation"),
        (CompletionRequest, "validation"),
        (TextCompletion, "serialization"),
        (ChatCompletion, "serialization"),
        (ChatCompletionChunk, "serialization"),
        (ErrorBody, "serialization"),
        (ModelList, "serialization"),
        (ServedModel, "serialization"),
        (Health, "serialization"),
        (Readiness, "serialization"),
        (ResponsesRequest, "validation"),
        (MessageItem, "validation"),
        (FunctionCallItem, "validation"),
        (FunctionCallOutputItem, "validation"),
        (ReasoningItem, "validation"),
        (CompactionItem, "validation"),
        (CompactRequest, "validation"),
        (CompactedResponse, "serialization"),
        (FunctionTool, "validation"),
        (ResponseObject, "serialization"),
        (ResponseStreamEvent, "serialization"),
        (InputItemList, "serialization"),
        (DeletedResponse, "serialization"),
        (ConversationCreateRequest, "validation"),
        (ConversationUpdateRequest, "validation"),
        (ConversationItemsRequest, "validation"),
        (Conversation, "serialization"),
        (DeletedConversation, "serialization"),
        (ConversationItemList, "serialization"),
        (TokenizeRequest, "validation"),
        (TokenizeResponse, "serialization"),
        (MessagesRequest, "validation"),
        (CountTokensRequest, "validation"),
        (DetokenizeRequest, "validation"),
        (DetokenizeResponse, "serialization"),
    ]
    refs, schemas = component_schemas(models)

    def ref(model: type[BaseModel], mode: JsonSchemaMode = "serialization") -> dict[str, Any]:
        return dict(refs[(model, mode)])

    def json_body(schema: dict[str, Any], description: str) -> dict[str, Any]:
        return {"description": description, "content": {"application/json": {"schema": schema}}}

    def errors(*statuses: str) -> dict[str, Any]:
        return {s: json_body(ref(ErrorBody), _ERROR_STATUSES[s]) for s in statuses}

    known: dict[tuple[str, str], dict[str, Any]] = {
        ("/v1/chat/completions", "post"): {
            "summary": "Create a chat completion (OpenAI-compatible)",
            "description": "`stream: false` (the default): one `chat.completion`."
            " `stream: true`: server-sent events, one `data: <chat.completion.chunk>` per"
            " chunk, `: keep-alive` comments, an error event `data: {\"error\": ...}` for a"
            " failure after the stream started, and `data: [DONE]`.",
            "requestBody": {
                "required": True,
                "content": {
                    "application/json": {"schema": ref(ChatCompletionRequest, "validation")}
                },
            },
            "responses": {
                "200": {
                    "description": "The completion, or its chunks as server-sent events",
                    "content": {
                        "application/json": {"schema": ref(ChatCompletion)},
                        "text/event-stream": {"schema": ref(ChatCompletionChunk)},
                    },
                },
                **errors("400", "401", "403", "404", "500", "503"),
            },
        },
        ("/v1/completions", "post"): {
            "summary": "Create a text completion (OpenAI's legacy API)",
            "description": "One choice per prompt (a string, strings, token ids, or lists of"
            " token ids). `stream: true`: server-sent events of `text_completion` chunks and"
            " `data: [DONE]`, framed as for chat.",
            "requestBody": {
                "required": True,
                "content": {
                    "application/json": {"schema": ref(CompletionRequest, "validation")}
                },
            },
            "responses": {
                "200": {
                    "description": "The completion, or its chunks as server-sent events",
                    "content": {
                        "application/json": {"schema": ref(TextCompletion)},
                        "text/event-stream": {"schema": ref(TextCompletion)},
                    },
                },
                **errors("400", "401", "403", "404", "500", "503"),
            },
        },
        ("/v1/responses", "post"): {
            "summary": "Create a response (the OpenAI Responses API)",
            "description": "`input` is a string or a list of items: "
            + ", ".join(f"`{m.__name__}`" for m in
                        (MessageItem, FunctionCallItem, FunctionCallOutputItem, ReasoningItem,
                         CompactionItem))
            + "; `tools` are `FunctionTool`s. `stream: false` (the default): one Response."
            " `stream: true`: server-sent events, each `event: <type>` and"
            " `data: <ResponseStreamEvent>`, numbered by `sequence_number`, ending with"
            " `response.completed`, `response.incomplete` or `response.failed` (no"
            " `[DONE]`). `store` (default true) keeps the response for GET and"
            " `previous_response_id`. `background: true` (needs `store`): the Response at"
            " status `queued` at once (or, with `stream`, its events from `response.created`"
            " and `response.queued`), while it runs detached from the request; poll it with"
            " GET, resume its events with `GET ?stream=true&starting_after=N`, cancel it with"
            " POST .../cancel.",
            "requestBody": {
                "required": True,
                "content": {"application/json": {"schema": ref(ResponsesRequest, "validation")}},
            },
            "responses": {
                "200": {
                    "description": "The Response, or its events as server-sent events",
                    "content": {
                        "application/json": {"schema": ref(ResponseObject)},
                        "text/event-stream": {"schema": ref(ResponseStreamEvent)},
                    },
                },
                **errors("400", "401", "403", "404", "429", "500", "503"),
            },
        },
        ("/v1/responses/compact", "post"): {
            "summary": "Compact a context into one compaction item (the served model's summary)",
            "description": "The context is the chain of `previous_response_id`, then `input`."
            " Kept verbatim: system and developer messages and the last turn (inside the"
            " compaction item); summarized: the rest. Send `output` as the next input."
            " Nothing is stored.",
            "requestBody": {
                "required": True,
                "content": {"application/json": {"schema": ref(CompactRequest, "validation")}},
            },
            "responses": {"200": json_body(ref(CompactedResponse), "The compacted context"),
                          **errors("400", "401", "403", "404", "500", "503")},
        },
        ("/v1/responses/{response_id}", "get"): {
            "summary": "A stored response; `stream=true`: a background response's events",
            "description": "`stream=true` (a background response only): its events numbered"
            " above `starting_after` (default: all kept), then the live ones until its last,"
            " as server-sent events. The events are kept in memory by the server that runs"
            " the response (`--background-max-events`, the newest), until 600 s after it"
            " ends; a resume it cannot serve is a 400 (`events_not_kept`, or `invalid_value`"
            " for a number past the last event).",
            "parameters": [
                _path_param("response_id"),
                _query_param("include", "array"),
                _query_param("stream", "boolean"),
                _query_param("starting_after", "integer"),
            ],
            "responses": {
                "200": {
                    "description": "The Response, or a background response's events",
                    "content": {
                        "application/json": {"schema": ref(ResponseObject)},
                        "text/event-stream": {"schema": ref(ResponseStreamEvent)},
                    },
                },
                **errors("400", "401", "403", "404"),
            },
        },
        ("/v1/responses/{response_id}", "delete"): {
            "summary": "Delete a stored response",
            "parameters": [_path_param("response_id")],
            "responses": {"200": json_body(ref(DeletedResponse), "Deleted"),
                          **errors("400", "401", "403", "404")},
        },
        ("/v1/responses/{response_id}/input_items", "get"): {
            "summary": "A stored response's input items, a page at a time",
            "parameters": [
                _path_param("response_id"),
                _query_param("after", "string"),
                _query_param("limit", "integer"),
                _query_param("order", "string"),
                _query_param("include", "array"),
            ],
            "responses": {"200": json_body(ref(InputItemList), "A page of input items"),
                          **errors("400", "401", "403", "404")},
        },
        ("/v1/responses/{response_id}/cancel", "post"): {
            "summary": "Cancel a background response (status `cancelled`; one that ended is"
            " returned as it is); 400 for a response that is not a background one",
            "parameters": [_path_param("response_id")],
            "responses": {"200": json_body(ref(ResponseObject), "The Response"),
                          **errors("400", "401", "403", "404", "409")},
        },
        ("/v1/messages", "post"): {
            "summary": "Create a message (Anthropic's Messages API; Claude Code, the anthropic"
            " SDKs)",
            "description": "Any query string (`?beta=true`). The key as `x-api-key` or"
            " `Authorization: Bearer`. `stream: false` (the default): one `Message`."
            " `stream: true`: server-sent events, each `event: <type>` and `data: <event>`:"
            " `message_start`, then per content block `content_block_start`,"
            " `content_block_delta`s and `content_block_stop`, then `message_delta` and"
            " `message_stop`; keep-alives are `ping` events, a late failure an `error`"
            " event. Errors: Anthropic's body `{\"type\": \"error\", \"error\": {\"type\","
            " \"message\"}}`.",
            "requestBody": {"required": True, "content": {"application/json": {
                "schema": ref(MessagesRequest, "validation")}}},
            "responses": {
                "200": {
                    "description": "The Message, or its events as server-sent events",
                    "content": {
                        "application/json": {"schema": _ANTHROPIC_MESSAGE},
                        "text/event-stream": {"schema": _ANTHROPIC_EVENT},
                    },
                },
                **_anthropic_errors("400", "401", "403", "404", "500", "503"),
            },
        },
        ("/v1/messages/count_tokens", "post"): {
            "summary": "Count a Messages request's prompt tokens, as generation renders it",
            "requestBody": {"required": True, "content": {"application/json": {
                "schema": ref(CountTokensRequest, "validation")}}},
            "responses": {
                "200": json_body(
                    {"type": "object", "required": ["input_tokens"],
                     "properties": {"input_tokens": {"type": "integer"}}},
                    "The prompt's tokens",
                ),
                **_anthropic_errors("400", "401", "403", "404", "503"),
            },
        },
        ("/v1/models", "get"): {
            "summary": "List the served model",
            "responses": {"200": json_body(ref(ModelList), "The model list"),
                          **errors("401", "403")},
        },
        ("/v1/models/{model_id}", "get"): {
            "summary": "Get the served model's card",
            "parameters": [{"name": "model_id", "in": "path", "required": True,
                            "schema": {"type": "string"}}],
            "responses": {"200": json_body(ref(ServedModel), "The model card"),
                          **errors("401", "403", "404")},
        },
        ("/tokenize", "post"): {
            "summary": "Tokenize a prompt or a conversation as generation would (vLLM's shape)",
            "description": "`prompt` (text) or `messages` (rendered with the chat template,"
            " `tools` and `chat_template_kwargs`, exactly as a chat request's prompt):"
            " `count` equals that request's `usage.prompt_tokens`.",
            "requestBody": {"required": True, "content": {"application/json": {
                "schema": ref(TokenizeRequest, "validation")}}},
            "responses": {"200": json_body(ref(TokenizeResponse), "The tokens"),
                          **errors("400", "401", "403", "404", "503")},
        },
        ("/detokenize", "post"): {
            "summary": "Token ids back to text, special tokens included (vLLM's shape)",
            "requestBody": {"required": True, "content": {"application/json": {
                "schema": ref(DetokenizeRequest, "validation")}}},
            "responses": {"200": json_body(ref(DetokenizeResponse), "The text"),
                          **errors("400", "401", "403", "404", "503")},
        },
        ("/health", "get"): {
            "summary": "Liveness (no key needed)",
            "responses": {"200": json_body(ref(Health), "The process is serving HTTP")},
        },
        ("/ready", "get"): {
            "summary": "Readiness (no key needed): the engine is loaded and no shutdown runs",
            "responses": {"200": json_body(ref(Readiness), "Ready"),
                          "503": json_body(ref(Readiness), "Not ready, or shutting down")},
        },
        ("/metrics", "get"): {
            "summary": "Prometheus metrics (text exposition format)",
            "responses": {
                "200": {"description": "Metrics",
                        "content": {"text/plain": {"schema": {"type": "string"}}}},
                **errors("401", "403"),
            },
        },
    }  # fmt: skip
    known.update(_conversation_operations(ref, json_body, errors))
    paths: dict[str, dict[str, Any]] = {}
    for path, method, route in http_routes(routes):
        operation = known.get((path, method))
        if operation is None:  # a route this generator does not describe in detail
            doc = (route.endpoint.__doc__ or route.name or path).strip().splitlines()[0]
            operation = {"summary": doc, "responses": {"200": {"description": "OK"}}}
        operation = {"operationId": f"{method}_{route.name}", **operation}
        if path in _OPEN_PATHS:
            operation["security"] = []
        paths.setdefault(path, {})[method] = operation
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "realtime HTTP API",
            "version": __version__,
            "description": "The OpenAI-compatible HTTP API of `realtime`. The WebSocket"
            " /v1/realtime is described in asyncapi.yaml; both are explained in protocol.md.",
        },
        "servers": [{"url": "http://127.0.0.1:8000"}],
        "security": [{"bearerAuth": []}],
        "paths": paths,
        "components": {
            "schemas": schemas,
            "securitySchemes": {
                "bearerAuth": {
                    "type": "http",
                    "scheme": "bearer",
                    "description": "Required when the server runs with --api-key or"
                    " --api-key-file; /health and /ready are always open.",
                }
            },
        },
    }


# --- docs/asyncapi.yaml ---------------------------------------------------------------

_CLOSE_CODES = {
    1000: "`session.close` finished, `idle timeout`, or `session expired`",
    1001: "server shutting down",
    1003: "a binary frame",
    1007: "a text frame that is not JSON, or not UTF-8",
    1008: "slow consumer: the client stopped reading",
    1009: "a message over --max-frame-bytes",
    1011: "engine unavailable, internal error, or keepalive ping timeout",
    1012: "a socket still open after shutdown gave up on it (uvicorn)",
}


#: WebSocket mode at /v1/responses: its client events and server events.
RESPONSES_CLIENT_EVENTS: dict[str, type[BaseModel]] = {
    "ResponsesCreateEvent": ResponseCreateEvent,
    "ResponsesSteerEvent": SocketSteerEvent,
}
RESPONSES_SERVER_EVENTS: dict[str, type[BaseModel]] = {
    "ResponsesServerEvent": SocketResponseEvent,
    "ResponsesErrorEvent": SocketErrorEvent,
    "ResponsesSteerAcceptedEvent": SocketSteerAcceptedEvent,
    "ResponsesSteerFailedEvent": SocketSteerFailedEvent,
}


def asyncapi(ws_paths: list[str]) -> dict[str, Any]:
    """The socket protocols' document; `ws_paths`: the socket routes (the app's)."""
    frame_models = {**CLIENT_FRAMES, **SERVER_FRAMES}
    responses_models = {**RESPONSES_CLIENT_EVENTS, **RESPONSES_SERVER_EVENTS}
    event_models = {**CLIENT_EVENTS_DOC, **SERVER_EVENTS_DOC}
    clashes = (set(frame_models) | set(responses_models)) & set(event_models)
    if clashes or set(frame_models) & set(responses_models):
        raise ValueError(f"AsyncAPI message names used twice: {sorted(clashes)}")
    every_model = {**frame_models, **responses_models, **event_models}
    refs, schemas = component_schemas([(m, "validation") for m in every_model.values()])
    messages = {}
    for name, model in every_model.items():
        messages[name] = {
            "name": name,
            "title": name,
            "summary": (model.__doc__ or name).strip().splitlines()[0],
            "contentType": "application/json",
            "payload": dict(refs[(model, "validation")]),
        }
    channel_messages = {n: {"$ref": f"#/components/messages/{n}"} for n in frame_models}
    responses_messages = {n: {"$ref": f"#/components/messages/{n}"} for n in responses_models}
    event_messages = {n: {"$ref": f"#/components/messages/{n}"} for n in event_models}

    def operation(
        action: str, names: list[str], summary: str, channel: str = "realtime"
    ) -> dict[str, Any]:
        return {
            "action": action,
            "summary": summary,
            "channel": {"$ref": f"#/channels/{channel}"},
            "messages": [{"$ref": f"#/channels/{channel}/messages/{n}"} for n in names],
        }

    return {
        "asyncapi": "3.0.0",
        "info": {
            "title": "realtime WebSocket API",
            "version": __version__,
            "description": "One persistent socket, many chat requests: request frames in,"
            " chunk frames out, each request ending with exactly one terminal frame"
            " (`response.done` or `error`). protocol.md explains the ordering, the states"
            " and the limits. Text frames only, one JSON object each.",
        },
        "defaultContentType": "application/json",
        "servers": {
            "local": {
                "host": "127.0.0.1:8000",
                "protocol": "ws",
                "description": "`realtime serve` defaults; put wss:// on a proxy in front.",
                "security": [
                    {"$ref": "#/components/securitySchemes/bearer"},
                    {"$ref": "#/components/securitySchemes/subprotocolKey"},
                ],
            }
        },
        "channels": {
            "realtime": {
                "address": ws_paths[0] if ws_paths else "/v1/realtime",
                "messages": channel_messages,
                "bindings": {
                    "ws": {
                        "method": "GET",
                        "headers": {
                            "type": "object",
                            "properties": {
                                "Authorization": {
                                    "type": "string",
                                    "description": "Bearer <key> (non-browser clients)",
                                },
                                "Sec-WebSocket-Protocol": {
                                    "type": "string",
                                    "description": "browsers: `realtime, realtime-key.<key>`;"
                                    " the server selects `realtime`",
                                },
                                "Origin": {
                                    "type": "string",
                                    "description": "checked against --allowed-origin"
                                    " (default: same origin, or none)",
                                },
                            },
                        },
                    }
                },
                "x-close-codes": {str(k): v for k, v in _CLOSE_CODES.items()},
            },
            "responses": {
                "address": "/v1/responses",
                "description": "The Responses API's WebSocket mode (`client.responses.connect()`"
                " of the openai SDK): `response.create` events in, the Responses stream"
                " events out, each with its lane's `stream_id`. The handshake is /v1/realtime's;"
                " a bad event costs an `error` event, never the socket.",
                "messages": responses_messages,
                "x-close-codes": {"1000": _CLOSE_CODES[1000], "1001": _CLOSE_CODES[1001],
                                  "1007": "a text frame that is not UTF-8",
                                  "1009": _CLOSE_CODES[1009], "1011": _CLOSE_CODES[1011]},
            },
            "realtimeEvents": {
                "address": ws_paths[0] if ws_paths else "/v1/realtime",
                "title": "The OpenAI Realtime API's events (text mode)",
                "description": "The same socket when the handshake URL carries a `model` query"
                " parameter (the openai SDK's `client.realtime.connect(model=...)`): the"
                " server sends `session.created` first; every refusal is an `error` event"
                " and the socket stays open. Audio events are refused. See protocol.md.",
                "messages": event_messages,
                "bindings": {
                    "ws": {
                        "method": "GET",
                        "query": {
                            "type": "object",
                            "properties": {
                                "model": {
                                    "type": "string",
                                    "description": "the served model; its presence selects"
                                    " this dialect",
                                },
                            },
                            "required": ["model"],
                        },
                    }
                },
            },
        },
        "operations": {
            "receiveClientFrames": operation(
                "receive", list(CLIENT_FRAMES), "Frames a client sends"
            ),
            "sendServerFrames": operation("send", list(SERVER_FRAMES), "Frames the server sends"),
            "receiveResponsesEvents": operation(
                "receive", list(RESPONSES_CLIENT_EVENTS), "WebSocket mode: what a client sends",
                "responses",
            ),
            "sendResponsesEvents": operation(
                "send", list(RESPONSES_SERVER_EVENTS), "WebSocket mode: what the server sends",
                "responses",
            ),
            "receiveClientEvents": operation(
                "receive", list(CLIENT_EVENTS_DOC), "Realtime events a client sends",
                "realtimeEvents",
            ),
            "sendServerEvents": operation(
                "send", list(SERVER_EVENTS_DOC), "Realtime events the server sends",
                "realtimeEvents",
            ),
        },
        "components": {
            "messages": messages,
            "schemas": schemas,
            "securitySchemes": {
                "bearer": {"type": "http", "scheme": "bearer",
                           "description": "Authorization: Bearer <key>"},
                "subprotocolKey": {
                    "type": "httpApiKey",
                    "name": "Sec-WebSocket-Protocol",
                    "in": "header",
                    "description": "For browsers: offer the subprotocols `realtime` and"
                    " `realtime-key.<key>`; the key is never echoed.",
                },
            },
        },
    }  # fmt: skip


def dump_yaml(data: Any) -> str:
    yaml = importlib.import_module("yaml")  # PyYAML: dev-time only (this generator, the tests)
    text: str = yaml.safe_dump(data, sort_keys=False, allow_unicode=True, width=100)
    return "# Generated by `python -m realtime.docgen`; do not edit by hand.\n" + text


# --- the files ---------------------------------------------------------------------


def generated_files(docs: Path = DOCS) -> dict[Path, str]:
    from realtime.app import routes as app_routes
    from realtime.app import socket_paths

    table = app_routes()
    protocol = docs / "protocol.md"
    flags = docs / "flags.md"
    return {
        protocol: render_protocol_md(protocol.read_text(encoding="utf-8")),
        flags: render_sections(flags.read_text(encoding="utf-8"), FLAGS_SECTIONS, "docs/flags.md"),
        docs / "openapi.json": json.dumps(openapi(table), indent=2, ensure_ascii=False) + "\n",
        docs / "asyncapi.yaml": dump_yaml(asyncapi(socket_paths())),
    }


def stale_files(docs: Path = DOCS) -> list[Path]:
    stale = []
    for path, content in generated_files(docs).items():
        if not path.exists() or path.read_text(encoding="utf-8") != content:
            stale.append(path)
    return stale


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m realtime.docgen", description=__doc__)
    parser.add_argument("--check", action="store_true", help="only report stale files")
    args = parser.parse_args(argv)
    if args.check:
        stale = stale_files()
        for path in stale:
            print(f"out of date: {path} (run python -m realtime.docgen)", file=sys.stderr)
        return 1 if stale else 0
    for path, content in generated_files().items():
        path.write_text(content, encoding="utf-8")
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
