"""The README's promises that a test can hold it to."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _commands(text: str) -> list[str]:
    return re.findall(r"```sh\n(.+?)\n```", text)


def test_ci_runs_the_readme_test_command_verbatim():
    readme_commands = _commands((ROOT / "README.md").read_text())
    assert len(readme_commands) == 2, "the README gives exactly two set-up commands"
    test_command = readme_commands[1]
    ci_lines = (ROOT / ".ci" / "run").read_text().splitlines()
    assert test_command in ci_lines


def test_readme_serve_command_uses_the_console_script_and_the_default_engine():
    serve_command = _commands((ROOT / "README.md").read_text())[0]
    assert serve_command.endswith(".venv/bin/realtime serve")
    pyproject = (ROOT / "pyproject.toml").read_text()
    assert 'realtime = "realtime.cli:main"' in pyproject


def test_documentation_links_resolve():
    for doc in [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]:
        for target in re.findall(r"\]\(([^)#:]+\.md)(?:#[^)]*)?\)", doc.read_text()):
            assert (doc.parent / target).resolve().exists(), f"{doc.name} links to missing {target}"


def test_every_cpu_install_step_passes_the_constraints_file():
    """`pip install '.[cpu]'` alone resolves the newest torch: CUDA, with GBs of nvidia-*."""
    from realtime.engine.install import CPU_INSTALL_HINT

    docs = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
    docs += sorted((ROOT / "clients").rglob("*.md"))
    steps = [
        line
        for doc in docs
        for line in doc.read_text().splitlines()
        if re.search(r"pip install .*\[[a-z,]*cpu", line)
    ]
    assert len(steps) >= 4  # README, quickstart, serve-a-model, the agent's README
    for step in steps:
        assert "-c constraints.txt" in step, step
    assert "-c constraints.txt" in CPU_INSTALL_HINT and "[cpu]" in CPU_INSTALL_HINT
    pins = (ROOT / "constraints.txt").read_text()
    assert re.search(r"^torch==\d+\.\d+\.\d+$", pins, re.M), "torch must be pinned exactly"
