"""The model's tokenizer as the grammar engine sees it, built once per engine.

llguidance needs the whole vocabulary as bytes, every id that ends generation,
and the width of the model's logits (which may exceed the tokenizer's size:
padded embedding tables). Building it reads every token (~0.3 s for a 32k
vocabulary, ~3 s for 128k), so an engine builds it once, at load time.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path

from llguidance import LLTokenizer
from tokenizers import Tokenizer


class TokenizerBinding:
    """A `tokenizers` tokenizer (tokenizer.json) bound to llguidance, with the model's EOS ids."""

    def __init__(
        self,
        tokenizer: Tokenizer,
        *,
        eos_token_ids: Iterable[int],
        logits_width: int | None = None,
    ) -> None:
        size = tokenizer.get_vocab_size(with_added_tokens=True)
        #: The mask covers exactly the model's logits (ids past the tokenizer: never allowed).
        self.width = logits_width if logits_width is not None else size
        if self.width < 1:
            raise ValueError("logits_width must be positive")
        self.eos_token_ids = frozenset(t for t in eos_token_ids if 0 <= t < self.width)
        if not self.eos_token_ids:
            raise ValueError("a constrained answer needs at least one EOS id inside the logits")
        #: Added tokens by text: markers that are one token are referenced by id.
        self.added_tokens: Mapping[str, int] = {
            token.content: token_id
            for token_id, token in tokenizer.get_added_tokens_decoder().items()
        }
        self.ll = LLTokenizer(
            tokenizer.to_str(),
            n_vocab=max(self.width, size),
            eos_token=sorted(self.eos_token_ids),
        )

    @classmethod
    def from_file(
        cls, path: str | Path, *, eos_token_ids: Iterable[int], logits_width: int | None = None
    ) -> TokenizerBinding:
        return cls(
            Tokenizer.from_file(str(path)), eos_token_ids=eos_token_ids, logits_width=logits_width
        )

    @property
    def mask_words(self) -> int:
        """int32 words in one bitmask row (32 token ids each)."""
        return (max(self.width, self.ll.vocab_size) + 31) // 32
