"""`python -m bench.event_path --quick` runs and reports both dialects and their ratio."""

from __future__ import annotations

import re

import pytest

from bench import event_path


def test_quick_run_reports_both_dialects_and_the_ratio(capsys: pytest.CaptureFixture[str]) -> None:
    event_path.main(["--quick"])
    out = capsys.readouterr().out
    assert re.search(r"^chat frames +\d+ ns per chunk", out, re.M), out
    assert re.search(r"^realtime events +\d+ ns per chunk", out, re.M), out
    assert re.search(r"^events / chat frames: \d+\.\d\dx", out, re.M), out
