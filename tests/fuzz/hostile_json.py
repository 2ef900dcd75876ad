"""Hypothesis strategies for hostile request bodies: deep, wide and oddly typed JSON.

Shared by the socket and the HTTP fuzz tests. Bodies are built as JSON *text*:
the deep parts are nested far past what `json.dumps` (or orjson) will write, so a
placeholder string is swapped for them after the rest is serialized.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from typing import Any

from hypothesis import strategies as st

#: Every top-level field of a chat request (and the socket's envelope keys).
REQUEST_FIELDS = (
    "model messages max_tokens max_completion_tokens temperature top_p n seed presence_penalty"
    " frequency_penalty logit_bias stop stream stream_options logprobs top_logprobs"
    " response_format tools tool_choice parallel_tool_calls user metadata store service_tier"
    " reasoning_effort verbosity prompt_cache_key safety_identifier modalities audio prediction"
    " web_search_options functions function_call top_k min_p repetition_penalty min_tokens"
    " ignore_eos stop_token_ids include_stop_str_in_output skip_special_tokens"
    " chat_template_kwargs cache_salt nvext"
).split()
COMPLETION_FIELDS = (
    "model prompt max_tokens temperature top_p n seed stop stream stream_options logprobs echo"
    " suffix best_of logit_bias user top_k min_p min_tokens ignore_eos stop_token_ids nvext"
).split()

_HOLE = "\u0000deep\u0000"

scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**64)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.sampled_from([0, 1, -1, 2.0, 1.5, "", "yes", "true", "2", "1.5", "null"])
    | st.text(max_size=20)
)
json_values = st.recursive(
    scalars,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)


#: Around the limit (64), where recursion used to fail (500, 1000), past the decoder (5000).
DEPTHS = (500, 1000, 65, 64, 62, 10, 120, 1100, 5000)
_NESTINGS = (('{"a":', "}"), ("[", "]"), ('{"k": [', "]}"))


def nested(depth: int, opener: str = '{"a":', closer: str = "}", leaf: str = "1") -> str:
    return opener * depth + leaf + closer * depth


@st.composite
def deep_text(draw: st.DrawFn) -> str:
    """JSON text nested around the limit, far past it, and past the decoder's own limit."""
    opener, closer = draw(st.sampled_from(_NESTINGS))
    leaf = draw(st.sampled_from(["1", '"x"', "{}", "[]", "null"]))
    return nested(draw(st.sampled_from(DEPTHS)), opener, closer, leaf)


@st.composite
def wide_value(draw: st.DrawFn) -> Any:
    """Many keys or many items, shallow."""
    n = draw(st.sampled_from([100, 1000, 5000]))
    if draw(st.booleans()):
        return {f"k{i}": i for i in range(n)}
    return [draw(st.sampled_from([0, "s", None, {}, []]))] * n


#: Where a deep value goes: a top-level field, or inside one of the free-form fields.
_DEEP_PLACES = [
    lambda body: body.update(metadata=_HOLE),
    lambda body: body.update(chat_template_kwargs={"x": _HOLE}),
    lambda body: body["messages"][0].update(extra=_HOLE),
    lambda body: body.update(
        tools=[{"type": "function", "function": {"name": "f", "parameters": _HOLE}}]
    ),
    lambda body: body.update(
        response_format={"type": "json_schema", "json_schema": {"name": "n", "schema": _HOLE}}
    ),
    lambda body: body.update(nvext={"extra_fields": _HOLE}),
    lambda body: body.update(stop=_HOLE),
    lambda body: body.update(audio=_HOLE),
    lambda body: body["messages"].append(
        {
            "role": "assistant",
            "tool_calls": [
                {"id": "c", "type": "function", "function": {"name": "f", "arguments": _HOLE}}
            ],
        }
    ),
]


def chat_body(content: str = "fuzz", **fields: Any) -> dict[str, Any]:
    return {
        "model": "echo",
        "messages": [{"role": "user", "content": content}],
        "max_tokens": 8,
        **fields,
    }


def _fill(body: dict[str, Any], deep: str) -> str:
    text = json.dumps(body)
    hole = json.dumps(_HOLE)
    if '"arguments": ' + hole in text:
        deep = json.dumps(deep)  # arguments travel as a JSON string
    return text.replace(hole, deep, 1)


