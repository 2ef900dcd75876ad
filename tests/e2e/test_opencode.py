"""opencode, unmodified, against a real server: docs/howto/use-opencode.md, run.

The guide's own commands run as they are written, inside a network namespace
with only loopback (`agent_clis.py`): its script file, its two configuration files
(chat completions and the Responses API, neither with a model `limit`, so opencode
sends `max_tokens: 32000` to a 32k-context model and the clamp is what makes the
run work), its `realtime serve` command (started in the namespace, on the guide's
port 8000), and each of its opencode commands, whose output must be exactly what
the guide shows: a plain answer over chat completions, and a `bash` tool turn over
Responses (the call, opencode runs the command, the answer, which the script gives
only once the command's real output came back). The server's log must show each
request completed on its route, opencode's session header as its cache scope, and
no refusal.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests.e2e.agent_clis import (
    OPENCODE_VERSION,
    REPO_ROOT,
    guide_blocks,
    guide_commands,
    opencode_binary,
    require_netns,
    run_guide,
)

GUIDE = REPO_ROOT / "docs" / "howto" / "use-opencode.md"
#: The files the guide says to save its JSON blocks as, in order.
FILES = ("opencode-script.json", "opencode-chat.json", "opencode-responses.json")


def test_the_guide_pins_the_tested_version() -> None:
    assert guide_blocks(GUIDE)[0] == ("bash", f"npm install -g opencode-ai@{OPENCODE_VERSION}\n")


def test_the_guides_configurations_set_no_model_limit() -> None:
    text = GUIDE.read_text(encoding="utf-8")
    configs = [json.loads(body) for kind, body in guide_blocks(GUIDE) if kind == "json"][1:]
    assert [c["provider"]["realtime"]["npm"] for c in configs] == [
        "@ai-sdk/openai-compatible",
        "@ai-sdk/openai",
    ]
    for config in configs:
        for model in config["provider"]["realtime"]["models"].values():
            assert "limit" not in model
    for name in FILES:
        assert f"`{name}`" in text  # the guide names each file it asks you to save


@pytest.mark.timeout(600)
def test_the_guide_runs_as_written(tmp_path: Path) -> None:
    opencode = opencode_binary()
    require_netns()
    blocks = guide_blocks(GUIDE)
    files = [body for kind, body in blocks if kind == "json"]
    assert len(files) == len(FILES)
    for name, body in zip(FILES, files, strict=True):
        json.loads(body)
        (tmp_path / name).write_text(body, encoding="utf-8")
    guide = guide_commands(blocks)
    assert len(guide.commands) == 2
    home = tmp_path / "home"
    home.mkdir()
    log = run_guide(tmp_path, guide, opencode, home)
    ends = [line for line in log.splitlines() if "request.end" in line]
    chat = [line for line in ends if " id=chatcmpl-" in line]
    responses = [line for line in ends if " id=resp_" in line]
    # each run: at least the answer (the tool turn two requests), plus opencode's title
    assert len(chat) >= 1 and len(responses) >= 2, log
    assert len(chat) + len(responses) == len(ends), log
    assert all("status=completed" in line for line in ends), log
    assert all(re.search(r"cache_scope=ses_\w+ ", line) for line in ends), log
    assert '"POST /v1/chat/completions HTTP/1.1" 200' in log
    assert '"POST /v1/responses HTTP/1.1" 200' in log
    assert " 401" not in log and " 400" not in log and " 404" not in log, log
    assert "Traceback" not in log
