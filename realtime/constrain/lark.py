"""Small builders for llguidance's Lark dialect, so grammar text is never pasted by hand.

Markers that are single added tokens of the model's vocabulary (`<tool_call>`,
`[TOOL_CALLS]`) are written as token references (`<[id]>`): the grammar engine
treats added tokens as special, outside the byte alphabet, so only a reference
can match them. Everything else is a quoted literal.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

#: llguidance's JSON compile options for every schema we compile (applied last,
#: so a schema's own "x-guidance" key cannot switch on leniency or whitespace).
JSON_OPTIONS: dict[str, Any] = {
    "whitespace_flexible": False,
    "item_separator": ", ",
    "key_separator": ": ",
    "lenient": False,
}


def with_json_options(schema: Mapping[str, Any]) -> dict[str, Any]:
    """`schema` with our compile options as its root "x-guidance" key (for `%json` in Lark)."""
    return {**schema, "x-guidance": JSON_OPTIONS}


@dataclass(frozen=True, slots=True)
class Reasoning:
    """A reasoning block the answer may open with (`<think>...</think>`).

    `start` None: the prompt already opened the block (a reasoning parser that
    `starts_in_reasoning`), so the answer must close it before its calls.
    """

    end: str
    start: str | None = None
    #: The thinking budget: reasoning tokens after which only the end marker may
    #: follow (set only where `end` is one added token: `with_reasoning`).
    max_tokens: int | None = None


def literal(text: str) -> str:
    """A Lark string literal matching exactly `text`."""
    return json.dumps(text, ensure_ascii=False)


def marker(text: str, added_tokens: Mapping[str, int]) -> str:
    """`text` as a token reference when it is one added token, else as a literal."""
    token_id = added_tokens.get(text)
    return f"<[{token_id}]>" if token_id is not None else literal(text)


def json_value(schema: Mapping[str, Any], options: Mapping[str, Any] | None = None) -> str:
    """An inline JSON-schema sub-grammar (`%json {...}`) in our canonical layout."""
    full = with_json_options(schema)
    if options:
        full["x-guidance"] = {**full["x-guidance"], **options}
    return "%json " + json.dumps(full, ensure_ascii=False, separators=(",", ":"))


def alternatives(items: Sequence[str]) -> str:
    """`(a | b | c)`; one item stands alone."""
    return items[0] if len(items) == 1 else "(" + " | ".join(items) + ")"


def repeated(item: str, separator: str | None, *, many: bool) -> str:
    """`item`, or with `many` one or more of it with `separator` (a literal) between."""
    if not many:
        return item
    if separator is None:
        return f"({item})+"
    return f"{item} ({separator} {item})*"


class LarkGrammar:
    """Collects named rules; `text()` is the grammar with `start` first."""

    def __init__(self) -> None:
        self._rules: dict[str, str] = {}

    def rule(
        self, name: str, body: str, *, stop: str | None = None, max_tokens: int | None = None
    ) -> str:
        """Add `name: body` and return the name. With `stop`, the rule is free text
        that ends with (and includes) the first occurrence of `stop`; with
        `max_tokens`, the grammar engine ends it after that many tokens."""
        if name in self._rules:
            raise ValueError(f"rule {name!r} defined twice")
        attributes = []
        if stop is not None:
            attributes.append(f"stop={literal(stop)}")
        if max_tokens is not None:
            attributes.append(f"max_tokens={int(max_tokens)}")
        head = f"{name}[{', '.join(attributes)}]" if attributes else name
        self._rules[name] = f"{head}: {body}"
        return name

    def text(self) -> str:
        if "start" not in self._rules:
            raise ValueError("a grammar needs a start rule")
        order = ["start", *(name for name in self._rules if name != "start")]
        return "\n".join(self._rules[name] for name in order) + "\n"


def with_reasoning(
    g: LarkGrammar, body: str, reasoning: Reasoning | None, added: Mapping[str, int]
) -> str:
    """`body`, optionally opened by a reasoning block."""
    if reasoning is None:
        return body
    end_id = added.get(reasoning.end)
    if end_id is not None:
        # An added token is outside the byte alphabet: free text cannot contain it, and
        # when the budget ends the text, the grammar allows only the end marker next.
        text = g.rule("reasoning_text", "/(?s:.*)/", max_tokens=reasoning.max_tokens)
        block = f"{text} <[{end_id}]>"
    else:
        block = g.rule("reasoning_text", "/(?s:.*)/", stop=reasoning.end)
    gap = '("\\n\\n" | "\\n")?'
    if reasoning.start is None:
        return f"{block} {gap} ({body})"
    return f"({marker(reasoning.start, added)} {block} {gap})? ({body})"


def any_token_but(g: LarkGrammar, excluded: Iterable[int]) -> str:
    """Any sequence of tokens (special ones included) but the `excluded` ids."""
    ids = ",".join(str(token_id) for token_id in sorted(set(excluded)))
    return g.rule("free_tokens", f"<[^{ids}]>*" if ids else "<[*]>*")
