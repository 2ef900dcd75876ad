"""Constrained decoding: JSON schemas and enforced tool calls as token masks.

Built on llguidance (grammars from JSON Schema and Lark, masks computed lazily
per step from the Hugging Face tokenizer). The pieces, in the order a request
meets them:

* `json_schema.response_format_constraint` (and, for tool calls, which are
  written in a tool parser's markup, `realtime.chat.tools.grammar`) turn request
  fields into a `Constraint` (`spec.py`, plain data) or raise `ConstraintError`
  naming the field;
* `matcher.ConstraintCompiler` (one per engine, over a `tokenizer.TokenizerBinding`)
  compiles and caches it, and starts one matcher per sequence;
* `logits.apply_allowed` masks a logits tensor before sampling (the cpu engine);
  `exllamav2_filter.GrammarFilter` does the same through exllamav2's filter API.

This module imports neither torch nor an engine: the request-side builders
work on every install, the echo engine's included.
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
