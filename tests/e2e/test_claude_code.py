"""Claude Code, unmodified, against a real server: docs/howto/use-claude-code.md, run.

The guide's own commands run as they are written, inside a network namespace
with only loopback (`agent_clis.py`): its script file, its `realtime serve`
command (started in the namespace, on the guide's port 8000, which is free there),
and each of its Claude Code commands, whose output must be exactly what the guide
shows: a plain answer with the key in `x-api-key`, a Bash tool turn on the
scripted engine (`tool_use`, Claude Code runs the command, `tool_result`, then the
answer, which the script gives only once the command's real output came back),
and a plain answer with a Bearer token. The server's access log must show each
request on `/v1/messages`, Claude Code's session header as its cache scope, and no
refusal.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests.e2e.agent_clis import (
    CLAUDE_CODE_VERSION,
    REPO_ROOT,
    claude_binary,
    guide_blocks,
    guide_commands,
    require_netns,
    run_guide,
)

GUIDE = REPO_ROOT / "docs" / "howto" / "use-claude-code.md"


def test_the_guide_pins_the_tested_version() -> None:
    install = guide_blocks(GUIDE)[0]
    assert install == (
        "bash",
        f"npm install -g @anthropic-ai/claude-code@{CLAUDE_CODE_VERSION}\n",
    )


@pytest.mark.timeout(600)
def test_the_guide_runs_as_written(tmp_path: Path) -> None:
    claude = claude_binary()
    require_netns()
    blocks = guide_blocks(GUIDE)
    [script] = [body for kind, body in blocks if kind == "json"]
    json.loads(script)  # the guide's script is valid JSON
    (tmp_path / "claude-script.json").write_text(script, encoding="utf-8")
    guide = guide_commands(blocks)
    assert len(guide.commands) == 3
    home = tmp_path / "home"
    home.mkdir()
    log = run_guide(tmp_path, guide, claude, home)
    ends = [line for line in log.splitlines() if "request.end" in line]
    # three answers and the tool turn's second request, each completed
    assert len(ends) >= 4 and all("status=completed" in line for line in ends), log
    assert all(re.search(r"cache_scope=[0-9a-f-]{36} ", line) for line in ends), log
    assert '"POST /v1/messages?beta=true HTTP/1.1" 200' in log
    assert " 401" not in log and " 400" not in log and " 404" not in log, log
    assert "Traceback" not in log
