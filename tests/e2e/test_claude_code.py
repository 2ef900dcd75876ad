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
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.e2e.agent_clis import CLAUDE_CODE_VERSION, REPO_ROOT, claude_binary, require_netns

GUIDE = REPO_ROOT / "docs" / "howto" / "use-claude-code.md"
BLOCK = re.compile(r"```(bash|json|text|sh)\n(.*?)```", re.DOTALL)


def guide_blocks() -> list[tuple[str, str]]:
    return BLOCK.findall(GUIDE.read_text(encoding="utf-8"))


def test_the_guide_pins_the_tested_version() -> None:
    install = guide_blocks()[0]
    assert install == (
        "bash",
        f"npm install -g @anthropic-ai/claude-code@{CLAUDE_CODE_VERSION}\n",
    )


@pytest.mark.timeout(600)
def test_the_guide_runs_as_written(tmp_path: Path) -> None:
    claude = claude_binary()
    require_netns()
    blocks = guide_blocks()
    [script] = [body for kind, body in blocks if kind == "json"]
    json.loads(script)  # the guide's script is valid JSON
    (tmp_path / "claude-script.json").write_text(script, encoding="utf-8")
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
    home = tmp_path / "home"
    home.mkdir()
    env = {
        "PATH": os.pathsep.join(
            [str(Path(sys.executable).parent), str(Path(claude).parent), os.environ["PATH"]]
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
    # three answers and the tool turn's second request, each completed
    assert len(ends) >= 4 and all("status=completed" in line for line in ends), log
    assert all(re.search(r"cache_scope=[0-9a-f-]{36} ", line) for line in ends), log
    assert '"POST /v1/messages?beta=true HTTP/1.1" 200' in log
    assert " 401" not in log and " 400" not in log and " 404" not in log, log
    assert "Traceback" not in log


#: Polls /ready on the guide's port until the server answers (inside the namespace).
WAIT_READY = (
    "import time, urllib.request\n"
    "for _ in range(300):\n"
    "    try:\n"
    '        urllib.request.urlopen("http://127.0.0.1:8000/ready"); break\n'
    "    except OSError:\n"
    "        time.sleep(0.1)\n"
    "else:\n"
    "    raise SystemExit(1)\n"
)
