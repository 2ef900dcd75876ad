"""Test doubles and the engine conformance kit that ship with the package.

`EngineConformance` is the kit a third-party engine runs in its own pytest suite
(docs/howto/write-an-engine.md). `tiny_model.py` writes a tiny random-weight model
directory (`python -m realtime.testing.tiny_model DIR`); `fake_exllamav2.py` stands
in for the exllamav2 package where there is no GPU (the GPU proof's dry run, the
engine's tests).
"""

from realtime.testing.conformance import EngineConformance
from realtime.testing.engine_checks import PROMPT_TEXT, ConformanceFailure

__all__ = ["PROMPT_TEXT", "ConformanceFailure", "EngineConformance"]
