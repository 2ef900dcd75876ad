"""`python -m bench.generation_path --quick` runs and reports both variants and their ratio.

Run as the command a developer types, in a child process: `main()` installs uvloop,
which must not leak into other tests.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent


def test_quick_run_reports_both_variants_and_the_difference() -> None:
    run = subprocess.run(
        [sys.executable, "-m", "bench.generation_path", "--quick"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0, run.stderr[-4000:]
    out = run.stdout
    assert re.search(r"^ +plain: +\d+ ns per token", out, re.M), out
    assert re.search(r"^ +vllm metrics: +\d+ ns per token", out, re.M), out
    assert re.search(r"^ +difference: +-?\d+ ns per token; paired ratio \d+\.\d{3}", out, re.M), out
