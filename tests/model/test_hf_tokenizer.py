"""HFTokenizer: the Tokenizer contract over a tokenizer.json, on the tiny model's tokenizer."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tokenizers import Tokenizer, processors

from realtime.model.hf_tokenizer import HFTokenizer
from realtime.model.tokenizer import Tokenizer as TokenizerContract
from realtime.testing.tiny_model import train_tokenizer

MULTIBYTE = "Grüße aus München: 你好，世界 🚀🦀 naïve café — 猫 👍🏽 🇫🇷 ŵ"  # noqa: RUF001 - full-width comma on purpose


@pytest.fixture(scope="module")
def backend() -> Tokenizer:
    return train_tokenizer()


@pytest.fixture(scope="module")
def tokenizer(backend: Tokenizer) -> HFTokenizer:
    plain = HFTokenizer(backend)
    ids = [tid(plain, "<|im_end|>"), tid(plain, "<|endoftext|>")]
    return HFTokenizer(backend, eos_token_ids=ids, bos_token_id=ids[1])


def tid(tokenizer: HFTokenizer, token: str) -> int:
    token_id = tokenizer.token_to_id(token)
    assert token_id is not None
    return token_id


def stream(
    tokenizer: HFTokenizer, ids: list[int], *, skip_special_tokens: bool = True
) -> list[str]:
    decoder = tokenizer.decode_stream(skip_special_tokens=skip_special_tokens)
    return [piece for piece in (decoder.step(i) for i in ids) if piece is not None]


def test_satisfies_the_pipeline_contract(tokenizer: HFTokenizer) -> None:
    contract: TokenizerContract = tokenizer
    assert contract.eos_token_ids == {tid(tokenizer, "<|im_end|>"), tid(tokenizer, "<|endoftext|>")}
    assert tokenizer.bos_token_id == tid(tokenizer, "<|endoftext|>")
    assert tokenizer.vocab_size == 651


def test_round_trip_of_multibyte_text(tokenizer: HFTokenizer) -> None:
    ids = tokenizer.encode(MULTIBYTE)
    assert len(ids) > len(MULTIBYTE.split())
    assert tokenizer.decode(ids) == MULTIBYTE


@settings(max_examples=150, deadline=None)
@given(st.text(max_size=40))
def test_round_trip_of_any_text(tokenizer: HFTokenizer, text: str) -> None:
    assert tokenizer.decode(tokenizer.encode(text), skip_special_tokens=False) == text


def test_encode_matches_the_library_without_special_tokens(backend: Tokenizer) -> None:
    # A Llama 3 style tokenizer.json adds BOS when asked; encode must never ask.
    bos = backend.token_to_id("<|begin_of_text|>")
    with_bos = Tokenizer.from_str(backend.to_str())
    with_bos.post_processor = processors.TemplateProcessing(
        single="<|begin_of_text|> $A", special_tokens=[("<|begin_of_text|>", bos)]
    )
    assert with_bos.encode("hello").ids[0] == bos
    ids = HFTokenizer(with_bos).encode("hello")
    assert bos not in ids
    assert ids == with_bos.encode("hello", add_special_tokens=False).ids


def test_special_tokens_written_in_the_text_become_single_ids(tokenizer: HFTokenizer) -> None:
    ids = tokenizer.encode("<|im_start|>user\nhi<|im_end|><think>")
    assert ids[0] == tid(tokenizer, "<|im_start|>")
    assert tid(tokenizer, "<|im_end|>") in ids
    assert ids[-1] == tid(tokenizer, "<think>")


def test_decode_skips_special_tokens_but_not_control_tokens(tokenizer: HFTokenizer) -> None:
    ids = tokenizer.encode("<think>hm</think>Hi<|im_end|>")
    assert tokenizer.decode(ids) == "<think>hm</think>Hi"
    assert tokenizer.decode(ids, skip_special_tokens=False) == "<think>hm</think>Hi<|im_end|>"
    assert tokenizer.special_token_ids >= {tid(tokenizer, "<|im_end|>")}
    assert tid(tokenizer, "<think>") not in tokenizer.special_token_ids


def test_token_text(tokenizer: HFTokenizer) -> None:
    (the,) = tokenizer.encode(" the")
    assert tokenizer.token_text(the) == " the"
    assert tokenizer.token_text(tid(tokenizer, "<|im_end|>")) == "<|im_end|>"
    # A byte-level token holding part of a character reports U+FFFD, like OpenAI and vLLM.
    first, *_ = tokenizer.encode("猫")
    assert tokenizer.token_text(first) == "\ufffd"


def test_stream_equals_full_decode_and_never_splits_a_character(tokenizer: HFTokenizer) -> None:
    ids = tokenizer.encode(MULTIBYTE)
    pieces = stream(tokenizer, ids)
    assert "".join(pieces) == MULTIBYTE
    assert not any("\ufffd" in piece for piece in pieces)
    # Some tokens were held back: the text has characters split across tokens.
    assert len(pieces) < len(ids)


@settings(max_examples=150, deadline=None)
@given(st.text(max_size=30))
def test_stream_of_any_text_is_whole_characters(tokenizer: HFTokenizer, text: str) -> None:
    pieces = stream(tokenizer, tokenizer.encode(text), skip_special_tokens=False)
    assert "".join(pieces) == text
    assert all("\ufffd" not in piece for piece in pieces if "\ufffd" not in text)


def test_stream_hides_special_tokens_only_when_asked(tokenizer: HFTokenizer) -> None:
    ids = tokenizer.encode("<think>ok</think>Voilà 🚀<|im_end|>")
    assert "".join(stream(tokenizer, ids)) == "<think>ok</think>Voilà 🚀"
    shown = stream(tokenizer, ids, skip_special_tokens=False)
    assert "".join(shown) == "<think>ok</think>Voilà 🚀<|im_end|>"
    assert shown[-1] == "<|im_end|>"


def test_each_stream_is_independent(tokenizer: HFTokenizer) -> None:
    ids = tokenizer.encode("🚀")
    first, second = tokenizer.decode_stream(), tokenizer.decode_stream()
    assert first.step(ids[0]) is None
    assert [second.step(i) for i in ids][-1] == "🚀"
    assert [first.step(i) for i in ids[1:]][-1] == "🚀"


def test_unknown_ids_are_ignored(tokenizer: HFTokenizer) -> None:
    decoder = tokenizer.decode_stream()
    assert decoder.step(10_000) is None
    assert decoder.step(tokenizer.encode("x")[0]) == "x"
    assert tokenizer.decode([10_000]) == ""


def test_from_file(tmp_path: Path, backend: Tokenizer) -> None:
    path = tmp_path / "tokenizer.json"
    backend.save(str(path))
    loaded = HFTokenizer.from_file(path, eos_token_ids=[1, 2])
    assert loaded.eos_token_ids == {1, 2}
    assert loaded.bos_token_id is None
    assert loaded.encode(MULTIBYTE) == HFTokenizer(backend).encode(MULTIBYTE)
