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
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.e2e.agent_clis import CODEX_VERSION, REPO_ROOT, codex_binary, require_netns
from tests.e2e.test_claude_code import WAIT_READY

GUIDE = REPO_ROOT / "docs" / "howto" / "use-codex-cli.md"
BLOCK = re.compile(r"```(bash|json|text|toml|sh)\n(.*?)```", re.DOTALL)


def guide_blocks() -> list[tuple[str, str]]:
    return BLOCK.findall(GUIDE.read_text(encoding="utf-8"))


def test_the_guide_pins_the_tested_version() -> None:
    install = guide_blocks()[0]
    assert install == ("bash", f"npm install -g @openai/codex@{CODEX_VERSION}\n")


@pytest.mark.timeout(600)
def test_the_guide_runs_as_written(tmp_path: Path) -> None:
    codex = codex_binary()
    require_netns()
    blocks = guide_blocks()
    [script] = [body for kind, body in blocks if kind == "json"]
    json.loads(script)  # the guide's script is valid JSON
    (tmp_path / "codex-script.json").write_text(script, encoding="utf-8")
    [config] = [body for kind, body in blocks if kind == "toml"]
    home = tmp_path / "home"
    (home / ".codex").mkdir(parents=True)
    (home / ".codex" / "config.toml").write_text(config, encoding="utf-8")
    bash = [body for kind, body in blocks if kind == "bash"][1:]  # after the install
    serve, commands = bash[0], bash[1:]
    assert serve.startswith("realtime serve ")
    shown = []
    for index, (kind, body) in enumerate(blocks):
        if kind == "bash" and body in commands:
            following = blocks[index + 1]
            assert following[0] == "text", "each command is followed by its output"
            shown.append(following[1])
    assert len(shown) == len(commands) == 3
    assert "supports_websockets=true" in commands[2]

    lines = [
        "set -u",
        "ip link set lo up",
        f"{serve.strip()} > server.log 2>&1 &",
        "server=$!",
        "trap 'kill $server; wait $server' EXIT",
        f"{sys.executable} -c '{WAIT_READY}' || exit 3",
    ]
    for number, command in enumerate(commands):
        lines.append(f"{{\n{command}}} > out{number}.txt 2> err{number}.txt")
        lines.append(f"echo $? > rc{number}.txt")
    (tmp_path / "run.sh").write_text("\n".join(lines) + "\n", encoding="utf-8")
    env = {
        "PATH": os.pathsep.join(
            [str(Path(sys.executable).parent), str(Path(codex).parent), os.environ["PATH"]]
        ),
        "HOME": str(home),
        "LANG": "C.UTF-8",
    }
    run = subprocess.run(
        ["unshare", "-n", "bash", "run.sh"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=540,
        check=False,
    )
    log = (tmp_path / "server.log").read_text(encoding="utf-8", errors="replace")
    assert run.returncode == 0, (run.stdout, run.stderr, log)
    for number, expected in enumerate(shown):
        out = (tmp_path / f"out{number}.txt").read_text(encoding="utf-8")
        err = (tmp_path / f"err{number}.txt").read_text(encoding="utf-8")
        rc = (tmp_path / f"rc{number}.txt").read_text(encoding="utf-8").strip()
        assert (rc, out) == ("0", expected), (commands[number], err, log)
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
