"""The cpu engine as the end-to-end tests serve it: in the server's process, or in a
process of its own behind `EngineProxy` (as `realtime serve` runs it by default).

End-to-end modules parametrize their server fixture with `CPU_MODES`, so every one
of their tests runs both ways. Counters are read the same way in both: `engine.stats`
is the engine's own `CpuStats`, in-process, or a copy read from the engine process.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from realtime.engine.process.proxy import EngineProxy
from realtime.engine.process.spec import EngineSpec

IN_PROCESS = "in-process"
ENGINE_PROCESS = "engine-process"
CPU_MODES = [IN_PROCESS, ENGINE_PROCESS]


def cpu_engine(model_dir: Path, mode: str, **options: Any) -> Any:
    """A cpu engine (not started) serving `model_dir`, run the way `mode` says."""
    if mode == ENGINE_PROCESS:
        return EngineProxy(EngineSpec("cpu", {"model_dir": str(model_dir), **options}))
    from realtime.engine.cpu.engine import CpuEngine

    return CpuEngine(model_dir, **options)


def in_process(engine: Any) -> bool:
    return not isinstance(engine, EngineProxy)
