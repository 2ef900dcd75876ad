"""What `realtime serve` tells a new user: the lines the docs promise, errors they can find."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from realtime.cli import _parser
from realtime.config.flags import FLAGS


def _serve(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "realtime", "serve", *args],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=cwd,
    )


def test_engine_auto_logs_its_choice_as_the_serve_a_model_guide_shows(tmp_path: Path):
    # The line is logged while the flags are read, before the server starts: it used to
    # be dropped because logging was not configured yet. A missing model stops it after.
    result = _serve("--engine", "auto", "--model", str(tmp_path / "none"), "--port", "0")
    assert result.returncode == 2
    lines = result.stderr.splitlines()
    assert lines[0].startswith("INFO realtime: --engine auto: ")
    assert lines[-1].startswith("realtime: cannot start engine ")


def test_a_usage_error_is_two_lines_not_the_whole_flag_list():
    result = _serve("--queue-size", "0")
    assert result.returncode == 2
    assert result.stderr.splitlines() == [
        "usage: realtime serve [-h] [OPTIONS]",
        "realtime serve: error: argument --queue-size: must be at least 1, got 0",
    ]


def test_every_server_flag_with_a_default_states_it_in_help():
    """A flag whose field has a default says it in `--help` (or says what it is instead)."""
    serve = next(action for action in _parser()._actions if action.dest == "command")
    text = serve.choices["serve"].format_help()  # type: ignore[attr-defined]
    missing = []
    for flag in FLAGS:
        if flag.kind != "value" or flag.field is None or flag.help is None:
            continue
        if flag.default() is None:
            continue  # "(default: ...)" in words, or nothing to state
        entry = re.search(rf"\n  {flag.option}[ \n](.*?)(?=\n  -|\n\n|\n?\Z)", text, re.S)
        assert entry is not None, flag.option
        if "default" not in entry[1]:
            missing.append(flag.option)
    assert missing == []
