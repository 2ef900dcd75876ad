"""CI smoke run of the benchmark: every scenario at tiny sizes, through the real command.

Why a subprocess: `python -m bench --quick` is exactly what a developer runs, and
it starts servers and load generators as processes of its own; running it as a
child keeps those (and the in-process server of the cancel scenario) out of the
test process. This checks that the harness runs and writes well-formed results.
It asserts no numbers: timing on a shared CI machine proves nothing, and the
goals are judged by the full run, not here.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
import warnings
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent.parent
SCENARIOS = (
    "throughput",
    "latency",
    "concurrency",
    "idle",
    "fairness",
    "cancel",
    "decode",
    "constrained",
    "hostile",
    "soak",
    "agent_loop",
    "agent_messages",
    "replicas",
)
STATUSES = {"pass", "miss", "n/a"}
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"

#: A guard against a hang, not a measurement: the quick run starts a dozen servers (two
#: agent loops' among them, and the replicas scenario's two cpu replicas with nginx and
#: PostgreSQL), which takes minutes on a busy machine.
pytestmark = pytest.mark.timeout(560)


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("bench")
    completed = subprocess.run(
        [sys.executable, "-m", "bench", "--quick", "--retries", "1", "--out", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=540,
    )
    assert completed.returncode == 0, _failure_report(completed.stdout, completed.stderr)
    for line in completed.stdout.splitlines():
        if line.startswith("RETRIED"):  # shown in the run's summary, not hidden by the retry
            warnings.warn(
                f"bench --quick: {line}\n{_failure_report('', completed.stderr)}", stacklevel=2
            )
    return out


def _failure_report(stdout: str, stderr: str) -> str:
    """What a failed run said about why: its FAIL lines and every traceback.

    The progress log fills stderr, so its tail alone hides a scenario that failed
    early (a CI run once showed only the last scenarios' lines).
    """
    fails = [line for line in stdout.splitlines() if line.startswith("FAIL")]
    tracebacks: list[str] = []
    lines = stderr.splitlines()
    for index, line in enumerate(lines):
        if line.startswith("Traceback"):
            end = index + 1
            while end < len(lines) and not lines[end].startswith("["):
                end += 1
            tracebacks.append("\n".join(lines[max(0, index - 2) : end]))
    return "\n".join([*fails, *tracebacks])[-8000:] or stderr[-4000:]


def _number_or_null(value: Any) -> bool:
    return value is None or (isinstance(value, (int, float)) and math.isfinite(value))


def test_every_scenario_ran_and_wrote_well_formed_json(quick_run: Path) -> None:
    document = json.loads((quick_run / "results.json").read_text())
    meta = document["meta"]
    assert meta["mode"] == "quick"
    assert meta["repeats"] >= 1
    assert meta["machine"]["cpus"] >= 1
    assert set(document["scenarios"]) == set(SCENARIOS)
    for name, scenario in document["scenarios"].items():
        assert scenario["name"] == name
        assert "error" not in scenario["detail"], scenario["detail"].get("error")
        assert scenario["metrics"], f"{name} recorded no metrics"
        for metric in scenario["metrics"]:
            assert {"variant", "name", "unit", "median", "min", "max", "runs"} <= set(metric)
            assert len(metric["runs"]) == meta["repeats"], (name, metric["name"])
            assert all(_number_or_null(v) for v in [metric["median"], *metric["runs"]])
        assert scenario["goals"], f"{name} judged no goal"
        for goal in scenario["goals"]:
            assert goal["status"] in STATUSES
            assert _number_or_null(goal["value"])


def test_markdown_report_has_every_section_and_the_goal_table(quick_run: Path) -> None:
    text = (quick_run / "results.md").read_text()
    assert "| scenario | goal | target | measured | result |" in text
    document = json.loads((quick_run / "results.json").read_text())
    for scenario in document["scenarios"].values():
        assert f"## {scenario['title']}" in text


def test_each_scenario_has_a_png_plot(quick_run: Path) -> None:
    for name in SCENARIOS:
        assert (quick_run / f"{name}.png").read_bytes()[:8] == PNG_MAGIC, name


def test_results_do_not_name_machine_paths(quick_run: Path) -> None:
    for name in ("results.md", "results.json"):
        assert str(quick_run) not in (quick_run / name).read_text()
