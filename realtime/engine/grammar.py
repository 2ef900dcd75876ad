"""The model's tokenizer bound to the grammar engine, once, when a model engine loads.

Binding reads the whole vocabulary (about 0.3 s for 32k ids, 3 s for 128k), so a
model engine does it on its own thread while it loads the weights, never per
request. A tokenizer that cannot be bound (not a `tokenizers` tokenizer, no end
token inside the logits) leaves the engine serving without constrained decoding:
requests that need it are refused with the reason, everything else works.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from realtime.constrain.tokenizer import TokenizerBinding
from realtime.model.tokenizer import Tokenizer

log = logging.getLogger("realtime.engine")


@dataclass(frozen=True, slots=True)
class GrammarSupport:
    """A model's binding to the grammar engine, or why there is none."""

    binding: TokenizerBinding | None
    reason: str | None = None


#: Before the model is loaded.
NOT_LOADED = GrammarSupport(None, "the model is not loaded yet")


def bind_grammar(tokenizer: Tokenizer, *, logits_width: int) -> GrammarSupport:
    """Bind `tokenizer` (its `tokenizers` backend) for a model whose logits are
    `logits_width` wide; on failure, log it and say why."""
    backend = getattr(tokenizer, "backend", None)
    if backend is None:
        return GrammarSupport(None, "the model's tokenizer is not a tokenizer.json tokenizer")
    try:
        binding = TokenizerBinding(
            backend, eos_token_ids=tokenizer.eos_token_ids, logits_width=logits_width
        )
    except Exception as exc:  # llguidance rejects the vocabulary: serve without it
        reason = f"the grammar engine cannot read the model's tokenizer ({exc})"
        log.warning("constrained decoding is off: %s", reason)
        return GrammarSupport(None, reason)
    return GrammarSupport(binding)
