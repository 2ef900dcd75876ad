"""`python -m realtime serve` as a user runs it: a separate process on a free port."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import urllib.request

import pytest

STARTUP_LINE = re.compile(
    r"realtime \S+: engine 'echo' serving model '(?P<model>[^']+)' on "
    r"http://127\.0\.0\.1:(?P<port>\d+)/v1 and ws://127\.0\.0\.1:(?P=port)/v1/realtime"
)


def _serve(*args: str) -> tuple[subprocess.Popen[str], re.Match[str]]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "realtime", "serve", "--port", "0", "--log-level", "warning", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    match = STARTUP_LINE.search(line)
    if match is None:
        proc.kill()
        pytest.fail(f"unexpected startup output: {line!r}")
    return proc, match


def test_serve_announces_engine_model_and_bound_port_and_stops_cleanly_on_sigterm():
    proc, match = _serve("--model-name", "my-echo")
    try:
        assert match["model"] == "my-echo"
        url = f"http://127.0.0.1:{match['port']}/v1/models"
        with urllib.request.urlopen(url, timeout=5) as response:
            models = json.load(response)
        assert [m["id"] for m in models["data"]] == ["my-echo"]
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=15) == 0


def test_serve_rejects_an_unknown_engine_with_the_valid_names():
    result = subprocess.run(
        [sys.executable, "-m", "realtime", "serve", "--engine", "nope"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert result.returncode == 2
    assert result.stderr == (
        "realtime: cannot load engine 'nope': no such engine; choose one of: cpu, echo,"
        " exllamav2, scripted, auto, or name a factory as package.module:factory\n"
    )


def test_serve_rejects_a_zero_queue_size():
    result = subprocess.run(
        [sys.executable, "-m", "realtime", "serve", "--queue-size", "0"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert result.returncode == 2 and "must be at least 1" in result.stderr


def test_serve_on_a_port_in_use_names_the_address_and_exits_4():
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = subprocess.run(
            [sys.executable, "-m", "realtime", "serve", "--port", str(port)],
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert result.returncode == 4
    assert result.stdout == ""
    lines = [line for line in result.stderr.splitlines() if not line.startswith("INFO")]
    assert lines == [
        f"realtime: cannot listen on 127.0.0.1:{port}: the address is already in use"
        " (another server listens there; pick another --port)"
    ]
    # Refused before anything started: no startup reported, no traceback, no ERROR line.
    assert "startup complete" not in result.stderr and "Traceback" not in result.stderr
    assert "ERROR" not in result.stderr


def test_listening_sockets_bind_every_address_of_the_host_on_one_port():
    from realtime.server import listening_sockets

    sockets = listening_sockets("localhost", 0)
    try:
        ports = {sock.getsockname()[1] for sock in sockets}
        assert len(ports) == 1 and 0 not in ports
        with pytest.raises(OSError):
            listening_sockets("127.0.0.1", ports.pop())
    finally:
        for sock in sockets:
            sock.close()
