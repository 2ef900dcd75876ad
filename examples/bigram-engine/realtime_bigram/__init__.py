"""A character bigram model served by realtime: an engine written outside the package."""

from realtime_bigram.engine import BigramEngine
from realtime_bigram.tokenizer import CharTokenizer

__all__ = ["BigramEngine", "CharTokenizer"]
