"""One token per character of the training text, plus an end-of-text token.

It follows realtime's `Tokenizer` contract (`realtime.Tokenizer`): `encode` adds
no special token, `decode_stream` yields text as ids arrive, and the end-of-text
token is the one EOS id.
"""

from __future__ import annotations

END = "<|end|>"
UNKNOWN = "\ufffd"


class _Stream:
    def __init__(self, tokenizer: CharTokenizer, skip_special_tokens: bool):
        self._tokenizer = tokenizer
        self._skip = skip_special_tokens

    def step(self, token_id: int) -> str | None:
        if self._skip and token_id == self._tokenizer.end_id:
            return ""
        return self._tokenizer.token_text(token_id)


class CharTokenizer:
    def __init__(self, text: str):
        self.chars = sorted(set(text) | {UNKNOWN})
        self._ids = {char: i for i, char in enumerate(self.chars)}
        self.end_id = len(self.chars)
        self._unknown = self._ids[UNKNOWN]

    @property
    def vocab_size(self) -> int:
        return len(self.chars) + 1

    @property
    def eos_token_ids(self) -> frozenset[int]:
        return frozenset({self.end_id})

    def encode(self, text: str) -> list[int]:
        return [self._ids.get(char, self._unknown) for char in text]

    def token_text(self, token_id: int) -> str:
        if token_id == self.end_id:
            return END
        return self.chars[token_id] if 0 <= token_id < len(self.chars) else UNKNOWN

    def decode(self, token_ids: list[int], *, skip_special_tokens: bool = True) -> str:
        return "".join(
            self.token_text(t) for t in token_ids if not (skip_special_tokens and t == self.end_id)
        )

    def decode_stream(self, *, skip_special_tokens: bool = True) -> _Stream:
        return _Stream(self, skip_special_tokens)

    def is_special(self, text: str) -> bool:
        return text == END
