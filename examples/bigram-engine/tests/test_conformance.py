"""The bigram engine against realtime's engine conformance kit."""

from __future__ import annotations

from realtime_bigram import BigramEngine

from realtime import Engine
from realtime.testing import EngineConformance


class TestBigramEngine(EngineConformance):
    def make_engine(self) -> Engine:
        return BigramEngine()

    def tokens_computed(self, engine: Engine) -> int:
        assert isinstance(engine, BigramEngine)
        return engine.tokens_generated
