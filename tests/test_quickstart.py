"""The README and the quick start followed as a new user follows them.

The server is started with the commands the docs show, through the installed
`realtime` entry point, in an empty directory; the only change is `--port 0`, and
the port it printed is read back as the docs' 8000 (process ids as `[PID]`). What
it prints at startup and at Ctrl-C must be the lines the docs show, and the
examples the quick start runs against it (curl, the openai SDK, a WebSocket
script, the tiny model) must print what it shows. So the docs cannot drift from a
real run.
"""

from __future__ import annotations

import json
import queue
import re
import shlex
import signal
import subprocess
import sys
import threading
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()
QUICKSTART = (ROOT / "docs" / "quickstart.md").read_text()
BLOCK = re.compile(r"```(\w*)\n(.*?)```", re.DOTALL)
#: The console script `pip install -e .` puts beside the interpreter.
REALTIME = Path(sys.executable).with_name("realtime")
DOC_PORT = 8000
STARTED = re.compile(r"^realtime \S+: engine .* on http://127\.0\.0\.1:(\d+)/v1 and ")


def section(heading: str) -> str:
    """The quick start's text under `heading`, up to the next heading of that level."""
    level = heading.split(" ", 1)[0]
    start = QUICKSTART.index(f"\n{heading}\n")
    end = QUICKSTART.find(f"\n{level} ", start + 1)
    return QUICKSTART[start : end if end != -1 else None]


def blocks(text: str, kind: str) -> list[str]:
    return [body for block_kind, body in BLOCK.findall(text) if block_kind == kind]


def block_after(text: str, marker: str) -> str:
    """The first fenced block after `marker`."""
    return BLOCK.findall(text[text.index(marker) :])[0][1]


class Terminal:
    """A command's stdout and stderr, merged and read line by line as a terminal shows them."""

    def __init__(self, argv: list[str], cwd: Path):
        self.proc = subprocess.Popen(
            argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=cwd
        )
        self._lines: queue.Queue[str | None] = queue.Queue()
        self.port = 0
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self._lines.put(line.rstrip("\n"))
        self._lines.put(None)

    def until(self, done: Callable[[str], bool], timeout: float = 120) -> list[str]:
        """The lines up to and including the first that is `done`; all of them at the end."""
        seen: list[str] = []
        while True:
            line = self._lines.get(timeout=timeout)
            if line is None:
                return seen
            seen.append(line)
            if done(line):
                return seen

    def started(self) -> list[str]:
        """The startup output, up to the line that names the address."""
        lines = self.until(lambda line: STARTED.match(line) is not None)
        match = STARTED.match(lines[-1]) if lines else None
        assert match is not None, "\n".join(lines)
        self.port = int(match[1])
        return [self.as_documented(line) for line in lines]

    def stopped(self, sig: int) -> list[str]:
        self.proc.send_signal(sig)
        lines = self.until(lambda line: False)
        assert self.proc.wait(timeout=30) == 0, "\n".join(lines)
        return [self.as_documented(line) for line in lines]

    def as_documented(self, text: str) -> str:
        text = text.replace(f"127.0.0.1:{self.port}", f"127.0.0.1:{DOC_PORT}")
        return re.sub(r"process \[\d+\]", "process [PID]", text)

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


@pytest.fixture
def terminal(tmp_path: Path) -> Iterator[Callable[[str], Terminal]]:
    opened: list[Terminal] = []

    def run(command: str) -> Terminal:
        """A documented `realtime serve ...` command, in an empty directory, on a free port."""
        argv = shlex.split(command)
        assert Path(argv[0]).name == "realtime" and argv[1] == "serve", command
        opened.append(Terminal([str(REALTIME), *argv[1:], "--port", "0"], tmp_path))
        return opened[-1]

    assert REALTIME.exists(), "the `realtime` entry point is installed with the package"
    yield run
    for started in opened:
        started.kill()


def documented(lines: str) -> list[str]:
    return [re.sub(r"process \[\d+\]", "process [PID]", line) for line in lines.splitlines()]


def get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=30) as response:
        return str(response.read().decode())


