"""The floor on a text's token count: which tokenizers have one, and that it never lies."""

from __future__ import annotations

import unicodedata

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tokenizers import (
    AddedToken,
    Tokenizer,
    decoders,
    models,
    normalizers,
    pre_tokenizers,
    trainers,
)

from realtime.model.hf_tokenizer import HFTokenizer
from realtime.model.token_floor import (
    COMPOSE_AT_MOST,
    chars_per_token,
    chars_per_token_of,
    keeps_every_character,
    shrink_factor,
)
from realtime.model.tokenizer import fewest_tokens
from realtime.testing.tiny_model import corpus_text, train_tokenizer

BPE = {"type": "BPE", "byte_fallback": False, "fuse_unk": False}


def floor_of(**overrides: object) -> int | None:
    settings_: dict[str, object] = {
        "model": BPE,
        "normalizer": None,
        "pre_tokenizer": {"type": "ByteLevel"},
        "vocabulary": ["a", "abc", "abcdefg"],
        "added_tokens": [{"content": "<|im_start|>", "lstrip": False, "rstrip": False}],
    }
    settings_.update(overrides)
    return chars_per_token(**settings_)  # type: ignore[arg-type]


def test_the_longest_entry_bounds_a_token() -> None:
    assert floor_of() == len("<|im_start|>")
    assert floor_of(added_tokens=[]) == len("abcdefg")


@pytest.mark.parametrize(
    ("normalizer", "factor"),
    [
        (None, 1),
        ({"type": "NFD"}, 1),
        ({"type": "Lowercase"}, 1),
        ({"type": "Prepend", "prepend": "▁"}, 1),
        ({"type": "NFC"}, COMPOSE_AT_MOST),
        ({"type": "NFKC"}, COMPOSE_AT_MOST),
        ({"type": "Replace", "pattern": {"String": " "}, "content": "▁"}, 1),
        ({"type": "Replace", "pattern": {"String": "    "}, "content": "\t"}, 4),
        (
            {
                "type": "Sequence",
                "normalizers": [
                    {"type": "NFC"},
                    {"type": "Replace", "pattern": {"String": "ab"}, "content": "c"},
                ],
            },
            2 * COMPOSE_AT_MOST,
        ),
        # Whatever may delete characters has no bound.
        ({"type": "Replace", "pattern": {"String": " "}, "content": ""}, None),
        ({"type": "Replace", "pattern": {"Regex": r"\s+"}, "content": " "}, None),
        ({"type": "Strip", "strip_left": True, "strip_right": True}, None),
        ({"type": "BertNormalizer", "clean_text": True}, None),
        ({"type": "Precompiled", "precompiled_charsmap": ""}, None),
        ({"type": "Sequence", "normalizers": [{"type": "NFC"}, {"type": "StripAccents"}]}, None),
    ],
)
def test_how_much_a_normalizer_can_shorten(
    normalizer: dict[str, object], factor: int | None
) -> None:
    assert shrink_factor(normalizer) == factor


def test_composition_joins_at_most_four_code_points() -> None:
    """NFC and NFKC shorten a text by at most the longest canonical decomposition."""
    longest = max(
        len(unicodedata.normalize("NFD", chr(point)))
        for point in range(0x110000)
        if not 0xD800 <= point < 0xE000
    )
    assert longest == COMPOSE_AT_MOST


@pytest.mark.parametrize(
    ("pre_tokenizer", "keeps"),
    [
        (None, True),
        ({"type": "ByteLevel"}, True),
        ({"type": "Metaspace"}, True),
        ({"type": "Split", "behavior": "Isolated"}, True),
        ({"type": "Sequence", "pretokenizers": [{"type": "Digits"}, {"type": "ByteLevel"}]}, True),
        ({"type": "Split", "behavior": "Removed"}, False),
        ({"type": "Whitespace"}, False),
        ({"type": "WhitespaceSplit"}, False),
        ({"type": "BertPreTokenizer"}, False),
        ({"type": "Sequence", "pretokenizers": [{"type": "Whitespace"}]}, False),
    ],
)
def test_which_pre_tokenizers_keep_every_character(
    pre_tokenizer: dict[str, object] | None, keeps: bool
) -> None:
    assert keeps_every_character(pre_tokenizer) is keeps


