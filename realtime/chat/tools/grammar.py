"""Tool calls as grammars: `tool_choice` `required` or a named function, enforced.

The answer is made of tool calls only, written in the markup the configured tool
parser reads (the parsers beside this module), with each call's arguments
constrained by its tool's parameter schema. Our own parser therefore always
turns the answer into calls whose arguments validate. This module lives with the
parsers because each grammar is the exact counterpart of one parser's markup;
the grammar engine underneath (`realtime.constrain`) knows no tool format.
Each format is written in one canonical layout (the one its chat templates
use), and JSON in the compact `json.dumps` layout, so nothing is spent on free
whitespace.

* `parallel=True`: one or more calls; `parallel=False` (`parallel_tool_calls:
  false`): exactly one.
* No text may come before, between or after the calls, except a reasoning block
  first when the model reasons (`Reasoning`).
* `tool_choice: "none"` needs no grammar: `tool_markers_ban` bans the markers
  that open a call when they are single tokens (cheap: a fixed mask). A format
  whose calls start with plain text (`json`, or a marker spelled in several
  tokens) cannot be banned that way, but calls are not parsed under `none`, so
  such text stays content.

Formats whose names or values sit outside JSON (mistral's `NAME[ARGS]`,
deepseek_v3, pythonic, qwen3_coder) need names the parser can read back, and
pythonic and qwen3_coder need flat argument objects; schemas they cannot
express are refused with the reason, never loosened.
"""

from __future__ import annotations

import keyword
import re
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from llguidance import LLMatcher

from realtime.chat.tools import deepseek_v3, hermes, llama3_json, mistral, pythonic, qwen3_coder
from realtime.chat.tools.base import ToolSpec
from realtime.constrain.errors import RESPONSE_FORMAT, TOOL_CHOICE, TOOLS, ConstraintError
from realtime.constrain.json_schema import check_schema
from realtime.constrain.lark import (
    LarkGrammar,
    Reasoning,
    alternatives,
    json_value,
    literal,
    marker,
    repeated,
    with_reasoning,
)
from realtime.constrain.spec import BannedTokens, ConstraintLimits, GrammarSpec

#: Names every format can write and read back (OpenAI allows `[A-Za-z0-9_-]{1,64}`).
_NAME = re.compile(r"[A-Za-z0-9_.\-]{1,64}")
#: pythonic calls are Python calls: the name must be an identifier (dots allowed).
_PYTHON_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.]{0,63}")
#: Escapes that mean the same in a JSON string and a Python string literal
#: (`\/` and `\u` surrogate pairs do not), for pythonic arguments.
_PYTHON_SAFE_ESCAPES = '"\\bfnrt'
#: Keywords of an arguments object that flat formats (pythonic, qwen3_coder) can honour.
_FLAT_OBJECT_KEYS = frozenset(
    {
        "type",
        "properties",
        "required",
        "additionalProperties",
        "description",
        "title",
        "$schema",
        "$id",
        "$defs",
        "definitions",
        "$comment",
        "examples",
        "default",
    }
)
#: String keywords qwen3_coder's raw text values can honour (besides enum/const).
_RAW_STRING_KEYS = frozenset({"type", "description", "title", "default", "examples", "$comment"})
_DEF_KEYS = ("$defs", "definitions")
_BLOCK_SEPARATOR = '"\\n"'


