"""Large client JSON is decoded in the decode process, through a real server.

What is checked: a large body or frame (at least `DECODE_PROCESS_BYTES`) gets the
same answer as before (served, or refused with the same error naming the same
field and `request_id`), the decoding ran in a process of the server's own (its
PID is a child of the server's), and the decode process dying costs no request:
the next large input is decoded in a thread and the one after starts a new one.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed

from realtime.pipeline.json_process import DECODE_PROCESS_BYTES
from tests.conftest import async_wait_until
from tests.ws.wsclient import collect_until_terminal, text_of

pytestmark = pytest.mark.anyio

#: Zeros enough to pass the default --max-json-values (131,072) and the decode threshold.
ZEROS = 200_000


def _wide_body(request_id: str | None = None) -> str:
    body: dict[str, object] = {
        "model": "echo",
        "messages": [{"role": "user", "content": "x", "zeros": [0] * ZEROS}],
    }
    if request_id is not None:
        body["request_id"] = request_id
    text = json.dumps(body, separators=(",", ":"))
    assert len(text) >= DECODE_PROCESS_BYTES
    return text


def _long_message(chars: int) -> str:
    """Long in characters, short in the echo engine's tokens (its context is 32k)."""
    word = "w" * 63 + " "
    return word * (chars // len(word))


def _decode_processes(server_pid: int) -> list[int]:
    """Children of the server running multiprocessing's spawn entry point."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        parent = int(stat.rsplit(")", 1)[1].split()[1])
        if parent == server_pid and b"spawn_main" in cmdline:
            found.append(int(entry.name))
    return found


async def test_large_bodies_are_decoded_in_a_child_process_with_the_same_answers(serve_process):
    server = serve_process("--log-level", "info")
    async with httpx.AsyncClient(base_url=server.http_url, timeout=60) as client:
        url = "/v1/chat/completions"
        headers = {"content-type": "application/json"}
        wide = await client.post(url, content=_wide_body(), headers=headers)
        assert wide.status_code == 400, wide.text
        error = wide.json()["error"]
        assert error["code"] == "too_many_json_values"
        assert error["param"] == "messages"
        children = _decode_processes(server.proc.pid)
        assert len(children) == 1, children

        broken = await client.post(url, content=_wide_body()[:-3], headers=headers)
        assert broken.status_code == 400
        assert broken.json()["error"]["message"].startswith("the request body is not valid JSON: ")

        deep = '{"model":"echo","messages":' + "[" * 2000 + "]" * 2000 + "," + " " * (1 << 17) + "}"
        too_deep = await client.post(url, content=deep, headers=headers)
        assert too_deep.status_code == 400
        assert too_deep.json()["error"]["code"] == "json_too_deep"

        text = _long_message(DECODE_PROCESS_BYTES + 4096)
        answer = await client.post(
            url,
            json={"model": "echo", "messages": [{"role": "user", "content": text}]},
        )
        assert answer.status_code == 200, answer.text
        content = answer.json()["choices"][0]["message"]["content"]
        assert content and text.startswith(content)  # echoed, as far as the context allows

        # The decode process dies: the input in flight next is decoded in a thread, and
        # the one after that starts a new process. No request is lost on the way.
        os.kill(children[0], signal.SIGKILL)
        await async_wait_until(lambda: not _decode_processes(server.proc.pid))
        for _ in range(2):
            again = await client.post(url, content=_wide_body(), headers=headers)
            assert again.status_code == 400
            assert again.json()["error"]["code"] == "too_many_json_values"
        await async_wait_until(lambda: len(_decode_processes(server.proc.pid)) == 1)
    server.stop()
    log = server.stderr()
    assert "Traceback" not in log, log
    assert "ERROR" not in log, log


async def test_large_frames_are_decoded_in_a_child_process_with_the_same_answers(serve_process):
    server = serve_process("--log-level", "info")
    async with connect(server.ws_url, max_size=None) as neighbour, connect(server.ws_url) as ws:
        await ws.send(_wide_body("wide"))
        refused = json.loads(await ws.recv())
        assert refused["request_id"] == "wide", refused
        assert refused["error"]["code"] == "too_many_json_values"
        assert len(_decode_processes(server.proc.pid)) == 1

        # The socket and its neighbour carry on; a large valid frame is served.
        text = _long_message(DECODE_PROCESS_BYTES + 4096)
        await ws.send(
            json.dumps({"model": "echo", "messages": [{"role": "user", "content": text}]})
        )
        echoed = text_of(await collect_until_terminal(ws))
        assert echoed and text.startswith(echoed)

        # Malformed JSON closes 1007 with orjson's reason, as for a small frame.
        await ws.send(_wide_body("wide")[:-3])
        with pytest.raises(ConnectionClosed) as closed:
            await ws.recv()
        assert closed.value.rcvd is not None
        assert closed.value.rcvd.code == 1007
        assert closed.value.rcvd.reason.startswith("malformed JSON frame: unexpected end of data")
        await neighbour.send(
            json.dumps({"model": "echo", "messages": [{"role": "user", "content": "hi"}]})
        )
        assert text_of(await collect_until_terminal(neighbour)) == "hi"
    server.stop()
    log = server.stderr()
    assert "Traceback" not in log, log
    assert "ERROR" not in log, log


async def test_the_decode_process_exits_when_the_server_is_killed(serve_process):
    """kill -9 of the server leaves no decode process behind (holding its stderr open)."""
    server = serve_process()
    async with httpx.AsyncClient(base_url=server.http_url, timeout=60) as client:
        wide = await client.post(
            "/v1/chat/completions",
            content=_wide_body(),
            headers={"content-type": "application/json"},
        )
        assert wide.status_code == 400
    (child,) = _decode_processes(server.proc.pid)
    server.proc.kill()
    server.proc.wait(10)
    await async_wait_until(lambda: not Path(f"/proc/{child}").exists(), timeout=10)


UNGUARDED_SCRIPT = """
import realtime
from realtime.engine.echo import EchoEngine

realtime.serve(EchoEngine(), realtime.ServerConfig(host="127.0.0.1", port=0))
"""


def test_a_script_serving_without_a_main_guard_is_not_run_again(tmp_path: Path) -> None:
    """spawn runs the parent's main script in the child first; a script that serves at its
    top level (as the embedding how-to's example does) must not start a second server in
    the decode process."""
    script = tmp_path / "serve_unguarded.py"
    script.write_text(UNGUARDED_SCRIPT)
    proc = subprocess.Popen(
        [sys.executable, str(script)],
        cwd=Path(__file__).resolve().parents[2],
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stderr is not None
        ports: list[str] = []
        while not ports:
            line = proc.stderr.readline()
            assert line, "the script exited before serving"
            ports = re.findall(r"serving model .* on http://127\.0\.0\.1:(\d+)/v1", line)
        port = int(ports[0])
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=60) as client:
            for _ in range(2):
                wide = client.post(
                    "/v1/chat/completions",
                    content=_wide_body(),
                    headers={"content-type": "application/json"},
                )
                assert wide.status_code == 400
                assert wide.json()["error"]["code"] == "too_many_json_values"
        assert len(_decode_processes(proc.pid)) == 1  # the same one both times
    finally:
        proc.terminate()
        _, log = proc.communicate(timeout=30)
    assert "serving model" not in log, log  # no second server's (both lines come first)
    assert "Traceback" not in log, log