def test_no_floor_where_one_token_can_stand_for_any_length() -> None:
    assert floor_of(model={"type": "WordPiece"}) is None  # a long word is one [UNK]
    assert floor_of(model={"type": "Unigram"}) is None
    assert floor_of(model={**BPE, "fuse_unk": True}) is None  # unknown runs fuse
    assert floor_of(model={**BPE, "fuse_unk": True, "byte_fallback": True}) == 12
    assert floor_of(pre_tokenizer={"type": "WhitespaceSplit"}) is None
    assert floor_of(normalizer={"type": "Strip"}) is None
    assert floor_of(added_tokens=[{"content": "<mask>", "lstrip": True, "rstrip": False}]) is None


def _metaspace_tokenizer() -> Tokenizer:
    """A Llama-2-style tokenizer: metaspace BPE with byte fallback under NFC."""
    tokenizer = Tokenizer(models.BPE(unk_token="<unk>", fuse_unk=True, byte_fallback=True))
    tokenizer.normalizer = normalizers.Sequence([normalizers.NFC(), normalizers.Replace(" ", "▁")])
    tokenizer.pre_tokenizer = pre_tokenizers.Metaspace(split=False)
    tokenizer.decoder = decoders.Sequence([decoders.ByteFallback(), decoders.Metaspace()])
    bytes_ = [f"<0x{b:02X}>" for b in range(256)]
    trainer = trainers.BpeTrainer(
        vocab_size=600, special_tokens=["<unk>", *bytes_], show_progress=False
    )
    tokenizer.train_from_iterator([corpus_text()], trainer=trainer)
    tokenizer.add_special_tokens([AddedToken("<|im_end|>", special=True)])
    return tokenizer


@pytest.fixture(scope="module")
def byte_level() -> HFTokenizer:
    return HFTokenizer(train_tokenizer())


@pytest.fixture(scope="module")
def metaspace() -> HFTokenizer:
    return HFTokenizer(_metaspace_tokenizer())


def test_real_tokenizers_have_a_floor(byte_level: HFTokenizer, metaspace: HFTokenizer) -> None:
    longest = max(map(len, byte_level.backend.get_vocab(with_added_tokens=True)))
    assert chars_per_token_of(byte_level.backend) == longest
    assert byte_level.fewest_tokens("x" * (10 * longest)) == 10
    per_token = chars_per_token_of(metaspace.backend)
    assert per_token is not None and per_token % COMPOSE_AT_MOST == 0


def test_a_word_piece_tokenizer_has_none() -> None:
    tokenizer = Tokenizer(models.WordPiece({"[UNK]": 0, "a": 1}, unk_token="[UNK]"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    assert chars_per_token_of(tokenizer) is None
    assert HFTokenizer(tokenizer).fewest_tokens("a" * 10_000) == 0


#: Texts built to need few tokens: the vocabulary's longest entries, repeated.
def _dense_texts(tokenizer: HFTokenizer) -> list[str]:
    vocabulary = tokenizer.backend.get_vocab(with_added_tokens=True)
    longest = sorted(vocabulary, key=len, reverse=True)[:5]
    decoded = [
        tokenizer.decode([vocabulary[entry]], skip_special_tokens=False) for entry in longest
    ]
    jamo = "\u1100\u1161\u11a8"  # three code points NFC composes into one syllable
    marks = "\u0391\u0313\u0342\u0345"  # four into one (U+1F8F)
    return [piece * 50 for piece in decoded] + [jamo * 200, marks * 200, " " * 500, "\n" * 500]


@pytest.mark.parametrize("name", ["byte_level", "metaspace"])
def test_the_floor_never_exceeds_the_real_count(name: str, request: pytest.FixtureRequest) -> None:
    tokenizer: HFTokenizer = request.getfixturevalue(name)
    for text in _dense_texts(tokenizer):
        assert tokenizer.fewest_tokens(text) <= len(tokenizer.encode(text)), text[:20]


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=300))
def test_the_floor_holds_for_any_text(
    byte_level: HFTokenizer, metaspace: HFTokenizer, text: str
) -> None:
    for tokenizer in (byte_level, metaspace):
        assert tokenizer.fewest_tokens(text) <= len(tokenizer.encode(text))


def test_a_tokenizer_without_a_floor_gets_zero() -> None:
    class Plain:
        def encode(self, text: str) -> list[int]:
            return [1] * len(text)

    assert fewest_tokens(Plain(), "x" * 1000) == 0  # type: ignore[arg-type]