def tool_call_grammar(
    parser: str,
    tools: Sequence[ToolSpec],
    *,
    added_tokens: Mapping[str, int],
    function: str | None = None,
    parallel: bool = True,
    answer: Mapping[str, Any] | None = None,
    reasoning: Reasoning | None = None,
    limits: ConstraintLimits | None = None,
) -> GrammarSpec:
    """The grammar of an answer that calls `function` (or, when None, any of `tools`).

    `added_tokens` maps each added token's text to its id
    (`TokenizerBinding.added_tokens`): a marker that is one added token must be
    referenced by id, since the grammar engine never matches an added token
    from its text. `answer` (a `response_format` schema, with `tool_choice:
    "auto"`): the answer is either the calls or one JSON value valid against
    it. Raises ConstraintError naming `tools`, `tool_choice` or `response_format`.
    """
    added = added_tokens
    limits = limits or ConstraintLimits()
    if answer is not None:
        what = "response_format.json_schema.schema"
        check_schema(answer, limits, what=what, param=RESPONSE_FORMAT)
    if not tools:
        raise ConstraintError("tool_choice needs `tools`", param=TOOL_CHOICE)
    chosen = [t for t in tools if function is None or t.name == function]
    if not chosen:
        raise ConstraintError(
            f"tool_choice names {function!r}, which is not among the request's tools",
            param=TOOL_CHOICE,
        )
    build = _FORMATS.get(parser)
    if build is None:
        raise ConstraintError(
            f"the {parser!r} tool parser cannot enforce tool_choice", param=TOOL_CHOICE
        )
    grammar = LarkGrammar()
    body = build(grammar, chosen, parallel, added, limits)
    label = f"function {function!r}" if function else "required"
    if answer is not None:
        calls = grammar.rule("calls", body)
        body = f"{calls} | {grammar.rule('answer', json_value(answer))}"
        label = "auto with response_format"
    grammar.rule("start", with_reasoning(grammar, body, reasoning, added))
    lark = grammar.text()
    # Compiling can only fail on the schemas (the markup is ours): name `tools` (the
    # wiring checks a response_format schema on its own first, to name that field).
    return GrammarSpec(LLMatcher.grammar_from_lark(lark), TOOLS, f"tool_choice {label}", limits)


def tool_markers_ban(parser: str | None, added_tokens: Mapping[str, int]) -> BannedTokens | None:
    """`tool_choice: "none"`: ban the tokens that open a call, where markers are tokens."""
    ids = frozenset(
        added_tokens[text] for text in _CALL_OPENERS.get(parser or "", ()) if text in added_tokens
    )
    if not ids:
        return None
    return BannedTokens(ids, TOOL_CHOICE, "tool_choice none")


_CALL_OPENERS: dict[str, tuple[str, ...]] = {
    "hermes": (hermes.START,),
    "qwen3_coder": (qwen3_coder.TOOL_CALL,),
    "mistral": (mistral.TOOL_CALLS,),
    "deepseek_v3": (deepseek_v3.CALLS_BEGIN, deepseek_v3.CALL_BEGIN),
    "llama3_json": (llama3_json.PYTHON_TAG,),
    "pythonic": (pythonic.PYTHON_START,),
}


# --- schemas ---


def arguments_schema(tool: ToolSpec, limits: ConstraintLimits) -> dict[str, Any]:
    """The tool's parameters as an object schema (no parameters: the empty object)."""
    params = tool.parameters
    what = f"the parameters of tool {tool.name!r}"
    if not isinstance(params, Mapping):
        raise ConstraintError(f"{what} must be a JSON Schema object", param=TOOLS)
    if not params:
        return {"type": "object", "properties": {}, "additionalProperties": False}
    schema = dict(params)
    kind = schema.setdefault("type", "object")
    if kind != "object":
        raise ConstraintError(f"{what} must describe an object, not {kind!r}", param=TOOLS)
    check_schema(schema, limits, what=what, param=TOOLS)
    for ref in _refs(schema):
        if not ref.startswith(("#/$defs/", "#/definitions/")):
            raise ConstraintError(
                f"{what}: $ref {ref!r} must point into $defs or definitions", param=TOOLS
            )
    return schema


def _refs(value: Any) -> Iterator[str]:
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, Mapping):
            ref = item.get("$ref")
            if isinstance(ref, str):
                yield ref
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)