@st.composite
def deep_chat(draw: st.DrawFn, **envelope: Any) -> str:
    """A chat request with one deep value in one of the places free-form JSON goes."""
    body = chat_body(**envelope)
    draw(st.sampled_from(_DEEP_PLACES))(body)
    return _fill(body, draw(deep_text()))


def every_deep_chat(**envelope: Any) -> Iterator[str]:
    """Every place for deep JSON at every depth: the sweep that random draws may miss."""
    for place in _DEEP_PLACES:
        for depth in DEPTHS:
            for opener, closer in _NESTINGS[:2]:
                body = chat_body(**envelope)
                place(body)
                yield _fill(body, nested(depth, opener, closer))


@st.composite
def odd_chat(draw: st.DrawFn, fields: tuple[str, ...] = tuple(REQUEST_FIELDS)) -> str:
    """A chat request with one to three fields set to values of any type, or to wide ones."""
    body = chat_body(draw(st.text(max_size=30)))
    for name in draw(st.lists(st.sampled_from(fields), min_size=1, max_size=3)):
        body[name] = draw(json_values | wide_value())
    return json.dumps(body)


@st.composite
def odd_completion(draw: st.DrawFn) -> str:
    body: dict[str, Any] = {"model": "echo", "prompt": draw(st.text(max_size=20)), "max_tokens": 8}
    for name in draw(st.lists(st.sampled_from(COMPLETION_FIELDS), min_size=1, max_size=3)):
        body[name] = draw(json_values | wide_value())
    return json.dumps(body)


@st.composite
def deep_completion(draw: st.DrawFn) -> str:
    field = draw(st.sampled_from(["prompt", "nvext", "stop", "logit_bias"]))
    return f'{{"model": "echo", "max_tokens": 8, "{field}": {draw(deep_text())}}}'


@st.composite
def many_stops(draw: st.DrawFn) -> str:
    count = draw(st.sampled_from([1, 4, 64, 65, 1000, 10_000]))
    length = draw(st.sampled_from([1, 16, 256, 257, 5000]))
    stops = [f"{i:05d}" + "z" * max(0, length - 5) for i in range(count)]
    return json.dumps(chat_body("one two three", stop=stops))


#: Output limits around and far beyond any context: clamped (the default policy) or refused.
huge_limits = st.sampled_from([1, 31_999, 32_000, 32_768, 10**9, 2**31, 2**63, 2**64 + 1])


@st.composite
def huge_limit_chat(draw: st.DrawFn) -> str:
    """An agent's `max_tokens` beyond the context (opencode sends 32000 to every model)."""
    field = draw(st.sampled_from(["max_tokens", "max_completion_tokens"]))
    body = chat_body(draw(st.text(max_size=30)), stream=draw(st.booleans()))
    body[field] = draw(huge_limits)
    return json.dumps(body)


@st.composite
def huge_limit_completion(draw: st.DrawFn) -> str:
    body = {"model": "echo", "prompt": draw(st.text(max_size=20)), "max_tokens": draw(huge_limits)}
    return json.dumps(body)


hostile_chat_bodies = st.one_of(deep_chat(), odd_chat(), many_stops(), huge_limit_chat())
hostile_completion_bodies = st.one_of(deep_completion(), odd_completion(), huge_limit_completion())


# --- /v1/responses ---

#: Every top-level field of `responses.create` (the SDK's).
RESPONSES_FIELDS = (
    "model input instructions previous_response_id store stream stream_options metadata"
    " temperature top_p top_logprobs max_output_tokens max_tool_calls tools tool_choice"
    " parallel_tool_calls text include reasoning truncation background user"
    " safety_identifier prompt_cache_key prompt_cache_retention prompt_cache_options"
    " service_tier image access_programs background_options context_management"
    " conversation moderation prompt client_metadata"
).split()
#: Item types the server runs, some it refuses, and nonsense.
ITEM_TYPES = (
    "message function_call function_call_output reasoning item_reference web_search_call"
    " mcp_call custom_tool_call custom_tool_call_output nonsense"
).split()
ITEM_FIELDS = (
    "type role content id status phase call_id name arguments output summary"
    " encrypted_content namespace caller async input"
).split()
#: Tool types: served, flattened, custom, hosted (accepted, not offered), and nonsense.
TOOL_TYPES = (
    "function namespace custom web_search web_search_2025_08_26 file_search mcp"
    " code_interpreter image_generation local_shell computer_use_preview x"
).split()


