"""Agent CLIs (Claude Code, Codex CLI, opencode) and the Node SDK for the end-to-end
tests: where they are, a sandbox, and a how-to guide's commands run in it.

`scripts/test` installs each CLI at a pinned version from npm into
`.venv/agents` and sets REALTIME_REQUIRE_AGENTS=1, which turns a missing CLI (or
a machine that cannot make a network namespace) into a failure instead of a skip,
so a broken install cannot pass silently (as REALTIME_REQUIRE_BROWSER does for
Chromium). REALTIME_CLAUDE, REALTIME_CODEX and REALTIME_OPENCODE name other
binaries.

Every CLI runs inside a network namespace of its own with only loopback
(`unshare -n`, then `ip link set lo up`), with the server started inside the same
namespace: whatever the CLI tries to reach outside, it cannot, so the test proves
it needs nothing but the server.

`run_guide` runs a how-to guide as a reader would: its `realtime serve` command in
the background, then each command in one shell (so what one command exports, the
next sees), and checks each exits 0 and prints exactly the output the guide shows
after it.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
#: Where scripts/test installs the agent CLIs (npm --prefix).
AGENTS_PREFIX = REPO_ROOT / ".venv" / "agents"
CLAUDE_CODE_VERSION = "2.1.332"
CODEX_VERSION = "0.171.0"
OPENCODE_VERSION = "1.18.33"
#: The `openai` npm package (its `OpenAIRealtimeWebSocket`), for the Node client test.
OPENAI_NODE_VERSION = "7.57.0"


def unavailable(reason: str) -> None:
    if os.environ.get("REALTIME_REQUIRE_AGENTS") == "1":
        pytest.fail(f"agent CLI tests required but {reason}")
    pytest.skip(reason)


def claude_binary() -> str:
    """The Claude Code binary at the pinned version (else skip, or fail when required)."""
    found = os.environ.get("REALTIME_CLAUDE") or _installed("claude") or shutil.which("claude")
    if found is None:
        unavailable(
            f"Claude Code is not installed (npm install --prefix .venv/agents"
            f" @anthropic-ai/claude-code@{CLAUDE_CODE_VERSION}; scripts/test does it)"
        )
    assert found is not None
    version = subprocess.run(
        [found, "--version"], capture_output=True, text=True, timeout=60, check=False
    ).stdout.strip()
    if not version.startswith(CLAUDE_CODE_VERSION + " "):
        unavailable(f"Claude Code is {version!r}, the tests pin {CLAUDE_CODE_VERSION}")
    return found


def codex_binary() -> str:
    """The Codex CLI binary at the pinned version (else skip, or fail when required)."""
    found = os.environ.get("REALTIME_CODEX") or _installed("codex") or shutil.which("codex")
    if found is None:
        unavailable(
            f"Codex CLI is not installed (npm install --prefix .venv/agents"
            f" @openai/codex@{CODEX_VERSION}; scripts/test does it)"
        )
    assert found is not None
    version = subprocess.run(
        [found, "--version"], capture_output=True, text=True, timeout=60, check=False
    ).stdout.strip()
    if version != f"codex-cli {CODEX_VERSION}":
        unavailable(f"Codex CLI is {version!r}, the tests pin {CODEX_VERSION}")
    return found


def opencode_binary() -> str:
    """The opencode binary at the pinned version (else skip, or fail when required)."""
    found = os.environ.get("REALTIME_OPENCODE") or _installed("opencode")
    if found is None:
        unavailable(
            f"opencode is not installed (npm install --prefix .venv/agents"
            f" opencode-ai@{OPENCODE_VERSION}; scripts/test does it)"
        )
    assert found is not None
    version = subprocess.run(
        [found, "--version"], capture_output=True, text=True, timeout=60, check=False
    ).stdout.strip()
    if version != OPENCODE_VERSION:
        unavailable(f"opencode is {version!r}, the tests pin {OPENCODE_VERSION}")
    return found


def openai_node_package() -> Path:
    """The `openai` npm package's directory at the pinned version, and `node` to run it."""
    if shutil.which("node") is None:
        unavailable("node is not installed (Debian's nodejs; scripts/test installs it)")
    package = AGENTS_PREFIX / "node_modules" / "openai"
    manifest = package / "package.json"
    if not manifest.exists():
        unavailable(
            f"the openai npm package is not installed (npm install --prefix .venv/agents"
            f" openai@{OPENAI_NODE_VERSION}; scripts/test does it)"
        )
    version = json.loads(manifest.read_text(encoding="utf-8")).get("version")
    if version != OPENAI_NODE_VERSION:
        unavailable(f"the openai npm package is {version!r}, the tests pin {OPENAI_NODE_VERSION}")
    return package


