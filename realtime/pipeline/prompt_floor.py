"""Refusing a prompt far beyond the context before it is encoded.

Encoding is the one step of preparing a request whose cost grows with the prompt
and that happens before the prompt's length in tokens is known: about 2 s of CPU
per MiB of text with a Hugging Face tokenizer, all of it spent on a prompt that is
then refused with `context_length_exceeded`. The tokenizer's floor on the token
count (`realtime.model.token_floor`) settles most such prompts without encoding:
when even the floor fills the context, the prompt is refused with the same error
and code, worded "at least N tokens". A prompt the floor does not settle is
encoded and checked exactly, as before.
"""

from __future__ import annotations

from realtime.model.info import ModelInfo
from realtime.model.tokenizer import fewest_tokens
from realtime.protocol.errors import PromptTooLongError


def tokens_beyond_context(text: str, info: ModelInfo) -> int | None:
    """The floor on `text`'s token count when that alone fills the context, else None."""
    context = info.context_length
    if len(text) < context:  # the floor is at most one token per character
        return None
    floor = fewest_tokens(info.tokenizer, text)
    return floor if floor >= context else None


def refuse_beyond_context(text: str, info: ModelInfo, param: str | None) -> None:
    """Raise PromptTooLongError (naming `param`) when `text` cannot fit the context."""
    floor = tokens_beyond_context(text, info)
    if floor is not None:
        raise PromptTooLongError.at_least(floor, len(text), info.context_length, param)
