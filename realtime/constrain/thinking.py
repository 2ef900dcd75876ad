"""The thinking budget as a grammar: reasoning closed after N tokens, the answer free.

Anthropic's `thinking: {type: "enabled", budget_tokens: N}` bounds the reasoning
block. On engines with logits the grammar engine enforces it: the reasoning text
is a rule of at most N tokens, after which only the block's end marker may be
sampled. Thinking was asked for, so the block is not optional: the answer opens
with it (unless the prompt already did). What follows is any token sequence
(tool-call markers included) but a second opening marker, so the budget cannot be
sidestepped.
When the request is also constrained (a JSON format, an enforced tool call), that
grammar carries the budget in its own reasoning block instead (`lark.with_reasoning`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from llguidance import LLMatcher

from realtime.constrain.lark import LarkGrammar, Reasoning, any_token_but
from realtime.constrain.spec import GrammarSpec

#: The request field a budget's grammar comes from (errors name it).
THINKING = "thinking"


def thinking_budget_grammar(
    reasoning: Reasoning,
    added_tokens: Mapping[str, int],
    *,
    opening: str,
    banned: Iterable[int] = (),
) -> GrammarSpec:
    """The grammar of an answer whose reasoning block (`opening` ... `reasoning.end`,
    both added tokens) holds at most `reasoning.max_tokens` tokens; `banned` ids
    (`tool_choice: none`'s markers) never appear after it."""
    if reasoning.max_tokens is None or opening not in added_tokens:
        raise ValueError("a thinking budget needs a token budget and one-token markers")
    lark = LarkGrammar()
    text = lark.rule("reasoning_text", "/(?s:.*)/", max_tokens=reasoning.max_tokens)
    block = f"{text} <[{added_tokens[reasoning.end]}]>"
    if reasoning.start is not None:  # else the prompt opened it
        block = f"<[{added_tokens[opening]}]> {block}"
    body = any_token_but(lark, [added_tokens[opening], *banned])
    lark.rule("start", f"{block} {body}")
    label = f"thinking budget of {reasoning.max_tokens} tokens"
    return GrammarSpec(LLMatcher.grammar_from_lark(lark.text()), THINKING, label)
