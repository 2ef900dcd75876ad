"""The `Tokenizer` contract over a Hugging Face `tokenizers` tokenizer (tokenizer.json).

Streaming detokenization is the library's `DecodeStream`, not ours: it knows the
tokenizer's decoder (byte-level, byte-fallback, metaspace) and holds a token back
until its text is whole, so a stream never shows half a UTF-8 character.

`encode` never adds special tokens, as in `apply_chat_template(tokenize=True)`:
the chat template writes BOS itself (a Llama 3 tokenizer.json would add a second).
Special tokens the template wrote are still recognised as single ids. It goes
through the library's batch call, which lets go of the GIL while it works (its
single `encode` holds it: 8 MiB of text stood every other thread, the event loop's
included, still for 20 s); without offsets it is also the faster of the two.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from pathlib import Path

from tokenizers import Tokenizer
from tokenizers.decoders import DecodeStream

from realtime.model.token_floor import chars_per_token_of

#: Ids kept before the held ones, so `finish` decodes them in context (a metaspace
#: or byte-level decoder treats the first token of a decode differently).
_CONTEXT_IDS = 4


class HFDecodeStream:
    """One request's incremental decoder (see `realtime.model.tokenizer.DecodeStream`)."""

    def __init__(self, tokenizer: Tokenizer, *, skip_special_tokens: bool):
        self._tokenizer = tokenizer
        self._skip = skip_special_tokens
        self._stream = DecodeStream(skip_special_tokens=skip_special_tokens)
        self._context: deque[int] = deque(maxlen=_CONTEXT_IDS)
        self._held: list[int] = []

    def step(self, token_id: int) -> str | None:
        """Text completed by this token, or None while it is held back."""
        piece: str | None = self._stream.step(self._tokenizer, token_id)
        if piece is None:
            self._held.append(token_id)
            return None
        if self._held:
            self._context.extend(self._held)
            self._held.clear()
        self._context.append(token_id)
        return piece

    def finish(self) -> str:
        """What is still held back when the answer ends.

        The library holds a token back while its text ends in U+FFFD, taking it for
        part of a UTF-8 character; a text that really ends in U+FFFD, or an answer
        cut inside a character (shown as U+FFFD, as OpenAI does), would be lost.
        """
        if not self._held:
            return ""
        context = list(self._context)
        whole: str = self._tokenizer.decode(context + self._held, skip_special_tokens=self._skip)
        before: str = self._tokenizer.decode(context, skip_special_tokens=self._skip)
        self._context.extend(self._held)
        self._held.clear()
        return whole[len(before) :] if whole.startswith(before) else whole


class HFTokenizer:
    """A `tokenizers.Tokenizer` plus the ids that end generation."""

    def __init__(
        self,
        tokenizer: Tokenizer,
        *,
        eos_token_ids: Iterable[int] = (),
        bos_token_id: int | None = None,
    ):
        self._tokenizer = tokenizer
        self._eos = frozenset(eos_token_ids)
        self._bos = bos_token_id
        added = tokenizer.get_added_tokens_decoder()
        self._special = frozenset(i for i, token in added.items() if token.special)
        self._token_text: dict[int, str] = {}
        #: the most characters one token stands for (None: no bound; token_floor.py)
        self._chars_per_token = chars_per_token_of(tokenizer)

    @classmethod
    def from_file(
        cls, path: str | Path, *, eos_token_ids: Iterable[int] = (), bos_token_id: int | None = None
    ) -> HFTokenizer:
        """Load tokenizer.json (raises the library's exception on a broken file)."""
        return cls(
            Tokenizer.from_file(str(path)), eos_token_ids=eos_token_ids, bos_token_id=bos_token_id
        )

    @property
    def backend(self) -> Tokenizer:
        """The wrapped `tokenizers.Tokenizer`, for engines that need more than the contract."""
        return self._tokenizer

    @property
    def eos_token_ids(self) -> frozenset[int]:
        return self._eos

    @property
    def bos_token_id(self) -> int | None:
        return self._bos

    @property
    def special_token_ids(self) -> frozenset[int]:
        """Ids of the added tokens marked special (hidden by skip_special_tokens)."""
        return self._special

    @property
    def vocab_size(self) -> int:
        """Number of ids, added tokens included."""
        size: int = self._tokenizer.get_vocab_size(with_added_tokens=True)
        return size

    def is_special(self, text: str) -> bool:
        token_id = self.token_to_id(text)
        return token_id is not None and token_id in self._special

    def token_to_id(self, token: str) -> int | None:
        token_id: int | None = self._tokenizer.token_to_id(token)
        return token_id

    def encode(self, text: str) -> list[int]:
        [encoding] = self._tokenizer.encode_batch_fast([text], add_special_tokens=False)
        ids: list[int] = encoding.ids
        return ids

    @property
    def chars_per_token(self) -> int | None:
        """The most characters one token stands for (None: no bound; token_floor.py)."""
        return self._chars_per_token

    def fewest_tokens(self, text: str) -> int:
        """A floor on `len(self.encode(text))`, without encoding (0 when there is none)."""
        per_token = self._chars_per_token
        return len(text) // per_token if per_token is not None else 0

    def decode(self, token_ids: list[int], *, skip_special_tokens: bool = True) -> str:
        text: str = self._tokenizer.decode(token_ids, skip_special_tokens=skip_special_tokens)
        return text

    def token_text(self, token_id: int) -> str:
        """The token decoded on its own, special tokens included.

        A byte-level token holding part of a UTF-8 character decodes to U+FFFD,
        as OpenAI and vLLM report it; its exact bytes are a separate field.
        """
        text = self._token_text.get(token_id)
        if text is None:
            text = self.decode([token_id], skip_special_tokens=False)
            self._token_text[token_id] = text
        return text

    def decode_stream(self, *, skip_special_tokens: bool = True) -> HFDecodeStream:
        return HFDecodeStream(self._tokenizer, skip_special_tokens=skip_special_tokens)
