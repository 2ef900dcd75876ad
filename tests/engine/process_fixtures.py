"""Engine processes shared by a test module: starting one costs seconds (torch, the model).

Tests attach `EngineProxy`s to them (as a second front end would) and close the
proxies, never the process; the fixture stops it at the end of the module.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from realtime.engine.process.launcher import EngineProcess
from realtime.engine.process.proxy import EngineProxy
from realtime.engine.process.spec import EngineSpec

#: The fake exllamav2, installed in the engine process before the engine is built.
FAKE_EXLLAMAV2 = "realtime.testing.fake_exllamav2:install_chatty"


def cpu_spec(model_dir: Path, **options: object) -> EngineSpec:
    return EngineSpec("cpu", {"model_dir": str(model_dir), "threads": 1, **options})


def exllamav2_spec(model_dir: Path, **options: object) -> EngineSpec:
    return EngineSpec("exllamav2", {"model_dir": str(model_dir), **options}, (FAKE_EXLLAMAV2,))


def attach(process: EngineProcess) -> EngineProxy:
    return EngineProxy(process.spec, address=process.address)


def running(spec: EngineSpec) -> Iterator[EngineProcess]:
    process = EngineProcess(spec)
    process.start_sync()
    try:
        yield process
    finally:
        process.stop_sync()


@pytest.fixture(scope="module")
def cpu_process(tiny_model_dir: Path) -> Iterator[EngineProcess]:
    yield from running(cpu_spec(tiny_model_dir))


@pytest.fixture(scope="module")
def exllamav2_process(tiny_model_dir: Path) -> Iterator[EngineProcess]:
    yield from running(exllamav2_spec(tiny_model_dir))
