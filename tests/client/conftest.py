"""Fixtures of the client tests: a pexpect REPL with its own HOME, and the scripted server."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pexpect
import pytest

from tests.client.servers import ScriptedServer

REPO_ROOT = Path(__file__).resolve().parents[2]
TIMEOUT = 10


@pytest.fixture
def home(tmp_path: Path) -> Path:
    """The HOME of spawned REPLs, so their history file never lands in the real one."""
    path = tmp_path / "home"
    path.mkdir()
    return path


@pytest.fixture
def spawn(home: Path) -> Iterator[Callable[..., pexpect.spawn]]:
    children: list[pexpect.spawn] = []

    def start(*args: str, env: dict[str, str | None] | None = None) -> pexpect.spawn:
        full_env = {
            **os.environ,
            "NO_COLOR": "1",
            "TERM": "dumb",
            "PYTHONUNBUFFERED": "1",
            "HOME": str(home),
            **(env or {}),
        }
        env_vars = {k: v for k, v in full_env.items() if v is not None}
        child = pexpect.spawn(
            sys.executable,
            ["-m", "realtime.client", *args],
            cwd=str(REPO_ROOT),
            env=env_vars,
            encoding="utf-8",
            timeout=TIMEOUT,
            # Wide enough that no typed line wraps: the terminal echo stays one line.
            dimensions=(40, 5000),
        )
        children.append(child)
        return child

    yield start
    for child in children:
        if child.isalive():
            child.terminate(force=True)


@pytest.fixture
def scripted() -> Iterator[ScriptedServer]:
    server = ScriptedServer().start()
    yield server
    server.stop()
