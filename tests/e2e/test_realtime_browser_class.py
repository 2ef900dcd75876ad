"""OpenAI's Realtime browser class (the Node SDK's `OpenAIRealtimeWebSocket`), unmodified.

The class speaks as a browser's `WebSocket`: it offers the subprotocols `realtime`
and `openai-insecure-api-key.<key>` and fails a handshake that selects none of
them ("Server did not respond with sent protocols"). A small Node script
(`node/realtime_browser_class.cjs`, with the pinned `openai` package) opens
`/v1/realtime?model=echo` through it and gets a text response: from a server
without keys, and from one with keys, the key carried in the subprotocol; a wrong
key is refused. The key never reaches the server's log. The class builds only
`wss://` URLs, so the script puts TLS in front of the server (a certificate made
here with `openssl`), as a proxy in front of the server would.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from realtime.config import ServerConfig
from tests.conftest import RunningServer
from tests.e2e.agent_clis import openai_node_package, unavailable

SCRIPT = Path(__file__).parent / "node" / "realtime_browser_class.cjs"
KEY = "sk-browser-class-5e1f"


@pytest.fixture(scope="module")
def certificate(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A self-signed certificate for 127.0.0.1 and its key."""
    if shutil.which("openssl") is None:
        unavailable("openssl is missing (Debian's openssl)")
    folder = tmp_path_factory.mktemp("tls")
    cert, key = folder / "cert.pem", folder / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
         "-nodes", "-days", "1", "-subj", "/CN=127.0.0.1",
         "-addext", "subjectAltName=IP:127.0.0.1",
         "-keyout", str(key), "-out", str(cert)],
        check=True, capture_output=True, timeout=60,
    )  # fmt: skip
    return cert, key


def node_flags() -> list[str]:
    """Node 20 has the browser `WebSocket` behind a flag; from Node 22 it is global."""
    probe = subprocess.run(
        ["node", "-e", "process.exit(typeof WebSocket === 'function' ? 0 : 1)"],
        capture_output=True,
        timeout=60,
        check=False,
    )
    return [] if probe.returncode == 0 else ["--experimental-websocket"]


def run_class(server: RunningServer, key: str, certificate: tuple[Path, Path]) -> Any:
    package = openai_node_package()
    cert, tls_key = certificate
    env = {
        **os.environ,
        "NODE_PATH": str(package.parent),
        "NODE_EXTRA_CA_CERTS": str(cert),
        "NODE_NO_WARNINGS": "1",
    }
    return subprocess.run(
        ["node", *node_flags(), str(SCRIPT), str(server.port), key, str(cert), str(tls_key)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_a_text_response_without_keys(server_factory: Any, certificate: tuple[Path, Path]) -> None:
    server = server_factory(ServerConfig(log_level="info"))
    run = run_class(server, "unused", certificate)
    assert run.returncode == 0, (run.stdout, run.stderr)
    answer = json.loads(run.stdout)
    assert answer == {
        "text": "hello from the browser class",
        "status": "completed",
        "protocol": "realtime",
    }


def test_a_text_response_with_the_key_in_the_subprotocol(
    server_factory: Any, certificate: tuple[Path, Path], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    server = server_factory(ServerConfig(api_keys=(KEY,), log_level="debug"))
    run = run_class(server, KEY, certificate)
    assert run.returncode == 0, (run.stdout, run.stderr)
    assert json.loads(run.stdout)["text"] == "hello from the browser class"
    wrong = run_class(server, "sk-wrong-browser-key", certificate)
    assert wrong.returncode == 1
    assert "sk-wrong-browser-key" not in wrong.stderr
    logged = "\n".join(f"{r.getMessage()} {getattr(r, 'fields', '')}" for r in caplog.records)
    assert "access.refused" in logged
    assert KEY not in logged and "sk-wrong-browser-key" not in logged
