"""Smoke run of `python -m bench.batching --quick --no-vllm --api-servers 1,2`: the
harness, not the numbers.

It starts our server with the cpu engine on a tiny model, once with one front end and
once with two (`--api-servers 2`), and drives both through the same closed-loop
streaming client the full run uses; vLLM (minutes to start) is left out on purpose,
and the report must say so. No figure is judged here.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")

ROOT = Path(__file__).resolve().parent.parent.parent


def test_the_quick_run_measures_our_server_and_says_vllm_was_not_run(tmp_path: Path) -> None:
    argv = [
        "-m",
        "bench.batching",
        "--quick",
        "--no-vllm",
        "--repeats",
        "1",
        "--api-servers",
        "1,2",
    ]
    completed = subprocess.run(
        [sys.executable, *argv, "--out", str(tmp_path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert completed.returncode == 0, completed.stderr[-4000:]
    document = json.loads((tmp_path / "batching.json").read_text())
    scenario = document["scenario"]
    measured = {(m["variant"], m["name"]): m for m in scenario["metrics"] if m["runs"]}
    for concurrency in (1, 2):
        for server in ("realtime", "realtime-2fe"):
            rate = measured[(f"{server} c={concurrency}", "tokens/s")]
            assert rate["median"] > 0
            assert (f"{server} c={concurrency}", "TTFT p99") in measured
            assert (f"{server} c={concurrency}", "server CPU per token") in measured
        ratio = measured[(f"ratio c={concurrency}", "realtime 2 front ends / 1 (tokens/s)")]
        assert ratio["median"] > 0
    assert not any(variant.startswith("vLLM") for variant, _ in measured)
    assert {goal["status"] for goal in scenario["goals"]} == {"n/a"}
    text = (tmp_path / "batching.md").read_text()
    assert "| concurrent requests | 1 | 2 |" in text
    assert "| realtime 2 front ends, tokens/s |" in text
    assert "| realtime 2 front ends / 1, tokens/s |" in text
    assert "with `--api-servers 2`" in text
    assert "realtime one process" not in text  # not measured in --quick
    assert "vLLM was not run" in text
    assert (tmp_path / "batching.png").read_bytes()[:4] == b"\x89PNG"


def test_the_front_end_counts_must_include_one_front_end() -> None:
    """The goals judge our server with one front end, so a run without it is refused."""
    from bench.batching.__main__ import main

    with pytest.raises(SystemExit) as refused:
        main(["--quick", "--no-vllm", "--api-servers", "2"])
    assert refused.value.code == 2
