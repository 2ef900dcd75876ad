"""Large client JSON is decoded in the decode process, through a real server.

What is checked: a large body or frame (at least `DECODE_PROCESS_BYTES`) gets the
same answer as before (served, or refused with the same error naming the same
field and `request_id`), the decoding ran in a process of the server's own (its
PID is a child of the server's), and the decode process dying costs no request:
the next large input is decoded in a thread and the one after starts a new one.
"""

from __future__ import annotations

import functools
import json
import os
import pickle
import re
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed

from realtime.dialects.chat.frames import FrameRejected, check_request_frame, decode_client_frame
from realtime.dialects.chat.request import parse_chat_request
from realtime.pipeline.json_process import DECODE_PROCESS_BYTES
from realtime.protocol.errors import UnknownFieldError
from realtime.protocol.input_limits import DEFAULT_INPUT_LIMITS
from realtime.protocol.json_input import RefusedShape
from realtime.protocol.json_worker import NICENESS, decode_pickled
from tests.conftest import async_wait_until, niceness
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
        # Below the server's priority: a flood of large inputs gets the cores last.
        assert niceness(children[0]) == min(19, niceness(server.proc.pid) + NICENESS)

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
    _stop_with_a_clean_log(server)


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
        await _still_answers(neighbour)
    _stop_with_a_clean_log(server)


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


ROUTES_AND_BODIES = [
    ("/v1/chat/completions", {"model": "echo", "messages": [{"role": "user", "content": "x"}]}),
    ("/v1/completions", {"model": "echo", "prompt": "x"}),
    (
        "/v1/messages",
        {"model": "echo", "max_tokens": 8, "messages": [{"role": "user", "content": "x"}]},
    ),
    ("/v1/responses", {"model": "echo", "input": "x"}),
]


async def test_a_large_body_the_route_refuses_gets_the_small_bodys_error(serve_process):
    """A large body the route's own parse refuses is refused in the decode process
    (only the error comes back); the client sees the error a small body gets."""
    server = serve_process()
    async with httpx.AsyncClient(base_url=server.http_url, timeout=60) as client:
        for url, body in ROUTES_AND_BODIES:
            answers = []
            for size in (8, 2 * DECODE_PROCESS_BYTES):
                answer = await client.post(url, json={**body, "padding": "p" * size})
                assert answer.status_code == 400, (url, answer.text)
                answers.append(answer.json())
            assert answers[0] == answers[1], url
            assert "padding" in json.dumps(answers[1]), answers[1]
        assert len(_decode_processes(server.proc.pid)) == 1
    _stop_with_a_clean_log(server)


def test_the_decode_process_returns_only_the_refusal_of_a_body_its_parse_refuses() -> None:
    parse = functools.partial(parse_chat_request, limits=DEFAULT_INPUT_LIMITS)
    body = {
        "model": "echo",
        "messages": [{"role": "user", "content": "x"}],
        "padding": "p" * 10_000,
    }
    refused = pickle.loads(decode_pickled(json.dumps(body), 64, None, parse))
    assert type(refused.value) is RefusedShape
    assert "padding" not in refused.value and "messages" not in refused.value
    assert refused.value["model"] == "echo"
    with pytest.raises(UnknownFieldError) as error:
        refused.checked_value()
    assert error.value.param == "padding"

    del body["padding"]
    served = pickle.loads(decode_pickled(json.dumps(body), 64, None, parse))
    assert served.checked_value() == body


async def test_a_large_frame_the_dialect_refuses_gets_the_small_frames_error(serve_process):
    """A large request frame the chat dialect refuses is refused in the decode process
    (`large_frame_check`); the error frame is the one a small frame gets, under the
    socket's defaults, and the socket carries on."""
    server = serve_process()
    async with connect(server.ws_url, max_size=None) as ws:
        refusals = []
        for n, size in enumerate((8, 2 * DECODE_PROCESS_BYTES)):
            frame = {
                "request_id": f"r{n}",
                "model": "echo",
                "messages": [{"role": "user", "content": "x"}],
                "padding": "p" * size,
            }
            await ws.send(json.dumps(frame))
            refusal = json.loads(await ws.recv())
            assert refusal["request_id"] == f"r{n}", refusal
            refusals.append(refusal["error"])
        assert refusals[0] == refusals[1]
        assert refusals[1]["param"] == "padding", refusals[1]
        assert len(_decode_processes(server.proc.pid)) == 1
        await _still_answers(ws)
    _stop_with_a_clean_log(server)


def test_the_chat_dialects_frame_check_refuses_what_decode_client_frame_refuses() -> None:
    check = functools.partial(
        check_request_frame, defaults={"model": "echo"}, limits=DEFAULT_INPUT_LIMITS
    )
    frame = {"request_id": "a", "messages": [{"role": "user", "content": "x"}], "padding": "p"}
    refused = pickle.loads(decode_pickled(json.dumps(frame), 64, None, check))
    assert type(refused.value) is RefusedShape and refused.value["request_id"] == "a"
    with pytest.raises(FrameRejected) as rejected:
        decode_client_frame(json.dumps(frame), {"model": "echo"})
    with pytest.raises(UnknownFieldError) as error:
        refused.checked_value()
    assert str(error.value) == str(rejected.value.error)
    # What is refused before the body (a bad request_id, not a request) comes back whole.
    for passed in (
        {**frame, "request_id": "r" * 500},
        {"type": "response.cancel", "request_id": "a"},
        {"request_id": "a", "messages": [{"role": "user", "content": "x"}]},
    ):
        decoded = pickle.loads(decode_pickled(json.dumps(passed), 64, None, check))
        assert decoded.checked_value() == passed


async def _still_answers(ws: Any) -> None:
    """The socket serves a small chat request after whatever came before."""
    await ws.send(json.dumps({"model": "echo", "messages": [{"role": "user", "content": "hi"}]}))
    assert text_of(await collect_until_terminal(ws)) == "hi"


def _stop_with_a_clean_log(server: Any) -> None:
    """Stop the served process: no traceback and no ERROR line in what it logged."""
    server.stop()
    log = server.stderr()
    assert "Traceback" not in log, log
    assert "ERROR" not in log, log