def responses_body(text: str = "fuzz", **fields: Any) -> dict[str, Any]:
    return {"model": "echo", "input": text, "max_output_tokens": 8, **fields}


@st.composite
def odd_item(draw: st.DrawFn) -> Any:
    """An input item with a type of any kind and fields of any type."""
    item: dict[str, Any] = {}
    if draw(st.booleans()):
        item["type"] = draw(st.sampled_from(ITEM_TYPES) | json_values)
    for name in draw(st.lists(st.sampled_from(ITEM_FIELDS), max_size=4)):
        item[name] = draw(json_values)
    if draw(st.booleans()):
        item["content"] = [
            {"type": draw(st.sampled_from(["input_text", "output_text", "input_image", "x"])),
             "text": draw(json_values)}
        ]  # fmt: skip
    return item


@st.composite
def odd_responses(draw: st.DrawFn) -> str:
    """A Responses request with odd top-level fields, odd items, or odd tools."""
    body = responses_body(draw(st.text(max_size=30)))
    for name in draw(st.lists(st.sampled_from(RESPONSES_FIELDS), max_size=3)):
        body[name] = draw(json_values | wide_value())
    if draw(st.booleans()):
        body["input"] = draw(st.lists(odd_item(), min_size=1, max_size=3))
    if draw(st.booleans()):
        body["tools"] = [
            {"type": draw(st.sampled_from(TOOL_TYPES)),
             "name": draw(json_values), "parameters": draw(json_values)}
        ]  # fmt: skip
    if draw(st.booleans()):
        body["tools"] = [draw(odd_codex_tool())]
        body["tool_choice"] = draw(
            st.sampled_from(["auto", {"type": "custom", "name": "c"}]) | json_values
        )
    if draw(st.booleans()):
        body["include"] = ["reasoning.encrypted_content"]
        body["input"] = [
            {"type": "reasoning", "summary": [], "encrypted_content": draw(st.text(max_size=80)
             | st.sampled_from(["gAAAAA", "gAAAAAB" + "A" * 100]))},
            {"role": "user", "content": "x"},
        ]  # fmt: skip
    if draw(st.booleans()):  # thinking control: efforts, summaries, and nonsense
        efforts = st.sampled_from(["none", "minimal", "low", "medium", "high", "xhigh", ""])
        body["reasoning"] = {
            name: draw(efforts | json_values)
            for name in draw(st.lists(st.sampled_from(REASONING_FIELDS), max_size=3))
        }
    if draw(st.booleans()):
        body["max_output_tokens"] = draw(huge_limits)
    if draw(st.booleans()):  # background responses: with or without store and stream
        body["background"] = draw(st.sampled_from([True, False, None]) | json_values)
        body["store"] = draw(st.sampled_from([True, False, None]))
        body["stream"] = draw(st.sampled_from([True, False]))
    return json.dumps(body)


@st.composite
def odd_codex_tool(draw: st.DrawFn) -> Any:
    """A namespace or custom tool (what Codex declares) with odd members and formats."""
    custom = {
        "type": "custom",
        "name": draw(st.sampled_from(["c", ""]) | json_values),
        "format": draw(
            st.sampled_from([{"type": "text"}, {"type": "grammar", "syntax": "regex"}])
            | st.fixed_dictionaries(
                {"type": st.just("grammar"), "syntax": st.sampled_from(["lark", "regex", "x"]),
                 "definition": st.text(max_size=40)}
            )
            | json_values
        ),
    }  # fmt: skip
    if draw(st.booleans()):
        return custom
    member = draw(st.sampled_from([custom, {"type": "function", "name": "f"}]) | json_values)
    return {
        "type": "namespace",
        "name": draw(st.sampled_from(["ns"]) | json_values),
        "description": "d",
        "tools": [member, draw(st.sampled_from([{"type": "web_search"}, member]))],
    }


#: `reasoning`'s fields, and one it does not have.
REASONING_FIELDS = ("effort", "summary", "generate_summary", "context", "mode", "budget")


