"""docs/howto/responses-api.md: every example runs against a real server and prints
exactly what the guide shows, so the guide cannot drift from the server."""

from __future__ import annotations

import importlib.util
import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from realtime.config import ServerConfig
from realtime.engine.scripted import ScriptedEngine

REPO_ROOT = Path(__file__).resolve().parents[2]
GUIDE = REPO_ROOT / "docs" / "howto" / "responses-api.md"
BLOCK = re.compile(r"```(python|text|json|bash)\n(.*?)```", re.DOTALL)
URL = "http://127.0.0.1:8000/v1"


def blocks() -> list[tuple[str, str]]:
    return BLOCK.findall(GUIDE.read_text(encoding="utf-8"))


def examples() -> list[tuple[str, str]]:
    """(script, the output the guide shows) for every python block."""
    found = []
    every = blocks()
    for index, (kind, body) in enumerate(every):
        if kind == "python":
            following = every[index + 1]
            assert following[0] == "text", f"example {index} has no output shown"
            found.append((body, following[1]))
    return found


def script() -> list[Any]:
    [body] = [body for kind, body in blocks() if kind == "json"]
    loaded: list[Any] = json.loads(body)
    return loaded


EXAMPLES = examples()


def test_the_guide_has_its_examples() -> None:
    assert len(EXAMPLES) == 8
    assert all(URL in example for example, _ in EXAMPLES)


@pytest.mark.parametrize("index", range(len(EXAMPLES)))
def test_example_prints_what_the_guide_shows(server_factory: Any, index: int) -> None:
    example, expected = EXAMPLES[index]
    if "from agents import" in example and importlib.util.find_spec("agents") is None:
        pytest.skip("the OpenAI Agents SDK is not installed (scripts/test installs it)")
    if 'model="scripted"' in example:
        config = ServerConfig(log_level="warning", tool_parser="hermes")
        server = server_factory(config, ScriptedEngine(script()))
    else:
        server = server_factory(ServerConfig(echo_delay=0.01, log_level="warning"))
    result = subprocess.run(
        [sys.executable, "-c", example.replace(URL, server.http_url + "/v1")],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=REPO_ROOT,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout == expected
