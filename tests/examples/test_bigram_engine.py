"""examples/bigram-engine: an engine packaged outside realtime, served through the plug-in path.

The example is pip-installed (from a copy, offline, without build isolation) into a
temporary directory; servers and its own test suite run in subprocesses with that
directory on PYTHONPATH, so the entry point is found the way an installed
distribution's is. The openai SDK drives the served engine.
"""

from __future__ import annotations

import os
import select
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import openai
import pytest

from tests.conftest import SERVE_STARTUP_LINE, ServerProcess

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "bigram-engine"


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The example installed with pip into a directory of its own (its dist-info included)."""
    work = tmp_path_factory.mktemp("bigram")
    source = work / "source"
    shutil.copytree(EXAMPLE, source, ignore=shutil.ignore_patterns("build", "*.egg-info"))
    target = work / "site"
    subprocess.run(
        [
            sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-index",
            "--no-build-isolation", "--target", str(target), str(source),
        ],
        check=True,
        capture_output=True,
        timeout=300,
    )  # fmt: skip
    assert list(target.glob("realtime_bigram-*.dist-info/entry_points.txt"))
    return target


def env_with(path: Path) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(path)}


def spawn(*args: str, path: Path, tmp_path: Path) -> tuple[ServerProcess, str]:
    """`realtime serve --port 0 ARGS` with `path` on PYTHONPATH; the server and its startup line."""
    stderr_path = tmp_path / f"stderr-{time.monotonic_ns()}.log"
    with open(stderr_path, "w", encoding="utf-8") as stderr:
        proc = subprocess.Popen(
            [sys.executable, "-m", "realtime", "serve", "--port", "0", *args],
            stdout=subprocess.PIPE,
            stderr=stderr,
            text=True,
            cwd=str(ROOT),
            env=env_with(path),
        )
    assert proc.stdout is not None
    ready, _, _ = select.select([proc.stdout], [], [], 60)
    line = proc.stdout.readline() if ready else ""
    match = SERVE_STARTUP_LINE.search(line)
    if match is None:
        proc.kill()
        proc.wait()
        raise RuntimeError(f"server did not start: {line!r}\n{stderr_path.read_text()}")
    return ServerProcess(proc, int(match["port"]), str(stderr_path)), line


@pytest.fixture
def servers() -> Iterator[list[ServerProcess]]:
    started: list[ServerProcess] = []
    yield started
    for server in started:
        if server.proc.poll() is None:
            server.proc.kill()
            server.proc.wait()


def test_the_entry_point_adds_the_engine_name(installed: Path) -> None:
    code = "from realtime import engine_names; print(engine_names())"
    out = subprocess.run(
        [sys.executable, "-c", code], env=env_with(installed), capture_output=True, text=True
    )
    assert out.stdout.strip() == "['bigram', 'cpu', 'echo', 'exllamav2', 'scripted']"


def test_served_by_its_entry_point_name_to_the_openai_sdk(
    installed: Path, servers: list[ServerProcess], tmp_path: Path
) -> None:
    server, line = spawn(
        "--engine", "bigram", "--model-name", "bigram-demo", path=installed, tmp_path=tmp_path
    )  # fmt: skip
    servers.append(server)
    assert "engine 'bigram' serving model 'bigram-demo'" in line
    client = openai.OpenAI(base_url=server.http_url + "/v1", api_key="unused", max_retries=0)
    assert [m.id for m in client.models.list()] == ["bigram-demo"]
    stream = client.chat.completions.create(
        model="bigram-demo",
        messages=[{"role": "user", "content": "Tell me about the weather."}],
        stream=True,
        max_tokens=40,
        temperature=0.8,
        seed=7,
        logprobs=True,
        top_logprobs=2,
    )
    pieces, finish, logprobs = [], None, 0
    for chunk in stream:
        for choice in chunk.choices:
            pieces.append(choice.delta.content or "")
            finish = choice.finish_reason or finish
            logprobs += len(choice.logprobs.content or []) if choice.logprobs else 0
    text = "".join(pieces)
    assert text and finish in ("stop", "length")
    assert logprobs == len(text) or finish == "stop"  # one character per token
    assert server.stop() == 0


def test_served_by_module_path_with_engine_options(
    servers: list[ServerProcess], tmp_path: Path
) -> None:
    """From a checkout, without installing: `package.module:factory` and `--engine-option`."""
    server, line = spawn(
        "--engine", "realtime_bigram:BigramEngine", "--engine-option", "context_length=64",
        path=EXAMPLE, tmp_path=tmp_path,
    )  # fmt: skip
    servers.append(server)
    assert "engine 'realtime_bigram:BigramEngine' serving model 'bigram'" in line
    client = openai.OpenAI(base_url=server.http_url + "/v1", api_key="unused", max_retries=0)
    answer = client.chat.completions.create(
        model="bigram", messages=[{"role": "user", "content": "hi"}], max_tokens=5
    )
    assert answer.choices[0].finish_reason in ("stop", "length")
    assert answer.usage is not None and answer.usage.completion_tokens <= 5
    with pytest.raises(openai.BadRequestError) as refused:  # the 64-token context it was given
        client.chat.completions.create(
            model="bigram", messages=[{"role": "user", "content": "x" * 100}], max_tokens=5
        )
    assert refused.value.code == "context_length_exceeded"
    assert httpx.get(server.http_url + "/health", timeout=5).status_code == 200


def test_the_example_passes_the_kit_in_its_own_suite(installed: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(EXAMPLE)],
        env=env_with(installed),
        cwd=str(EXAMPLE),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "11 passed" in result.stdout
