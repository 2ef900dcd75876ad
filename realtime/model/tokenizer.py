"""The tokenizer contract the pipeline relies on.

`realtime.model.hf_tokenizer.HFTokenizer` adapts a Hugging Face `tokenizers`
tokenizer (the real-model path); the echo model has its own
(`realtime.engine.echo.EchoTokenizer`).

`encode` never adds special tokens: the chat template writes BOS and friends
itself, exactly as `apply_chat_template(tokenize=True)` does, so BOS is never doubled.
"""

from __future__ import annotations

from typing import Protocol


class DecodeStream(Protocol):
    """Incremental decoding: feed ids one at a time, get text only once it is whole."""

    def step(self, token_id: int) -> str | None:
        """Text completed by this token, or None while a character is still partial.

        A stream that holds text back may also have `finish() -> str`, called once
        when the answer ends, returning what it still holds (optional, so a
        third-party tokenizer without it keeps working).
        """
        ...


class Tokenizer(Protocol):
    @property
    def eos_token_ids(self) -> frozenset[int]:
        """Every id that ends generation (tokenizer EOS plus generation_config's list)."""
        ...

    def encode(self, text: str) -> list[int]:
        """Token ids of `text`, without adding any special token."""
        ...

    def decode(self, token_ids: list[int], *, skip_special_tokens: bool = True) -> str: ...

    def token_text(self, token_id: int) -> str:
        """The text of one token on its own, as reported in logprobs."""
        ...

    def decode_stream(self, *, skip_special_tokens: bool = True) -> DecodeStream: ...

    def is_special(self, text: str) -> bool:
        """Whether `text` is a single special token (one skip_special_tokens hides)."""
        ...


def fewest_tokens(tokenizer: Tokenizer, text: str) -> int:
    """A floor on how many tokens `text` encodes to, found without encoding it.

    A tokenizer may have `fewest_tokens(text) -> int` (optional, so a third-party
    tokenizer without it keeps working: its floor is 0). The pipeline refuses a prompt
    whose floor already fills the context before paying for its encoding."""
    floor = getattr(tokenizer, "fewest_tokens", None)
    if floor is None:
        return 0
    count: int = floor(text)
    return count


def chars_per_token(tokenizer: Tokenizer) -> int | None:
    """The most characters one token of `tokenizer` stands for, when it says (an
    optional `chars_per_token`, as `fewest_tokens` is): `fewest_tokens` is then the
    text's length over it, a number a process without the tokenizer can use."""
    value = getattr(tokenizer, "chars_per_token", None)
    return value if type(value) is int and value > 0 else None