def _split_defs(schema: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """(the schema without its definitions, the definitions), so they can be re-rooted."""
    body = {k: v for k, v in schema.items() if k not in _DEF_KEYS}
    defs = {k: schema[k] for k in _DEF_KEYS if k in schema}
    return body, defs


def _call_object(tool: ToolSpec, arguments_key: str, limits: ConstraintLimits) -> str:
    """`{"name": NAME, "arguments": {...}}` as one JSON sub-grammar."""
    args, defs = _split_defs(arguments_schema(tool, limits))
    schema = {
        "type": "object",
        "properties": {"name": {"const": tool.name}, arguments_key: args},
        "required": ["name", arguments_key],
        "additionalProperties": False,
        **defs,  # re-rooted: the call object is the document `#/$defs/...` resolves in
    }
    return json_value(schema)


def _check_name(tool: ToolSpec, parser: str, pattern: re.Pattern[str] = _NAME) -> str:
    if not pattern.fullmatch(tool.name):
        raise ConstraintError(
            f"tool name {tool.name!r} cannot be written in the {parser} format "
            f"(use letters, digits, '_', '-' or '.')",
            param=TOOLS,
        )
    return tool.name


def _flat_properties(
    tool: ToolSpec, parser: str, limits: ConstraintLimits
) -> tuple[list[tuple[str, dict[str, Any]]], set[str]]:
    """(property name, its schema with the definitions it may need) in declared
    order, and the required names, for formats that write arguments one by one."""
    schema = arguments_schema(tool, limits)
    extra = sorted(set(schema) - _FLAT_OBJECT_KEYS)
    if extra:
        raise ConstraintError(
            f"the {parser} format cannot enforce {', '.join(extra)} on the parameters "
            f"of tool {tool.name!r}",
            param=TOOLS,
        )
    properties = schema.get("properties") or {}
    required = schema.get("required") or []
    if not isinstance(properties, Mapping) or not isinstance(required, list):
        raise ConstraintError(
            f"tool {tool.name!r}: properties must be an object and required a list", param=TOOLS
        )
    missing = [name for name in required if name not in properties]
    if missing:
        raise ConstraintError(
            f"tool {tool.name!r} requires {missing[0]!r}, which its properties do not define",
            param=TOOLS,
        )
    _, defs = _split_defs(schema)
    out = []
    for name, prop in properties.items():
        if not isinstance(prop, Mapping):
            raise ConstraintError(
                f"tool {tool.name!r}: property {name!r} is not a schema", param=TOOLS
            )
        out.append((name, {**prop, **defs}))
    return out, set(required)


def _in_order(
    grammar: LarkGrammar, prefix: str, items: Sequence[tuple[str, bool]], sep: str
) -> str:
    """Items (rule name, required) in their order, each optional one may be left out,
    with `sep` (a literal, or "" for none) between those present."""
    if not items:
        return ""
    glue = f"{sep} " if sep else ""
    # tail(k): items k.. after something was written; every one carries the separator.
    tails = [
        " ".join(f"{glue}{rule}" if req else f"({glue}{rule})?" for rule, req in items[k:])
        for k in range(len(items) + 1)
    ]
    # head(k): items k.. with nothing written yet: the first present one has no separator.
    head = ""
    for k in range(len(items) - 1, -1, -1):
        rule, req = items[k]
        first = f"{rule} {tails[k + 1]}".strip()
        if req:
            body = first
        elif head:
            body = f"{first} | {head}"
        else:
            body = f"({first})?"
        head = grammar.rule(f"{prefix}_head{k}", body)
    return head


# --- the formats: each returns the rule body of the calls ---


def _hermes(
    g: LarkGrammar,
    tools: Sequence[ToolSpec],
    many: bool,
    added: Mapping[str, int],
    limits: ConstraintLimits,
) -> str:
    call = g.rule("call", alternatives([_call_object(t, "arguments", limits) for t in tools]))
    block = g.rule(
        "block",
        f'{marker(hermes.START, added)} "\\n" {call} "\\n" {marker(hermes.END, added)}',
    )
    return repeated(block, _BLOCK_SEPARATOR, many=many)


def _llama3_json(
    g: LarkGrammar,
    tools: Sequence[ToolSpec],
    many: bool,
    added: Mapping[str, int],
    limits: ConstraintLimits,
) -> str:
    call = g.rule("call", alternatives([_call_object(t, "parameters", limits) for t in tools]))
    return repeated(call, literal("; "), many=many)


def _json(
    g: LarkGrammar,
    tools: Sequence[ToolSpec],
    many: bool,
    added: Mapping[str, int],
    limits: ConstraintLimits,
) -> str:
    call = g.rule("call", alternatives([_call_object(t, "arguments", limits) for t in tools]))
    if not many:
        return call
    return f'{call} | "[" {call} (", " {call})* "]"'


def _mistral(
    g: LarkGrammar,
    tools: Sequence[ToolSpec],
    many: bool,
    added: Mapping[str, int],
    limits: ConstraintLimits,
) -> str:
    opener = marker(mistral.TOOL_CALLS, added)
    if mistral.ARGS not in added:  # tokenizers before v11: a JSON array of call objects
        call = g.rule("call", alternatives([_call_object(t, "arguments", limits) for t in tools]))
        inner = f'{call} (", " {call})*' if many else call
        return f'{opener} "[" {inner} "]"'
    calls = []
    for t in tools:
        name = _check_name(t, "mistral")
        args = json_value(arguments_schema(t, limits))
        calls.append(f"{literal(name)} {marker(mistral.ARGS, added)} {args}")
    call = g.rule("call", f"{opener} {alternatives(calls)}")
    return repeated(call, None, many=many)


def _deepseek_v3(
    g: LarkGrammar,
    tools: Sequence[ToolSpec],
    many: bool,
    added: Mapping[str, int],
    limits: ConstraintLimits,
) -> str:
    calls = []
    for t in tools:
        name = _check_name(t, "deepseek_v3")
        args = json_value(arguments_schema(t, limits))
        calls.append(f'{literal(name + chr(10) + "```json" + chr(10))} {args} "\\n```"')
    head = f'{marker(deepseek_v3.CALL_BEGIN, added)} "function" {marker(deepseek_v3.SEP, added)}'
    call = g.rule("call", f"{head} {alternatives(calls)} {marker(deepseek_v3.CALL_END, added)}")
    body = repeated(call, _BLOCK_SEPARATOR, many=many)
    begin, end = marker(deepseek_v3.CALLS_BEGIN, added), marker(deepseek_v3.CALLS_END, added)
    return f"{begin} {body} {end}"


def _pythonic(
    g: LarkGrammar,
    tools: Sequence[ToolSpec],
    many: bool,
    added: Mapping[str, int],
    limits: ConstraintLimits,
) -> str:
    calls = []
    for i, t in enumerate(tools):
        name = _check_name(t, "pythonic", _PYTHON_NAME)
        properties, required = _flat_properties(t, "pythonic", limits)
        items = []
        for j, (key, schema) in enumerate(properties):
            if not key.isidentifier() or keyword.iskeyword(key):
                raise ConstraintError(
                    f"tool {t.name!r}: argument {key!r} is not a Python identifier, which "
                    "the pythonic format needs",
                    param=TOOLS,
                )
            value = json_value(schema, {"json_allowed_escapes": _PYTHON_SAFE_ESCAPES})
            items.append((g.rule(f"t{i}_a{j}", f"{literal(key + '=')} {value}"), key in required))
        arguments = _in_order(g, f"t{i}", items, literal(", "))
        calls.append(_seq(literal(name + "("), arguments, '")"'))
    call = g.rule("call", alternatives(calls))
    inner = f'{call} (", " {call})*' if many else call
    return f'"[" {inner} "]"'


def _qwen3_coder(
    g: LarkGrammar,
    tools: Sequence[ToolSpec],
    many: bool,
    added: Mapping[str, int],
    limits: ConstraintLimits,
) -> str:
    functions = []
    for i, t in enumerate(tools):
        name = _check_name(t, "qwen3_coder")
        properties, required = _flat_properties(t, "qwen3_coder", limits)
        items = []
        for j, (key, schema) in enumerate(properties):
            if not key or any(c in key for c in "<>\n"):
                raise ConstraintError(
                    f"tool {t.name!r}: parameter {key!r} cannot be written in the "
                    "qwen3_coder format",
                    param=TOOLS,
                )
            open_tag = literal(f"{qwen3_coder.PARAMETER}{key}>\n")
            value = _qwen3_value(g, f"t{i}_v{j}", t.name, key, schema)
            items.append((g.rule(f"t{i}_p{j}", f"{open_tag} {value}"), key in required))
        params = _in_order(g, f"t{i}", items, "")
        head = literal(f"{qwen3_coder.FUNCTION}{name}>\n")
        functions.append(_seq(head, params, literal(qwen3_coder.FUNCTION_END)))
    function = g.rule("function", alternatives(functions))
    tc, tce = marker(qwen3_coder.TOOL_CALL, added), marker(qwen3_coder.TOOL_CALL_END, added)
    block = g.rule("block", f'{tc} "\\n" {function} "\\n" {tce}')
    return repeated(block, _BLOCK_SEPARATOR, many=many)


def _qwen3_value(g: LarkGrammar, rule: str, tool: str, key: str, schema: Mapping[str, Any]) -> str:
    """One parameter's value and its closing tag, as `qwen3_coder.typed_value` will read it.

    The parser types a value by the first type the schema names that converts
    (`type`, a list of types, or anyOf's alternatives); the grammar writes a
    value of exactly that first type, so the parser can only read it that way.
    """
    close = literal(f"\n{qwen3_coder.PARAMETER_END}\n")
    kinds = schema.get("type")
    alternative: Mapping[str, Any] = schema
    if kinds is None and isinstance(schema.get("anyOf"), list) and schema["anyOf"]:
        alternative = schema["anyOf"][0]
        kinds = alternative.get("type") if isinstance(alternative, Mapping) else None
        if kinds is None:
            raise ConstraintError(
                f"tool {tool!r}: the first anyOf alternative of parameter {key!r} needs a "
                "type for the qwen3_coder format",
                param=TOOLS,
            )
    if alternative is not schema and not isinstance(kinds, str):
        raise ConstraintError(
            f"tool {tool!r}: the first anyOf alternative of parameter {key!r} needs a "
            "single type for the qwen3_coder format",
            param=TOOLS,
        )
    first = kinds[0] if isinstance(kinds, list) and kinds else kinds
    if first is None or first == "string":
        choices = alternative.get(
            "enum", [alternative["const"]] if "const" in alternative else None
        )
        if choices is not None:
            if not all(isinstance(c, str) and "<" not in c for c in choices) or not choices:
                raise ConstraintError(
                    f"tool {tool!r}: parameter {key!r} lists values the qwen3_coder format "
                    "cannot write as text",
                    param=TOOLS,
                )
            return f"{alternatives([literal(c) for c in choices])} {close}"
        extra = sorted(set(alternative) - _RAW_STRING_KEYS - {"$defs", "definitions"})
        if extra:
            raise ConstraintError(
                f"the qwen3_coder format cannot enforce {', '.join(extra)} on parameter "
                f"{key!r} of tool {tool!r}",
                param=TOOLS,
            )
        # Raw text up to (and including) the closing tag, never holding a tag that
        # would end the value early.
        end = qwen3_coder.PARAMETER_END
        g.rule(rule, r"/(?s:.*)/ & ~/(?s:.*<(parameter=|\/function>).*)/", stop=end)
        return f'{rule} "\\n"'
    typed = {k: v for k, v in alternative.items() if k != "type"}
    typed["type"] = first
    if alternative is not schema:
        typed.update({k: schema[k] for k in _DEF_KEYS if k in schema})
    return f"{json_value(typed)} {close}"


_FORMATS = {
    "hermes": _hermes,
    "llama3_json": _llama3_json,
    "json": _json,
    "mistral": _mistral,
    "deepseek_v3": _deepseek_v3,
    "pythonic": _pythonic,
    "qwen3_coder": _qwen3_coder,
}


def enforceable_parsers() -> list[str]:
    """The tool parsers whose calls can be enforced."""
    return sorted(_FORMATS)


def _seq(*parts: str) -> str:
    """Grammar items in sequence, leaving out empty ones."""
    return " ".join(p for p in parts if p)
