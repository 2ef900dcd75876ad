"""What a request asks to be constrained to, as plain data the engines can carry.

The pipeline builds a `Constraint` from the request (`response_format`, `tools`
with `tool_choice`); engines turn it into a per-sequence matcher with
`realtime.constrain.matcher.ConstraintCompiler`. Nothing here imports torch or
the grammar engine, so the spec can live on `EngineRequest` for every engine.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class GrammarSpec:
    """An llguidance grammar (its JSON form) the whole answer must match."""

    #: The grammar as `llguidance.LLMatcher` takes it (`grammar_from_lark` / `_json_schema`).
    grammar: str
    #: The request field it comes from (`response_format`, `tool_choice`): errors name it.
    param: str
    #: A short human description for logs and errors ("json_schema 'weather'").
    description: str


@dataclass(frozen=True, slots=True)
class BannedTokens:
    """Token ids that may never be sampled (`tool_choice: none` bans the tool-call
    markers that are single tokens). A fixed mask: no grammar, no per-step work."""

    token_ids: frozenset[int]
    param: str
    description: str


#: Everything an engine may be asked to enforce on one sequence.
Constraint = GrammarSpec | BannedTokens


@dataclass(frozen=True, slots=True)
class ConstraintLimits:
    """Bounds on what a client may ask the grammar engine to compile and run.

    The byte and depth limits are checked before any compilation; the fuel and
    size limits are the grammar engine's own (llguidance `LLParserLimits`), which
    bound compile time and the mask computation of each step, so a hostile
    schema costs only its own request.
    """

    #: A schema (or one tool's parameters) serialized as compact JSON.
    max_schema_bytes: int = 65_536
    #: Nesting of objects and arrays inside one schema.
    max_schema_depth: int = 32
    #: llguidance: symbols in the grammar's productions.
    max_grammar_size: int = 500_000
    #: llguidance: work building the lexer when the grammar is compiled (~50k/ms).
    initial_lexer_fuel: int = 1_000_000
    #: llguidance: lexer work for one token's mask (~14k/ms).
    step_lexer_fuel: int = 200_000
    #: llguidance: Earley items for one token's mask (~20k/ms).
    step_max_items: int = 50_000
    #: Compiled grammars kept for reuse (agents send the same tools every turn).
    cache_size: int = 64
