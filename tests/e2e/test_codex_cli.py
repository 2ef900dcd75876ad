"""Codex CLI, unmodified, against a real server: docs/howto/use-codex-cli.md, run.

The guide's own commands run as they are written, inside a network namespace
with only loopback (`agent_clis.py`): its script file, its `config.toml` (as
`~/.codex/config.toml` of a fresh home), its `realtime serve` command (started in
the namespace, on the guide's port 8000, which is free there), and each of its
Codex commands, whose stdout must be exactly what the guide shows: a plain answer
over HTTP, a shell tool turn over HTTP (`exec_command`, Codex runs the command,
`function_call_output`, then the answer, which the script gives only once the
command's real output came back), and the same tool turn in WebSocket mode
(`supports_websockets`), which Codex opens with a `generate: false` warm-up.

The server's log must show each HTTP request on `/v1/responses` with Codex's
`prompt_cache_key` as its cache scope, the socket's three responses (the warm-up
with no output tokens), Codex's hosted `web_search` tool logged as not offered,
and no refusal.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests.e2e.agent_clis import (
    CODEX_VERSION,
    REPO_ROOT,
    codex_binary,
    guide_blocks,
    guide_commands,
    require_netns,
    run_guide,
)

GUIDE = REPO_ROOT / "docs" / "howto" / "use-codex-cli.md"


def test_the_guide_pins_the_tested_version() -> None:
    install = guide_blocks(GUIDE)[0]
    assert install == ("bash", f"npm install -g @openai/codex@{CODEX_VERSION}\n")


@pytest.mark.timeout(600)
def test_the_guide_runs_as_written(tmp_path: Path) -> None:
    codex = codex_binary()
    require_netns()
    blocks = guide_blocks(GUIDE)
    [script] = [body for kind, body in blocks if kind == "json"]
    json.loads(script)  # the guide's script is valid JSON
    (tmp_path / "codex-script.json").write_text(script, encoding="utf-8")
    [config] = [body for kind, body in blocks if kind == "toml"]
    home = tmp_path / "home"
    (home / ".codex").mkdir(parents=True)
    (home / ".codex" / "config.toml").write_text(config, encoding="utf-8")
    guide = guide_commands(blocks)
    assert len(guide.commands) == 3
    assert "supports_websockets=true" in guide.commands[2]
    log = run_guide(tmp_path, guide, codex, home)
    ends = [line for line in log.splitlines() if "request.end" in line]
    assert all("status=completed" in line for line in ends), log
    http = [line for line in ends if "transport=http" in line]
    sockets = [line for line in ends if "transport=ws" in line]
    # a plain answer, then the tool turn's two requests, each under Codex's thread id
    assert len(http) == 3, log
    assert all(re.search(r"cache_scope=[0-9a-f-]{36} ", line) for line in http), log
    assert log.count('"POST /v1/responses HTTP/1.1" 200') == 3, log
    # WebSocket mode: the warm-up (no output), then the tool turn's two responses
    assert len(sockets) == 3 and "completion_tokens=0 " in sockets[0], log
    assert re.search(r"responses.hosted_tools params=\['tools\.\d+ \(web_search\)'\]", log), log
    assert " 400" not in log and " 401" not in log and " 404" not in log, log
    assert "Traceback" not in log and "ERROR" not in log, log
