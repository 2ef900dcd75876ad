"""Constrained decoding: JSON schemas and enforced tool calls as token masks.

Built on llguidance (grammars from JSON Schema and Lark, masks computed lazily
per step from the Hugging Face tokenizer). The pieces, in the order a request
meets them:

* `json_schema.response_format_constraint` (and, for tool calls, which are
  written in a tool parser's markup, `realtime.chat.tools.grammar`) turn request
  fields into a `Constraint` (`spec.py`, plain data) or raise `ConstraintError`
  naming the field;
* `matcher.ConstraintCompiler` (one per model, over the `tokenizer.TokenizerBinding`
  its engine builds at load time) compiles and caches it, off the event loop,
  into a `matcher.CompiledConstraint`: what an `EngineRequest` carries;
* the engine starts one matcher per sequence from it and masks the logits
  before sampling (`next_mask.NextMask`, computed off the engine's thread: the cpu
  engine), or hands exllamav2 an `exllamav2_filter.GrammarFilter`.

This package sits below the engines and the chat logic and imports nothing of
theirs. This module imports neither torch nor an engine: the request-side
builders work on every install, the echo engine's included.
"""

from realtime.constrain.errors import RESPONSE_FORMAT, TOOL_CHOICE, TOOLS, ConstraintError
from realtime.constrain.json_schema import (
    json_object_grammar,
    json_schema_grammar,
    response_format_constraint,
)
from realtime.constrain.lark import Reasoning
from realtime.constrain.spec import BannedTokens, Constraint, ConstraintLimits, GrammarSpec

__all__ = [
    "RESPONSE_FORMAT",
    "TOOLS",
    "TOOL_CHOICE",
    "BannedTokens",
    "Constraint",
    "ConstraintError",
    "ConstraintLimits",
    "GrammarSpec",
    "Reasoning",
    "json_object_grammar",
    "json_schema_grammar",
    "response_format_constraint",
]
