"""Test doubles and the engine conformance kit, shipped with the package.

`EngineConformance` is the kit a third-party engine runs in its own pytest
suite (docs/howto/write-an-engine.md); `fake_exllamav2` is the fake the
exllamav2 engine's tests and the GPU proof's dry run use.
"""

from realtime.testing.conformance import EngineConformance
from realtime.testing.engine_checks import PROMPT_TEXT, ConformanceFailure

__all__ = ["PROMPT_TEXT", "ConformanceFailure", "EngineConformance"]
