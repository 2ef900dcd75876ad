"""`python -m bench.event_path --quick` runs and reports both dialects and their ratio.

Run as the command a developer types, in a child process: `main()` sets the
`realtime` logger's level and installs uvloop, which must not leak into other tests.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent


def test_quick_run_reports_both_dialects_and_the_ratio() -> None:
    run = subprocess.run(
        [sys.executable, "-m", "bench.event_path", "--quick"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0, run.stderr[-4000:]
    out = run.stdout
    assert re.search(r"^chat frames +\d+ ns per chunk", out, re.M), out
    assert re.search(r"^realtime events +\d+ ns per chunk", out, re.M), out
    assert re.search(r"^events / chat frames: \d+\.\d\dx", out, re.M), out
