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
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.e2e.agent_clis import OPENCODE_VERSION, REPO_ROOT, opencode_binary, require_netns
from tests.e2e.test_claude_code import WAIT_READY

GUIDE = REPO_ROOT / "docs" / "howto" / "use-opencode.md"
BLOCK = re.compile(r"```(bash|json|text|sh)\n(.*?)```", re.DOTALL)
#: The files the guide says to save its JSON blocks as, in order.
FILES = ("opencode-script.json", "opencode-chat.json", "opencode-responses.json")


def guide_blocks() -> list[tuple[str, str]]:
    return BLOCK.findall(GUIDE.read_text(encoding="utf-8"))


def test_the_guide_pins_the_tested_version() -> None:
    assert guide_blocks()[0] == ("bash", f"npm install -g opencode-ai@{OPENCODE_VERSION}\n")


def test_the_guides_configurations_set_no_model_limit() -> None:
    text = GUIDE.read_text(encoding="utf-8")
    configs = [json.loads(body) for kind, body in guide_blocks() if kind == "json"][1:]
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
    blocks = guide_blocks()
    files = [body for kind, body in blocks if kind == "json"]
    assert len(files) == len(FILES)
    for name, body in zip(FILES, files, strict=True):
        json.loads(body)
        (tmp_path / name).write_text(body, encoding="utf-8")
    bash = [body for kind, body in blocks if kind == "bash"][1:]  # after the install
    serve, commands = bash[0], bash[1:]
    assert serve.startswith("realtime serve ")
    shown = []
    for index, (kind, body) in enumerate(blocks):
        if kind == "bash" and body in commands:
            following = blocks[index + 1]
            assert following[0] == "text", "each command is followed by its output"
            shown.append(following[1])
    assert len(shown) == len(commands) == 2

    lines = [
        "set -u",
        "ip link set lo up",
        f"{serve.strip()} > server.log 2>&1 &",
        "server=$!",
        "trap 'kill $server; wait $server' EXIT",
        f"{sys.executable} -c '{WAIT_READY}' || exit 3",
    ]
    for number, command in enumerate(commands):
        lines.append(f"(\n{command}) > out{number}.txt 2> err{number}.txt")
        lines.append(f"echo $? > rc{number}.txt")
    (tmp_path / "run.sh").write_text("\n".join(lines) + "\n", encoding="utf-8")
    home = tmp_path / "home"
    home.mkdir()
    env = {
        "PATH": os.pathsep.join(
            [str(Path(sys.executable).parent), str(Path(opencode).parent), os.environ["PATH"]]
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
