"""Session fixtures for grammar tests, loaded as a pytest plugin (see tests/conftest.py):
a tokenizer bound to the grammar engine, without a model - the tiny model's BPE,
and the same plus the tool-call markers other formats need as special tokens.

The grammar engine and torch are imported inside the fixtures, so a test run that
uses none of them does not pay for the imports.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest
from tokenizers import AddedToken, Tokenizer

from realtime.chat.tools import deepseek_v3, mistral
from realtime.testing.tiny_model import train_tokenizer

if TYPE_CHECKING:
    from realtime.constrain.matcher import ConstraintCompiler
    from realtime.constrain.tokenizer import TokenizerBinding

#: Special tokens of other model families, so their markers are single tokens here.
EXTRA_MARKERS = (
    mistral.TOOL_CALLS,
    mistral.ARGS,
    deepseek_v3.CALLS_BEGIN,
    deepseek_v3.CALL_BEGIN,
    deepseek_v3.SEP,
    deepseek_v3.CALL_END,
    deepseek_v3.CALLS_END,
)
#: Padded logits: a few ids past the tokenizer, as in real embedding tables.
PADDING = 5


def bind(tokenizer: Tokenizer) -> TokenizerBinding:
    """`tokenizer` bound as an engine would bind it, with padded logits."""
    from realtime.constrain.tokenizer import TokenizerBinding

    eos = tokenizer.token_to_id("<|im_end|>")
    width = tokenizer.get_vocab_size(with_added_tokens=True) + PADDING
    return TokenizerBinding(tokenizer, eos_token_ids=[eos], logits_width=width)


@pytest.fixture(scope="session")
def tiny_tokenizer() -> Tokenizer:
    return train_tokenizer()


@pytest.fixture(scope="session")
def binding(tiny_tokenizer: Tokenizer) -> TokenizerBinding:
    """The tiny model's tokenizer as its engine would bind it."""
    return bind(tiny_tokenizer)


@pytest.fixture(scope="session")
def compiler(binding: TokenizerBinding) -> ConstraintCompiler:
    from realtime.constrain.matcher import ConstraintCompiler

    return ConstraintCompiler(binding)


@pytest.fixture(scope="session")
def marker_tokenizer() -> Tokenizer:
    tokenizer = Tokenizer.from_str(train_tokenizer().to_str())
    tokenizer.add_special_tokens(
        [AddedToken(t, special=True, normalized=False) for t in EXTRA_MARKERS]
    )
    return tokenizer


@pytest.fixture(scope="session")
def marker_binding(marker_tokenizer: Tokenizer) -> TokenizerBinding:
    return bind(marker_tokenizer)


@pytest.fixture(scope="session")
def marker_compiler(marker_binding: TokenizerBinding) -> ConstraintCompiler:
    from realtime.constrain.matcher import ConstraintCompiler

    return ConstraintCompiler(marker_binding)
