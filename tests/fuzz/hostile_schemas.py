"""Hypothesis strategies for hostile JSON schemas, and the known schema bombs.

Schemas are built from the keywords whose meaning the grammar engine and
`jsonschema` share (types, properties, required, items, bounds, enum, const,
anyOf, `$ref` into `$defs` or to the root), so an answer the server serves can
be checked against its schema. `$ref`s make recursion, with and without an end:
the server must refuse the endless ones before the answer, and serve the rest.
"""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

DEFS = ("d0", "d1", "d2")
_NAMES = st.sampled_from(["a", "b", "c", "next", "kids", "value"])
_SCALARS = st.one_of(
    st.none(), st.booleans(), st.integers(-5, 5), st.sampled_from(["x", "red", ""])
)

_leaves = st.one_of(
    st.just({"type": "string"}),
    st.integers(0, 4).map(lambda n: {"type": "string", "maxLength": n}),
    st.tuples(st.integers(-3, 3), st.integers(0, 3)).map(
        lambda t: {"type": "integer", "minimum": t[0], "maximum": t[0] + t[1]}
    ),
    st.just({"type": "boolean"}),
    st.just({"type": "null"}),
    st.lists(_SCALARS, min_size=1, max_size=4, unique_by=repr).map(lambda v: {"enum": v}),
    _SCALARS.map(lambda v: {"const": v}),
    st.sampled_from(DEFS).map(lambda d: {"$ref": f"#/$defs/{d}"}),
    st.just({"$ref": "#"}),
)


def _object(children: st.SearchStrategy[dict[str, Any]]) -> st.SearchStrategy[dict[str, Any]]:
    @st.composite
    def build(draw: st.DrawFn) -> dict[str, Any]:
        properties = draw(st.dictionaries(_NAMES, children, max_size=3))
        required = (
            draw(st.lists(st.sampled_from(sorted(properties)), unique=True)) if properties else []
        )
        schema: dict[str, Any] = {"properties": properties}
        if draw(st.booleans()):
            schema["type"] = "object"  # untyped: any value, or an object of these
        if required:
            schema["required"] = required
        if draw(st.booleans()):
            schema["additionalProperties"] = False
        return schema

    return build()


def _array(children: st.SearchStrategy[dict[str, Any]]) -> st.SearchStrategy[dict[str, Any]]:
    return st.tuples(children, st.integers(0, 2), st.integers(0, 2)).map(
        lambda t: {"type": "array", "items": t[0], "minItems": t[1], "maxItems": t[1] + t[2]}
    )


_schemas = st.recursive(
    _leaves,
    lambda inner: st.one_of(
        _object(inner),
        _array(inner),
        st.lists(inner, min_size=1, max_size=3).map(lambda bs: {"anyOf": bs}),
    ),
    max_leaves=10,
)

#: A whole schema: a body, and the definitions its `$ref`s may point to.
schemas = st.tuples(_schemas, st.fixed_dictionaries({d: _schemas for d in DEFS})).map(
    lambda t: {**t[0], "$defs": t[1]} if isinstance(t[0], dict) else t[0]
)

#: Found by the red team (issue 27) and their neighbours: all size-legal.
BOMBS: dict[str, dict[str, Any]] = {
    "ref through required": {
        "type": "object",
        "properties": {"a": {"$ref": "#"}},
        "required": ["a"],
    },
    "ref through an anyOf alternative": {
        "anyOf": [
            {"type": "null"},
            {"type": "object", "properties": {"a": {"$ref": "#/anyOf/1"}}, "required": ["a"]},
        ]
    },
    "ref through minItems": {"type": "array", "items": {"$ref": "#"}, "minItems": 1},
    "enum of 3,000 objects": {"enum": [{"k": i} for i in range(3000)]},
    "anyOf of 400 objects": {
        "anyOf": [
            {"type": "object", "properties": {f"p{i}": {"type": "string"}}, "required": [f"p{i}"]}
            for i in range(400)
        ]
    },
    "1,500 optional properties": {
        "type": "object",
        "properties": {f"property_{i:04d}": {"type": "string"} for i in range(1500)},
    },
}


def _nested(levels: int) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "integer"}
    for _ in range(levels):
        schema = {"type": "object", "properties": {"a": schema}, "required": ["a"]}
    return schema


#: Objects inside objects, as deep as `--max-schema-depth` (32) allows: each level is 2.
BOMBS["nested at the depth limit"] = _nested(15)