def post(url: str, body: dict[str, Any]) -> str:
    request = urllib.request.Request(
        url, json.dumps(body).encode(), {"content-type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=60) as response:
        return str(response.read().decode())


def without_ids(text: str) -> str:
    text = re.sub(r'"id":"chatcmpl-[0-9a-f]+"', '"id":"chatcmpl-ID"', text)
    text = re.sub(r'"created":\d+', '"created":0', text)
    return re.sub(r'"system_fingerprint":"fp_[0-9a-f]+"', '"system_fingerprint":"fp_X"', text)


def run_script(script: str, port: int, cwd: Path) -> str:
    script = script.replace(f"127.0.0.1:{DOC_PORT}", f"127.0.0.1:{port}")
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, cwd=cwd
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


def expected_output(transcript: str) -> str:
    """A ```text block that shows `$ command` and then its output: the output."""
    lines = transcript.splitlines(keepends=True)
    assert lines[0].startswith("$ ")
    return "".join(lines[1:])


def test_the_readme_serve_command_starts_the_server_the_quick_start_shows(terminal, tmp_path):
    serve = blocks(README, "sh")[0].strip().split(" && ")[-1]  # after the venv and install
    assert serve == ".venv/bin/realtime serve"
    shown = documented(block_after(section("## 2. Start the server"), "Once it listens"))
    server = terminal(serve)
    assert server.started() == shown
    page = get(server.url("/"))  # "the chat page is at `/`"
    assert page.lstrip().lower().startswith("<!doctype html>")
    server.stopped(signal.SIGTERM)
    assert list(tmp_path.iterdir()) == []  # stored responses in memory: nothing on disk


def test_the_quick_start_against_a_real_server(terminal, tmp_path):
    start = section("## 2. Start the server")
    (command,) = blocks(start, "sh")
    server = terminal(command.strip())
    assert server.started() == documented(block_after(start, "Once it listens"))

    # "Check that it answers"
    health = block_after(start, "Check that it answers")
    assert health.startswith("$ curl -s localhost:8000/health\n")
    assert get(server.url("/health")) + "\n" == expected_output(health)

    # 4. plain HTTP: the curl request and its answer, ids aside
    http = blocks(section("## 4. Use plain HTTP"), "text")[0]
    body = json.loads(re.search(r"-d '(.*?)'\n", http, re.DOTALL)[1])  # type: ignore[index]
    answer = post(server.url("/v1/chat/completions"), body)
    assert without_ids(answer) == without_ids(http.splitlines()[-1])

    # 5. and 6.: the two scripts print what the guide shows
    for heading in ("## 5. Use the openai SDK", "## 6. Use the WebSocket directly"):
        text = section(heading)
        (script,) = blocks(text, "python")
        shown = expected_output(blocks(text, "text")[0])
        assert run_script(script, server.port, tmp_path) == shown, heading

    # 7. Ctrl-C: the drain and uvicorn's shutdown, as the last lines printed
    shutdown = documented(blocks(section("## 7. Stop the server"), "text")[0])
    assert server.stopped(signal.SIGINT)[-len(shutdown) :] == shutdown


def test_the_quick_start_tiny_model_and_its_thinking(terminal, tmp_path):
    pytest.importorskip("transformers")
    model = section("## 8. Serve a real model")
    write, serve, models = blocks(model, "text")[:3]

    # `python -m realtime.testing.tiny_model tiny-model`, then `ls -1 tiny-model`
    command, listing = write.split("$ ")[1:]
    assert command.startswith("python -m realtime.testing.tiny_model tiny-model\n")
    argv = [sys.executable, *shlex.split(command.splitlines()[0])[1:]]
    made = subprocess.run(argv, capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert made.returncode == 0, made.stderr
    assert made.stdout == "".join(command.splitlines(keepends=True)[1:])
    assert listing.startswith("ls -1 tiny-model\n")
    assert sorted(p.name for p in (tmp_path / "tiny-model").iterdir()) == listing.split()[3:]

    # Serving it: the doc elides the first lines ("…") and shows the last ones.
    shown = serve.splitlines()
    assert shown[0].startswith("$ realtime serve") and shown[1] == "…"
    server = terminal(shown[0].removeprefix("$ "))
    assert server.started()[-len(shown[2:]) :] == documented("\n".join(shown[2:]))
    assert get(server.url("/v1/models")) + "\n" == expected_output(models)

    # The tiny model thinks: a sampled answer that is all thinking, then thinking off.
    thinks = section("### The tiny model thinks")
    (curl,) = blocks(thinks, "sh")
    body = json.loads(re.search(r"-d '(.*?)'", curl, re.DOTALL)[1])  # type: ignore[index]
    thinking, not_thinking = (text.strip().strip("…") for text in blocks(thinks, "text"))
    assert '"content":""' in thinking and '"finish_reason":"length"' in thinking
    assert thinking in post(server.url("/v1/chat/completions"), body)
    body["chat_template_kwargs"] = {"enable_thinking": False}
    assert '"finish_reason":"stop"' in not_thinking
    assert not_thinking in post(server.url("/v1/chat/completions"), body)
    server.stopped(signal.SIGTERM)
