"""The conformance kit against `EngineProxy`: the cpu engine and the fake exllamav2, each in
a process of its own, checked through the proxy the front end uses. Work is counted
where it is computed: the counters are read from the engine process."""

from __future__ import annotations

import pytest

from realtime.engine.base import Engine
from realtime.engine.process.launcher import EngineProcess
from realtime.engine.process.proxy import EngineProxy
from realtime.testing import EngineConformance
from tests.engine.process_fixtures import attach


class TestCpuEngineThroughTheProxy(EngineConformance):
    @pytest.fixture(autouse=True)
    def _process(self, cpu_process: EngineProcess) -> None:
        self.process = cpu_process

    def make_engine(self) -> Engine:
        return attach(self.process)

    def tokens_computed(self, engine: Engine) -> int:
        assert isinstance(engine, EngineProxy)
        return int(engine.stats.tokens_generated)


class TestExLlamaV2OnTheFakeThroughTheProxy(EngineConformance):
    @pytest.fixture(autouse=True)
    def _process(self, exllamav2_process: EngineProcess) -> None:
        self.process = exllamav2_process

    def make_engine(self) -> Engine:
        return attach(self.process)

    def tokens_computed(self, engine: Engine) -> int:
        assert isinstance(engine, EngineProxy)
        forwards = engine.call("realtime.testing.fake_exllamav2:forwards")
        return sum(1 for stage, _, _ in forwards if stage == "gen")
