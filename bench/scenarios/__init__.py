"""One module per scenario; each exposes NAME, TITLE and `run(ctx) -> ScenarioResult`."""

from __future__ import annotations

from types import ModuleType

from bench.scenarios import (
    agent_loop,
    agent_messages,
    cancel,
    concurrency,
    constrained,
    decode,
    fairness,
    hostile,
    idle,
    latency,
    replicas,
    soak,
    throughput,
)

#: In the order they run and appear in the report.
MODULES: tuple[ModuleType, ...] = (
    throughput,
    latency,
    concurrency,
    idle,
    fairness,
    cancel,
    decode,
    constrained,
    hostile,
    soak,
    agent_loop,
    agent_messages,
    replicas,
)


def by_name() -> dict[str, ModuleType]:
    return {module.NAME: module for module in MODULES}