#: Where deep JSON goes in a Responses request.
_DEEP_RESPONSES_PLACES = [
    lambda body: body.update(metadata=_HOLE),
    lambda body: body.update(input=[{"role": "user", "content": _HOLE}]),
    lambda body: body.update(
        input=[{"type": "function_call", "call_id": "c", "name": "f", "arguments": _HOLE}]
    ),
    lambda body: body.update(
        input=[{"type": "function_call_output", "call_id": "c", "output": _HOLE}]
    ),
    lambda body: body.update(tools=[{"type": "function", "name": "f", "parameters": _HOLE}]),
    lambda body: body.update(
        tools=[{"type": "namespace", "name": "n", "description": "d", "tools": _HOLE}]
    ),
    lambda body: body.update(tools=[{"type": "web_search", "filters": _HOLE}]),
    lambda body: body.update(client_metadata=_HOLE),
    lambda body: body.update(
        input=[{"type": "custom_tool_call_output", "call_id": "c", "output": _HOLE}]
    ),
    lambda body: body.update(
        text={"format": {"type": "json_schema", "name": "n", "schema": _HOLE}}
    ),
    lambda body: body.update(tool_choice=_HOLE),
    lambda body: body.update(reasoning=_HOLE),
]


@st.composite
def deep_responses(draw: st.DrawFn) -> str:
    body = responses_body()
    draw(st.sampled_from(_DEEP_RESPONSES_PLACES))(body)
    return _fill(body, draw(deep_text()))


hostile_responses_bodies = st.one_of(deep_responses(), odd_responses())


# --- /v1/conversations (create, update, items create) ---

#: The bodies' fields (`conversations.create`, `.update`, `items.create`), and nonsense.
CONVERSATION_FIELDS = ("items", "metadata", "x")


@st.composite
def odd_conversation(draw: st.DrawFn) -> str:
    """A conversation body with odd fields, odd items, too many items, or odd metadata."""
    body: dict[str, Any] = {}
    for name in draw(st.lists(st.sampled_from(CONVERSATION_FIELDS), max_size=3)):
        body[name] = draw(json_values | wide_value())
    if draw(st.booleans()):
        body["items"] = draw(st.lists(odd_item(), max_size=3))
    if draw(st.booleans()):
        body["items"] = [{"role": "user", "content": "x"}] * draw(st.integers(0, 25))
    if draw(st.booleans()):
        body["metadata"] = draw(
            st.dictionaries(st.text(max_size=70), st.text(max_size=600) | json_values, max_size=18)
        )
    return json.dumps(body)


_DEEP_CONVERSATION_PLACES = [
    lambda body: body.update(metadata=_HOLE),
    lambda body: body.update(items=[{"role": "user", "content": _HOLE}]),
    lambda body: body.update(
        items=[{"type": "function_call", "call_id": "c", "name": "f", "arguments": _HOLE}]
    ),
    lambda body: body.update(items=_HOLE),
]


@st.composite
def deep_conversation(draw: st.DrawFn) -> str:
    body: dict[str, Any] = {"items": []}
    draw(st.sampled_from(_DEEP_CONVERSATION_PLACES))(body)
    return _fill(body, draw(deep_text()))


hostile_conversation_bodies = st.one_of(deep_conversation(), odd_conversation())


# --- /v1/messages ---

#: Every body field of Anthropic's `messages.create` (its beta's included) and a few more.
MESSAGES_FIELDS = (
    "model messages max_tokens system tools tool_choice thinking output_config output_format"
    " stop_sequences temperature top_p top_k metadata stream cache_control container"
    " context_management service_tier speed inference_geo mcp_servers diagnostics compaction"
    " thread fallbacks billing_policy user_profile_id workspace_id betas n"
).split()
BLOCK_TYPES = (
    "text image document thinking redacted_thinking tool_use tool_result server_tool_use"
    " search_result nonsense"
).split()
BLOCK_FIELDS = (
    "type text thinking signature data id name input tool_use_id content is_error"
    " cache_control source citations caller"
).split()


def messages_body(text: str = "fuzz", **fields: Any) -> dict[str, Any]:
    return {
        "model": "echo",
        "max_tokens": 8,
        "messages": [{"role": "user", "content": text}],
        **fields,
    }


@st.composite
def odd_block(draw: st.DrawFn) -> Any:
    block: dict[str, Any] = {}
    if draw(st.booleans()):
        block["type"] = draw(st.sampled_from(BLOCK_TYPES) | json_values)
    for name in draw(st.lists(st.sampled_from(BLOCK_FIELDS), max_size=4)):
        block[name] = draw(json_values)
    return block


