"""JSON schemas as grammars: `response_format` and the JSON inside tool calls.

Every JSON value we constrain is written in one canonical layout, the one
`json.dumps` uses (`{"a": 1, "b": [2, 3]}`): no free whitespace. A weak or
random model given free whitespace can spend its whole budget on it, and a
fixed layout parses the same way in every format. The grammar engine is never
lenient: a schema keyword it cannot enforce makes it refuse the schema, and
the request is refused with that reason.

The schema is checked here for what costs little to check (its type, size,
depth, and a branch no finite value completes: `finite.py`); everything else
(unknown types, unsatisfiable bounds, unsupported keywords, broken `$ref`s) is
reported by the grammar engine when the `ConstraintCompiler` compiles it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from llguidance import LLMatcher

from realtime.constrain.errors import RESPONSE_FORMAT, ConstraintError
from realtime.constrain.finite import infinite_branch
from realtime.constrain.lark import JSON_OPTIONS, LarkGrammar, Reasoning, json_value, with_reasoning
from realtime.constrain.spec import DEFAULT_LIMITS, ConstraintLimits, GrammarSpec

#: Any JSON object: what `response_format: {"type": "json_object"}` asks for.
ANY_OBJECT: dict[str, Any] = {"type": "object"}


def check_schema(schema: Any, limits: ConstraintLimits, *, what: str, param: str) -> str:
    """`schema` as compact JSON text, once it is known to be an object within the limits
    whose every branch has a finite value."""
    if not isinstance(schema, Mapping):
        raise ConstraintError(f"{what} must be a JSON object (a JSON Schema)", param=param)
    try:
        text = json.dumps(schema, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise ConstraintError(f"{what} is not valid JSON: {exc}", param=param) from None
    size = len(text.encode())
    if size > limits.max_schema_bytes:
        raise ConstraintError(
            f"{what} is {size} bytes; the limit is {limits.max_schema_bytes}", param=param
        )
    depth = json_depth(schema)
    if depth > limits.max_schema_depth:
        raise ConstraintError(
            f"{what} is nested {depth} levels deep; the limit is {limits.max_schema_depth}",
            param=param,
        )
    infinite = infinite_branch(schema)
    if infinite is not None:
        pointer, form = infinite
        raise ConstraintError(
            f"{what} cannot be enforced: no finite JSON {form} matches {pointer} (each one "
            "must contain another, through required properties or non-empty arrays)",
            param=param,
        )
    return text


def json_depth(value: Any) -> int:
    """How deeply objects and arrays nest in `value` (a scalar is 0), without recursion."""
    deepest = 0
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, Mapping):
            children: Any = item.values()
        elif isinstance(item, list | tuple):
            children = item
        else:
            continue
        depth += 1
        deepest = max(deepest, depth)
        stack.extend((child, depth) for child in children)
    return deepest


def json_object_grammar(
    *,
    limits: ConstraintLimits | None = None,
    reasoning: Reasoning | None = None,
    added_tokens: Mapping[str, int] | None = None,
) -> GrammarSpec:
    """`response_format: {"type": "json_object"}`: the answer is one JSON object."""
    return _answer(ANY_OBJECT, "json_object", limits or DEFAULT_LIMITS, reasoning, added_tokens)


def json_schema_grammar(
    schema: Any,
    *,
    name: str | None = None,
    limits: ConstraintLimits | None = None,
    reasoning: Reasoning | None = None,
    added_tokens: Mapping[str, int] | None = None,
) -> GrammarSpec:
    """`response_format: {"type": "json_schema", ...}`: the answer is one JSON value valid
    against `schema`. `strict` changes nothing: the schema is always enforced."""
    what = "response_format.json_schema.schema"
    limits = limits or DEFAULT_LIMITS
    check_schema(schema, limits, what=what, param=RESPONSE_FORMAT)
    label = f"json_schema {name!r}" if name else "json_schema"
    return _answer(schema, label, limits, reasoning, added_tokens)


def _answer(
    schema: Mapping[str, Any],
    label: str,
    limits: ConstraintLimits,
    reasoning: Reasoning | None,
    added_tokens: Mapping[str, int] | None,
) -> GrammarSpec:
    if reasoning is None:
        try:
            grammar = LLMatcher.grammar_from_json_schema(dict(schema), overrides=JSON_OPTIONS)  # type: ignore[arg-type]
        except ValueError as exc:
            raise ConstraintError(f"{label}: {exc}", param=RESPONSE_FORMAT) from None
        return GrammarSpec(grammar, RESPONSE_FORMAT, label, limits)
    lark = LarkGrammar()
    body = lark.rule("answer", json_value(schema))
    lark.rule("start", with_reasoning(lark, body, reasoning, added_tokens or {}))
    return GrammarSpec(LLMatcher.grammar_from_lark(lark.text()), RESPONSE_FORMAT, label, limits)


def response_format_constraint(
    response_format: Mapping[str, Any] | None,
    *,
    limits: ConstraintLimits | None = None,
    reasoning: Reasoning | None = None,
    added_tokens: Mapping[str, int] | None = None,
) -> GrammarSpec | None:
    """The constraint a request's `response_format` asks for (None for text).

    `response_format` is the field as plain JSON (the request model's
    `model_dump(by_alias=True, exclude_none=True)`).
    """
    if response_format is None:
        return None
    kind = response_format.get("type")
    if kind in (None, "text"):
        return None
    if kind == "json_object":
        return json_object_grammar(limits=limits, reasoning=reasoning, added_tokens=added_tokens)
    if kind == "json_schema":
        spec = response_format.get("json_schema")
        if not isinstance(spec, Mapping) or "schema" not in spec:
            raise ConstraintError(
                "response_format json_schema needs json_schema.schema", param=RESPONSE_FORMAT
            )
        name = spec.get("name")
        return json_schema_grammar(
            spec["schema"],
            name=name if isinstance(name, str) else None,
            limits=limits,
            reasoning=reasoning,
            added_tokens=added_tokens,
        )
    raise ConstraintError(
        f"response_format type {kind!r} is not 'text', 'json_object' or 'json_schema'",
        param=RESPONSE_FORMAT,
    )
