"""The fewest tokens a text can encode to, known without encoding it.

Why: a prompt far beyond the model's context is refused with `context_length_exceeded`
whatever it encodes to, yet finding that out by encoding costs the tokenizer about
2 s of CPU per MiB of text. A floor on the token count refuses it in microseconds.

The floor. A BPE token covers at most as many characters of the normalized text
as its vocabulary entry is long (a byte-level entry has one character per byte, and
every character is at least one byte; a metaspace entry one per character), so a
text of `n` characters is at least `n / longest` tokens. A normalizer may shorten
the text first: NFC and NFKC compose at most 4 code points into one character (the
longest canonical decomposition), a string `Replace` shortens by its pattern's length
over its replacement's; lowercasing, decomposing and prepending never shorten.

It holds only where no token can stand for unboundedly many characters, so there
is no floor (None: the prompt is encoded as before) for anything else: models other
than BPE (WordPiece turns a long word into one `[UNK]`), BPE fusing unknown
characters into one token without byte fallback, normalizers or pre-tokenizers that
delete characters (strip, clean-text, regex replacements, whitespace splitting,
`Removed` splits) and added tokens that swallow the whitespace around them.

Everything here reads the tokenizer's configuration as plain data (the JSON that
`tokenizers` serializes), so it is tested without a tokenizer.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

#: NFC/NFKC compose at most this many code points into one (U+1F87 and kin, 4 in NFD).
COMPOSE_AT_MOST = 4

#: Normalizers that never make a text shorter.
_LENGTHENING_NORMALIZERS = frozenset({"NFD", "NFKD", "Lowercase", "Prepend", "ByteLevel"})
_COMPOSING_NORMALIZERS = frozenset({"NFC", "NFKC"})
#: Pre-tokenizers that split or map the text but drop no character.
_KEEPING_PRE_TOKENIZERS = frozenset(
    {"ByteLevel", "Metaspace", "Digits", "Punctuation", "UnicodeScripts", "FixedLength"}
)


def shrink_factor(normalizer: Mapping[str, Any] | None) -> int | None:
    """How many times shorter `normalizer` can make a text, at most; None if unbounded."""
    if normalizer is None:
        return 1
    kind = normalizer.get("type")
    if kind in _LENGTHENING_NORMALIZERS:
        return 1
    if kind in _COMPOSING_NORMALIZERS:
        return COMPOSE_AT_MOST
    if kind == "Replace":
        pattern, content = normalizer.get("pattern") or {}, normalizer.get("content")
        literal = pattern.get("String")
        if not isinstance(literal, str) or not isinstance(content, str) or not content:
            return None  # a regex, or a replacement by nothing: no bound on what it removes
        return max(1, -(-len(literal) // len(content)))
    if kind == "Sequence":
        factor = 1
        for inner in normalizer.get("normalizers") or ():
            step = shrink_factor(inner)
            if step is None:
                return None
            factor *= step
        return factor
    return None  # Strip, StripAccents, BertNormalizer, Precompiled, anything new


def keeps_every_character(pre_tokenizer: Mapping[str, Any] | None) -> bool:
    """Whether `pre_tokenizer` hands every character of its input on to the model."""
    if pre_tokenizer is None:
        return True
    kind = pre_tokenizer.get("type")
    if kind in _KEEPING_PRE_TOKENIZERS:
        return True
    if kind == "Split":
        return pre_tokenizer.get("behavior") != "Removed"
    if kind == "Sequence":
        return all(keeps_every_character(inner) for inner in pre_tokenizer.get("pretokenizers", ()))
    return False  # Whitespace, WhitespaceSplit, BertPreTokenizer, CharDelimiterSplit, ...


def chars_per_token(
    *,
    model: Mapping[str, Any],
    normalizer: Mapping[str, Any] | None,
    pre_tokenizer: Mapping[str, Any] | None,
    vocabulary: Iterable[str],
    added_tokens: Iterable[Mapping[str, Any]],
) -> int | None:
    """The most characters of input one token can stand for; None when unbounded.

    `model` needs only its `type`, `byte_fallback` and `fuse_unk`; `added_tokens` are
    dicts with `content`, `lstrip` and `rstrip`, as in tokenizer.json."""
    if model.get("type") != "BPE":
        return None
    if model.get("fuse_unk") and not model.get("byte_fallback"):
        return None  # a run of unknown characters becomes one token
    if not keeps_every_character(pre_tokenizer):
        return None
    shrink = shrink_factor(normalizer)
    if shrink is None:
        return None
    longest = 1
    for token in added_tokens:
        if token.get("lstrip") or token.get("rstrip"):
            return None  # it takes the whitespace beside it, however much
        longest = max(longest, len(token.get("content", "")))
    longest = max(longest, max(map(len, vocabulary), default=1))
    return longest * shrink


def chars_per_token_of(tokenizer: Any) -> int | None:
    """`chars_per_token` for a `tokenizers.Tokenizer` (its own serialized settings)."""
    model = tokenizer.model
    model_config = {
        "type": type(model).__name__,
        "byte_fallback": getattr(model, "byte_fallback", False),
        "fuse_unk": getattr(model, "fuse_unk", False),
    }
    return chars_per_token(
        model=model_config,
        normalizer=_state(tokenizer.normalizer),
        pre_tokenizer=_state(tokenizer.pre_tokenizer),
        vocabulary=tokenizer.get_vocab(with_added_tokens=True),
        added_tokens=(
            {"content": token.content, "lstrip": token.lstrip, "rstrip": token.rstrip}
            for token in tokenizer.get_added_tokens_decoder().values()
        ),
    )


def _state(component: Any) -> dict[str, Any] | None:
    if component is None:
        return None
    state: dict[str, Any] = json.loads(component.__getstate__())
    return state