@st.composite
def odd_messages(draw: st.DrawFn) -> str:
    """A Messages request with odd fields, odd turns and blocks, or odd tools."""
    body = messages_body(draw(st.text(max_size=30)))
    for name in draw(st.lists(st.sampled_from(MESSAGES_FIELDS), max_size=3)):
        body[name] = draw(json_values | wide_value())
    if draw(st.booleans()):
        role = draw(st.sampled_from(["user", "assistant", "system", "tool"]) | json_values)
        blocks = draw(st.lists(odd_block(), min_size=1, max_size=3))
        body["messages"] = [{"role": role, "content": blocks}, {"role": "user", "content": "x"}]
    if draw(st.booleans()):
        body["tools"] = [
            {"type": draw(st.sampled_from(["custom", "bash_20250124", "web_search_20250305"])
                          | st.none()),
             "name": draw(json_values), "input_schema": draw(json_values)}
        ]  # fmt: skip
    if draw(st.booleans()):
        body["tool_choice"] = {
            "type": draw(st.sampled_from(["auto", "any", "tool", "none", "x"])),
            "name": draw(json_values),
        }
    if draw(st.booleans()):
        body["thinking"] = {
            "type": draw(st.sampled_from(["enabled", "adaptive", "disabled", "x"])),
            "budget_tokens": draw(json_values),
        }
    return json.dumps(body)


#: Where deep JSON goes in a Messages request.
_DEEP_MESSAGES_PLACES = [
    lambda body: body.update(metadata=_HOLE),
    lambda body: body.update(system=_HOLE),
    lambda body: body.update(context_management=_HOLE),
    lambda body: body.update(messages=[{"role": "user", "content": _HOLE}]),
    lambda body: body["messages"].extend(
        [
            {
                "role": "assistant",
                "content": [{"type": "tool_use", "id": "t", "name": "f", "input": _HOLE}],
            },
            {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": "t", "content": _HOLE}],
            },
        ]
    ),
    lambda body: body.update(tools=[{"name": "f", "input_schema": _HOLE}]),
    lambda body: body.update(output_config={"format": {"type": "json_schema", "schema": _HOLE}}),
    lambda body: body.update(tool_choice=_HOLE),
]


@st.composite
def deep_messages(draw: st.DrawFn) -> str:
    body = messages_body()
    draw(st.sampled_from(_DEEP_MESSAGES_PLACES))(body)
    return _fill(body, draw(deep_text()))


hostile_messages_bodies = st.one_of(deep_messages(), odd_messages())


# --- compaction: context_management and compaction items ---


@st.composite
def compaction_content(draw: st.DrawFn) -> Any:
    """A compaction item's content: this server's encoding of odd items, or anything."""
    kind = draw(st.sampled_from(["ours", "prefix", "any"]))
    if kind == "ours":
        inner = {"summary": draw(json_values), "kept": draw(st.lists(odd_item(), max_size=3))}
        if draw(st.booleans()):
            inner[draw(st.text(max_size=5))] = draw(json_values)
        return "rtc1." + base64.urlsafe_b64encode(json.dumps(inner).encode()).decode()
    if kind == "prefix":
        return "rtc1." + draw(st.text(max_size=40))
    return draw(json_values)


@st.composite
def compaction_bodies(draw: st.DrawFn) -> str:
    """A Responses request with compaction items and odd `context_management`."""
    body = responses_body(draw(st.text(max_size=30)))
    if draw(st.booleans()):
        item: dict[str, Any] = {
            "type": "compaction",
            "encrypted_content": draw(compaction_content()),
        }
        if draw(st.booleans()):
            item[draw(st.sampled_from(["id", "created_by", "x"]))] = draw(json_values)
        body["input"] = [item, {"role": "user", "content": draw(st.text(max_size=20))}]
    if draw(st.booleans()):
        entry = st.fixed_dictionaries(
            {"type": st.sampled_from(["compaction", "x"]) | json_values},
            optional={"compact_threshold": st.integers(-5, 20_000_000) | json_values},
        )
        body["context_management"] = draw(st.lists(entry, max_size=3) | json_values)
    return json.dumps(body)


hostile_compaction_bodies = compaction_bodies()
