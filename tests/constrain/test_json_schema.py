"""response_format as a grammar: what is refused, with which message, before any model runs."""

from __future__ import annotations

from typing import Any

import pytest

from realtime.constrain import (
    ConstraintError,
    ConstraintLimits,
    GrammarSpec,
    json_object_grammar,
    json_schema_grammar,
    response_format_constraint,
)
from realtime.constrain.matcher import ConstraintCompiler


def _schema_format(schema: Any) -> dict[str, Any]:
    return {"type": "json_schema", "json_schema": {"name": "answer", "schema": schema}}


def test_text_and_absent_formats_need_no_constraint() -> None:
    assert response_format_constraint(None) is None
    assert response_format_constraint({"type": "text"}) is None


def test_json_object_and_json_schema_build_grammars_named_after_the_field() -> None:
    obj = response_format_constraint({"type": "json_object"})
    assert isinstance(obj, GrammarSpec) and obj.param == "response_format"
    assert obj.description == "json_object"
    spec = response_format_constraint(_schema_format({"type": "object"}))
    assert isinstance(spec, GrammarSpec) and spec.description == "json_schema 'answer'"


@pytest.mark.parametrize(
    ("response_format", "fragment"),
    [
        ({"type": "json_schema"}, "needs json_schema.schema"),
        ({"type": "json_schema", "json_schema": {"name": "x"}}, "needs json_schema.schema"),
        ({"type": "xml"}, "'xml' is not"),
        (_schema_format([1, 2]), "must be a JSON object"),
        (_schema_format(True), "must be a JSON object"),
        (_schema_format({"minimum": float("nan")}), "not valid JSON"),
    ],
)
def test_malformed_response_formats_are_refused_naming_the_field(
    response_format: dict[str, Any], fragment: str
) -> None:
    with pytest.raises(ConstraintError) as info:
        response_format_constraint(response_format)
    assert info.value.param == "response_format"
    assert fragment in info.value.message


def test_schema_size_and_depth_are_limited_before_any_compilation() -> None:
    limits = ConstraintLimits(max_schema_bytes=200, max_schema_depth=4)
    big = {"type": "object", "description": "x" * 300}
    with pytest.raises(ConstraintError, match="bytes; the limit is 200"):
        json_schema_grammar(big, limits=limits)
    deep: dict[str, Any] = {"type": "array", "items": {}}
    for _ in range(5):
        deep = {"type": "array", "items": deep}
    with pytest.raises(ConstraintError, match=r"nested \d+ levels deep; the limit is 4"):
        json_schema_grammar(deep, limits=limits)


@pytest.mark.parametrize(
    ("schema", "fragment"),
    [
        ({"type": "foo"}, "Invalid type: foo"),
        ({"type": "integer", "minimum": 5, "maximum": 1}, "minimum (5) is greater than maximum"),
        ({"type": "integer", "minimum": "low"}, "minimum"),
        ({"type": "string", "pattern": "(["}, "regex parse error"),
        ({"type": "string", "format": "weird"}, "Unknown format: weird"),
        ({"$ref": "#/$defs/missing"}, "does not exist"),
        ({"$ref": "https://example.com/schema.json"}, "does not fetch"),
        ({"enum": []}, "Unsatisfiable"),
    ],
)
def test_invalid_schemas_are_refused_with_the_engines_reason(
    compiler: ConstraintCompiler, schema: dict[str, Any], fragment: str
) -> None:
    spec = json_schema_grammar(schema, name="answer")
    with pytest.raises(ConstraintError) as info:
        compiler.check(spec)
    assert info.value.param == "response_format"
    assert info.value.message.startswith("json_schema 'answer' cannot be enforced: ")
    assert fragment in info.value.message
    assert "\n" not in info.value.message


@pytest.mark.parametrize(
    "schema",
    [
        {"type": "array", "items": {"type": "integer"}, "uniqueItems": True},
        {"if": {"type": "integer"}, "then": {"minimum": 3}},
        {"not": {"type": "string"}},
        {"type": "array", "contains": {"type": "integer"}},
        {"type": "object", "dependentRequired": {"a": ["b"]}},
    ],
)
def test_features_the_engine_cannot_enforce_are_refused_not_ignored(
    compiler: ConstraintCompiler, schema: dict[str, Any]
) -> None:
    with pytest.raises(ConstraintError, match="Unimplemented keys"):
        compiler.check(json_schema_grammar(schema))


def test_a_schema_cannot_switch_the_engine_to_lenient(compiler: ConstraintCompiler) -> None:
    schema = {"x-guidance": {"lenient": True}, "type": "array", "uniqueItems": True}
    with pytest.raises(ConstraintError, match="uniqueItems"):
        compiler.check(json_schema_grammar(schema))


def test_supported_schemas_compile(compiler: ConstraintCompiler) -> None:
    schemas = [
        {"type": "object", "properties": {"a": {"type": "string", "format": "email"}}},
        {"$defs": {"n": {"type": "integer"}}, "type": "array", "items": {"$ref": "#/$defs/n"}},
        {"anyOf": [{"type": "string", "pattern": "^[a-z]+$"}, {"type": "null"}]},
    ]
    for schema in schemas:
        compiler.check(json_schema_grammar(schema))
    compiler.check(json_object_grammar())
