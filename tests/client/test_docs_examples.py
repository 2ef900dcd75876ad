"""The how-to's examples (docs/howto/python-client.md) run against a real server.

Each ```python block is a complete script. It runs with the server's URL in
place of the default one, and when a ```text block follows it, the script must
print exactly that. So the guide cannot drift from the library.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from realtime.client import DEFAULT_URL
from realtime.config import ServerConfig

REPO_ROOT = Path(__file__).resolve().parents[2]
GUIDE = REPO_ROOT / "docs" / "howto" / "python-client.md"
BLOCK = re.compile(r"```(python|text)\n(.*?)```", re.DOTALL)


def examples() -> list[tuple[str, str | None]]:
    """(script, expected output or None) for every python block that is a script."""
    blocks = BLOCK.findall(GUIDE.read_text())
    found = []
    for index, (kind, body) in enumerate(blocks):
        script = "asyncio.run(" in body or "with RealtimeClientSync" in body
        if kind != "python" or not script:
            continue  # a fragment, not a script
        following = blocks[index + 1] if index + 1 < len(blocks) else None
        found.append((body, following[1] if following and following[0] == "text" else None))
    return found


EXAMPLES = examples()


def test_the_guide_has_runnable_examples():
    assert len(EXAMPLES) >= 7
    assert all(expected is not None for _, expected in EXAMPLES)


@pytest.mark.parametrize("index", range(len(EXAMPLES)))
def test_example_prints_what_the_guide_shows(server_factory, index):
    server = server_factory(ServerConfig(echo_delay=0.01, log_level="warning"))
    script, expected = EXAMPLES[index]
    result = subprocess.run(
        [sys.executable, "-c", script.replace(DEFAULT_URL, server.ws_url)],
        capture_output=True,
        text=True,
        timeout=30,
        cwd=REPO_ROOT,
    )
    assert result.returncode == 0, result.stderr
    if expected is not None:
        assert result.stdout == expected
