"""What a request asks to be constrained to, as plain data the engines can carry.

The pipeline builds a `Constraint` from the request (`response_format`, `tools`
with `tool_choice`); engines turn it into a per-sequence matcher with
`realtime.constrain.matcher.ConstraintCompiler`. Nothing here imports torch or
the grammar engine, so the spec can live on `EngineRequest` for every engine.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class ConstraintLimits:
    """Bounds on what a client may ask the grammar engine to compile and run.

    The byte and depth limits (and the finiteness check, `finite.py`) are applied
    before any compilation. The rest are the grammar engine's own (llguidance
    `LLParserLimits`): they bound a compile's time and size, and the work of each
    step (one token's mask, or taking one token), so a hostile schema costs only
    its own request. Plain data: the limits travel with each `GrammarSpec`, to
    wherever it is compiled (another process's engine too).
    """

    #: A schema (or one tool's parameters) serialized as compact JSON.
    max_schema_bytes: int = 65_536
    #: Nesting of objects and arrays inside one schema.
    max_schema_depth: int = 32
    #: llguidance `max_grammar_size`: symbols in the grammar's productions.
    max_grammar_size: int = 500_000
    #: llguidance `initial_lexer_fuel`: work building the lexer at compile (~50k/ms).
    initial_lexer_fuel: int = 1_000_000
    #: llguidance `step_lexer_fuel`: lexer work for one token's mask (~14k/ms).
    step_lexer_fuel: int = 200_000
    #: llguidance `step_max_items`: Earley items for one step (a mask, the bytes a
    #: token or the grammar forces) (~20k/ms on a quiet core; a loaded one, ~1k/ms).
    step_max_items: int = 50_000
    #: llguidance `max_items_in_row`: Earley items in one row, the grammar's branching
    #: at one point (llguidance's default, 2000, refuses an object of 1,500 optional
    #: properties); a row is built within one step, so `step_max_items` bounds it too.
    max_items_in_row: int = 50_000
    #: llguidance `max_lexer_states`: lexer states one grammar may build (~1-2 kB each).
    max_lexer_states: int = 250_000
    #: Compiled grammars kept for reuse (agents send the same tools every turn).
    cache_size: int = 64


#: The limits a spec is compiled under when its builder was given none.
DEFAULT_LIMITS = ConstraintLimits()


@dataclass(frozen=True, slots=True)
class GrammarSpec:
    """An llguidance grammar (its JSON form) the whole answer must match."""

    #: The grammar as `llguidance.LLMatcher` takes it (`grammar_from_lark` / `_json_schema`).
    grammar: str
    #: The request field it comes from (`response_format`, `tool_choice`): errors name it.
    param: str
    #: A short human description for logs and errors ("json_schema 'weather'").
    description: str
    #: What compiling it, and each step under it, may cost (the server's flags).
    limits: ConstraintLimits = DEFAULT_LIMITS


@dataclass(frozen=True, slots=True)
class BannedTokens:
    """Token ids that may never be sampled (`tool_choice: none` bans the tool-call
    markers that are single tokens). A fixed mask: no grammar, no per-step work."""

    token_ids: frozenset[int]
    param: str
    description: str


#: Everything an engine may be asked to enforce on one sequence.
Constraint = GrammarSpec | BannedTokens
