"""Agent CLIs (Claude Code, opencode) and the Node SDK for the end-to-end tests: where
they are, and a sandbox.

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
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
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
