"""Token-level engines behind one interface (`Engine`), and the registry that builds them."""

from realtime.engine.base import (
    Engine,
    EngineOutput,
    EngineRequest,
    SamplingParams,
    StopConditions,
)

__all__ = [
    "Engine",
    "EngineOutput",
    "EngineRequest",
    "SamplingParams",
    "StopConditions",
]