def require_netns() -> None:
    """`unshare -n` and `ip` must work here (root, or user namespaces)."""
    if shutil.which("unshare") is None or shutil.which("ip") is None:
        unavailable("unshare or ip is missing (util-linux, iproute2)")
    probe = subprocess.run(
        ["unshare", "-n", "ip", "link", "set", "lo", "up"],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    if probe.returncode != 0:
        unavailable(f"cannot make a network namespace: {probe.stderr.strip()}")


def _installed(name: str) -> str | None:
    path = AGENTS_PREFIX / "node_modules" / ".bin" / name
    return str(path) if path.exists() else None


#: A fenced block of a guide: its language and its text.
BLOCK = re.compile(r"```(bash|json|text|toml|sh)\n(.*?)```", re.DOTALL)

#: Polls /ready on the guides' port until the server answers (inside the namespace).
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


def guide_blocks(guide: Path) -> list[tuple[str, str]]:
    return BLOCK.findall(guide.read_text(encoding="utf-8"))


@dataclass(frozen=True)
class GuideCommands:
    """A guide's commands after its install block: the serve command, then the rest, each
    with the output the guide shows below it."""

    serve: str
    commands: list[str]
    shown: list[str]


def guide_commands(blocks: list[tuple[str, str]]) -> GuideCommands:
    bash = [body for kind, body in blocks if kind == "bash"][1:]  # after the install
    serve, commands = bash[0], bash[1:]
    assert serve.startswith("realtime serve ")
    shown = []
    for index, (kind, body) in enumerate(blocks):
        if kind == "bash" and body in commands:
            following = blocks[index + 1]
            assert following[0] == "text", "each command is followed by its output"
            shown.append(following[1])
    assert len(shown) == len(commands)
    return GuideCommands(serve, commands, shown)


def run_guide(workdir: Path, guide: GuideCommands, binary: str, home: Path) -> str:
    """Run the guide's commands in `workdir`, inside a namespace with only loopback, with
    `binary`'s folder on PATH and `home` as HOME; assert each command's exit status and
    output; return the server's log."""
    lines = [
        "set -u",
        "ip link set lo up",
        f"{guide.serve.strip()} > server.log 2>&1 &",
        "server=$!",
        "trap 'kill $server; wait $server' EXIT",
        f"{sys.executable} -c '{WAIT_READY}' || exit 3",
    ]
    for number, command in enumerate(guide.commands):
        lines.append(f"{{\n{command}}} > out{number}.txt 2> err{number}.txt")
        lines.append(f"echo $? > rc{number}.txt")
    (workdir / "run.sh").write_text("\n".join(lines) + "\n", encoding="utf-8")
    env = {
        "PATH": os.pathsep.join(
            [str(Path(sys.executable).parent), str(Path(binary).parent), os.environ["PATH"]]
        ),
        "HOME": str(home),
        "LANG": "C.UTF-8",
    }
    run = subprocess.run(
        ["unshare", "-n", "bash", "run.sh"],
        cwd=workdir,
        env=env,
        capture_output=True,
        text=True,
        timeout=540,
        check=False,
    )
    log = (workdir / "server.log").read_text(encoding="utf-8", errors="replace")
    assert run.returncode == 0, (run.stdout, run.stderr, log)
    for number, expected in enumerate(guide.shown):
        out = (workdir / f"out{number}.txt").read_text(encoding="utf-8")
        err = (workdir / f"err{number}.txt").read_text(encoding="utf-8")
        rc = (workdir / f"rc{number}.txt").read_text(encoding="utf-8").strip()
        assert (rc, out) == ("0", expected), (guide.commands[number], err, log)
    return log
