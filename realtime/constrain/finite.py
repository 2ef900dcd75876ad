"""Schemas with a branch no finite JSON value completes, found before any compilation.

`{"type": "object", "properties": {"a": {"$ref": "#"}}, "required": ["a"]}` has
no finite instance: every object needs another inside it. The grammar engine
compiles it, allows `{`, and then forces `{"a": {"a": ...` until its per-step
budget runs out, in the middle of an answer. The same happens for any branch the
model may enter, not only the root: one `anyOf` alternative, an optional
property, the object form of an untyped schema. So every reachable subschema,
in every form it allows (a scalar, an object, an array), must have a finite value.

This is the least fixpoint of a set of Horn clauses (as for the productive
symbols of a grammar), solved in time linear in the schema: a form is finite
when all its requirements are (each required property's schema; the first
`minItems` items; `$ref` and `allOf` targets in the same form; one `anyOf` /
`oneOf` alternative in that form). Scalars, `enum` and `const` are always
finite. What the check does not understand counts as finite: it refuses only
schemas it can prove infinite, and the grammar engine judges the rest.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote

SCALAR, OBJECT, ARRAY = 0, 1, 2
#: The forms a JSON value takes: a scalar (or a literal) contains no other value.
FORMS = (SCALAR, OBJECT, ARRAY)
FORM_NAMES = ("scalar", "object", "array")
_SCALARS = frozenset({"null", "boolean", "number", "integer", "string"})
#: Keywords whose schemas describe parts of a value (instance positions).
_ONE = ("additionalProperties", "items", "additionalItems", "contains", "unevaluatedItems")
_MANY = ("prefixItems", "anyOf", "oneOf", "allOf")
_NAMED = ("properties", "patternProperties")

#: A goal: (index of a subschema, form).
Goal = tuple[int, int]


def infinite_branch(schema: Mapping[str, Any]) -> tuple[str, str] | None:
    """(JSON pointer, form) of a reachable subschema that allows values of a form
    ("scalar", "object", "array") none of which is finite, or None when every
    branch can finish."""
    graph = _Graph(schema)
    possible = graph.possible()
    solver = _Solver()
    for goal in possible:
        solver.add(goal, graph.requirements(goal, possible))
    finite = solver.solve()
    infinite = [goal for goal in possible if goal not in finite]
    if not infinite:
        return None
    # The most specific place: an `anyOf` alternative rather than the root that holds it.
    pointer, form = max(((graph.pointer(i), f) for i, f in infinite), key=lambda p: len(p[0]))
    return pointer, FORM_NAMES[form]


@dataclass
class _Node:
    schema: Mapping[str, Any]
    #: (parent index, the keys from it) for the JSON pointer; the root has none
    parent: tuple[int, str] | None
    forms: frozenset[int] = frozenset()
    #: `$ref` and `allOf`: schemas every value must also match
    targets: list[int] = field(default_factory=list)
    #: `anyOf`, `oneOf`: groups of schemas a value must match one of
    groups: list[list[int]] = field(default_factory=list)
    #: required properties (object form) and leading items (array form)
    members: dict[int, list[int]] = field(default_factory=dict)
    literal: bool = False
    #: the `$ref` it was first reached through (its pointer), when it has no parent
    named: str = "#"


class _Graph:
    """Every subschema a value may enter (through instance keywords and `$ref`)."""

    def __init__(self, root: Mapping[str, Any]) -> None:
        self.root = root
        self.nodes: list[_Node] = []
        self._index: dict[int, int] = {}
        self._refs: dict[str, int | None] = {}
        self._add(root, None)
        done = 0
        while done < len(self.nodes):  # `_link` may add nodes (children, ref targets)
            self._link(done)
            done += 1

    def pointer(self, index: int) -> str:
        parts = []
        node = self.nodes[index]
        while node.parent is not None:
            index, keys = node.parent
            parts.append(keys)
            node = self.nodes[index]
        return node.named + "".join(reversed(parts))

    def possible(self) -> set[Goal]:
        """(node, form) pairs a value may take, ignoring finiteness: allowed by the
        node's own type, by every target, and by a branch of each group (the greatest
        fixpoint: a cycle alone does not rule a form out)."""
        nodes = self.nodes
        possible = {(i, f) for i, node in enumerate(nodes) for f in node.forms}
        deferring = [
            (i, node)
            for i, node in enumerate(nodes)
            if not node.literal and (node.targets or node.groups)
        ]
        changed = True
        while changed:  # removals only: as many passes as the longest chain of them
            changed = False
            for i, node in deferring:
                for form in FORMS:
                    if (i, form) in possible and (
                        any((t, form) not in possible for t in node.targets)
                        or any(all((b, form) not in possible for b in g) for g in node.groups)
                    ):
                        possible.discard((i, form))
                        changed = True
        return possible

    def requirements(self, goal: Goal, possible: set[Goal]) -> list[list[Goal]]:
        """What a finite value of the node in the form needs: groups of goals, one of each."""
        index, form = goal
        node = self.nodes[index]
        if node.literal:
            return []
        needs = [[(m, f) for f in FORMS if (m, f) in possible] for m in node.members.get(form, ())]
        needs += [[(t, form)] for t in node.targets]
        needs += [[(b, form) for b in group if (b, form) in possible] for group in node.groups]
        return needs

    def _add(self, schema: Any, parent: tuple[int, str] | None) -> int | None:
        if not isinstance(schema, Mapping):
            return None
        found = self._index.get(id(schema))
        if found is not None:
            return found
        index = self._index[id(schema)] = len(self.nodes)
        self.nodes.append(_Node(schema, parent))
        return index

    def _link(self, index: int) -> None:
        node = self.nodes[index]
        schema = node.schema
        node.literal = "enum" in schema or "const" in schema
        node.forms = _own_forms(schema)

        def child(value: Any, keys: str) -> int | None:
            return self._add(value, (index, keys))

        ref = schema.get("$ref")
        if isinstance(ref, str):
            target = self._resolve(ref)
            if target is not None:
                node.targets.append(target)
        for key in _ONE:
            value = schema.get(key)
            values = value if isinstance(value, list) else [value]  # `items` as a list
            for i, item in enumerate(values):
                child(item, f"/{key}/{i}" if isinstance(value, list) else f"/{key}")
        for key in _MANY:
            value = schema.get(key)
            if not isinstance(value, list):
                continue
            kids = [child(item, f"/{key}/{i}") for i, item in enumerate(value)]
            present = [k for k in kids if k is not None]
            if key == "allOf":
                node.targets += present
            elif key != "prefixItems":
                node.groups.append(present)
        named: dict[str, int | None] = {}
        for key in _NAMED:
            value = schema.get(key)
            if isinstance(value, Mapping):
                for name, item in value.items():
                    kid = child(item, f"/{key}/{_escape(name)}")
                    if key == "properties":
                        named[name] = kid
        required = schema.get("required")
        if isinstance(required, list):
            needed = [named.get(name) for name in required if isinstance(name, str)]
            node.members[OBJECT] = [k for k in needed if k is not None]
        node.members[ARRAY] = self._leading_items(schema)

    def _leading_items(self, schema: Mapping[str, Any]) -> list[int]:
        """The items every array of `schema` has: `minItems` of them, and `contains`."""
        low = schema.get("minItems", 0)
        low = low if isinstance(low, int) and not isinstance(low, bool) else 0
        prefix = schema.get("prefixItems")
        prefix = prefix if isinstance(prefix, list) else []
        found = [self._index.get(id(item)) for item in prefix[:low]]
        items = schema.get("items")
        if low > len(prefix) and isinstance(items, Mapping):
            found.append(self._index.get(id(items)))
        contains = schema.get("contains")
        if isinstance(contains, Mapping) and schema.get("minContains", 1) != 0:
            found.append(self._index.get(id(contains)))
        return [i for i in found if i is not None]

    def _resolve(self, ref: str) -> int | None:
        """A local `$ref` (`#`, or a JSON pointer into the document: `#/$defs/x`); a
        remote one or an anchor is for the grammar engine to judge."""
        if ref in self._refs:
            return self._refs[ref]
        node: Any = self.root if ref == "#" or ref.startswith("#/") else None
        for part in ref[2:].split("/") if ref.startswith("#/") else []:
            key = unquote(part).replace("~1", "/").replace("~0", "~")
            if isinstance(node, Mapping) and key in node:
                node = node[key]
            elif isinstance(node, list) and key.isdigit() and int(key) < len(node):
                node = node[int(key)]
            else:
                node = None
                break
        known = isinstance(node, Mapping) and id(node) in self._index
        found = self._refs[ref] = self._add(node, None)
        if found is not None and not known:
            self.nodes[found].named = ref  # first reached through this `$ref`
        return found


def _own_forms(schema: Mapping[str, Any]) -> frozenset[int]:
    """The forms a value of `schema` may take by its own `type`; an `enum` or `const`
    is a literal, finite whatever else the schema says."""
    if "enum" in schema or "const" in schema:
        return frozenset({SCALAR})
    kind = schema.get("type")
    if kind is None:
        return frozenset(FORMS)
    kinds = {kind} if isinstance(kind, str) else set(kind) if isinstance(kind, list) else set()
    forms = {f for f, name in ((OBJECT, "object"), (ARRAY, "array")) if name in kinds}
    if kinds & _SCALARS:
        forms.add(SCALAR)
    return frozenset(forms)


def _escape(name: Any) -> str:
    return str(name).replace("~", "~0").replace("/", "~1")


class _Solver:
    """Horn clauses `goal <- group_1 and ... and group_n`, each group satisfied by any
    one of its goals; `solve` returns the goals that hold (linear in the clauses)."""

    def __init__(self) -> None:
        self._missing: dict[Goal, int] = {}
        self._satisfied: dict[Goal, list[bool]] = {}
        self._watchers: dict[Goal, list[tuple[Goal, int]]] = {}

    def add(self, goal: Goal, groups: list[list[Goal]]) -> None:
        self._missing[goal] = len(groups)
        self._satisfied[goal] = [False] * len(groups)
        for index, group in enumerate(groups):
            for member in group:
                self._watchers.setdefault(member, []).append((goal, index))

    def solve(self) -> set[Goal]:
        proven: set[Goal] = set()
        ready = [goal for goal, missing in self._missing.items() if missing == 0]
        while ready:
            goal = ready.pop()
            if goal in proven:
                continue
            proven.add(goal)
            for waiter, index in self._watchers.get(goal, ()):
                satisfied = self._satisfied[waiter]
                if not satisfied[index]:
                    satisfied[index] = True
                    self._missing[waiter] -= 1
                    if self._missing[waiter] == 0:
                        ready.append(waiter)
        return proven
