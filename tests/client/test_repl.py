"""The terminal REPL, driven as a user would: pexpect types into a pseudo-terminal.

Each test spawns `python -m realtime.client <ws_url>` against a real server from
the fixtures and asserts on what the user sees, then on what the server saw (the
requests' messages and the number of sockets, recorded in-process) so that "the
conversation went over one socket" is proven rather than inferred from output.
"""

from __future__ import annotations

import re
import socket
import subprocess
import sys
from dataclasses import dataclass, field
from typing import Any

import pexpect
import pytest
from websockets.exceptions import ConnectionClosed
from websockets.frames import Close

from realtime.chat.conversation import template_messages
from realtime.client.repl import (
    decode_rate,
    describe_close,
    describe_connect_error,
    format_stats,
    models_url,
)
from realtime.config import ServerConfig
from realtime.engine.echo import EchoTokenizer
from tests.conftest import wait_until

PROMPT = "> "
STATS = re.compile(r"\[ttft \d+ ms, (?:[\d.]+|-) tok/s, \d+ tokens?\]")


@dataclass
class Recorder:
    """What the server was asked: each request's messages, and how many sockets it accepted."""

    requests: list[list[dict[str, Any]]] = field(default_factory=list)
    sockets: int = 0


def record(running: Any) -> Recorder:
    """Wrap the pipeline's `prepare` and the hub's `add` on this server instance."""
    recorder = Recorder()
    pipeline = running.app.state.pipeline
    hub = running.app.state.hub
    prepare, add = pipeline.prepare, hub.add

    def recording_prepare(request: Any, **options: Any) -> Any:
        recorder.requests.append(template_messages(request.conversation))
        return prepare(request, **options)

    def recording_add(session: Any) -> None:
        recorder.sockets += 1
        add(session)

    pipeline.prepare = recording_prepare
    hub.add = recording_add
    return recorder


def turns(messages: list[dict[str, Any]]) -> list[tuple[str, str]]:
    return [(m["role"], m["content"]) for m in messages]


def ask(child: pexpect.spawn, text: str) -> str:
    """Type a message at the prompt; return what was printed between the echo and the stats."""
    child.expect_exact(PROMPT)
    child.sendline(text)
    child.expect_exact(text + "\r\n")  # the terminal's echo of the typed line
    child.expect(STATS)
    return str(child.before)


def finish(child: pexpect.spawn) -> int:
    child.expect(pexpect.EOF)
    child.close()
    assert "Traceback" not in str(child.before)
    return int(child.exitstatus) if child.exitstatus is not None else -1


def test_two_turns_share_one_socket_and_the_whole_conversation(server_factory, spawn):
    running = server_factory(ServerConfig(echo_delay=0.01, log_level="warning"))
    recorder = record(running)
    child = spawn(running.ws_url)

    assert "hello there" in ask(child, "hello there")
    assert re.fullmatch(r"\[ttft \d+ ms, [\d.]+ tok/s, 2 tokens\]", child.after)
    assert "second question" in ask(child, "second question")

    assert running.engine.stats.requests_started == 2
    assert recorder.sockets == 1
    assert len(running.sessions()) == 1
    assert turns(recorder.requests[0]) == [("user", "hello there")]
    assert turns(recorder.requests[1]) == [
        ("user", "hello there"),
        ("assistant", "hello there"),
        ("user", "second question"),
    ]
    child.sendline("/exit")
    assert finish(child) == 0


def test_ctrl_c_cancels_the_answer_and_keeps_the_socket(server_factory, spawn):
    running = server_factory(ServerConfig(echo_delay=0.05, log_level="warning"))
    recorder = record(running)
    stats = running.engine.stats
    long_message = " ".join(f"w{i}" for i in range(200))
    child = spawn(running.ws_url)

    child.expect_exact(PROMPT)
    child.sendline(long_message)
    child.expect_exact(long_message + "\r\n")
    child.expect_exact("w0 w1 w2")  # the answer has started to appear
    child.sendintr()
    child.expect_exact("[cancelled]")
    child.expect(STATS)

    wait_until(lambda: stats.requests_cancelled == 1 and stats.active == 0)
    (generated,) = stats.tokens_by_request.values()
    assert 0 < generated < len(EchoTokenizer().encode(long_message))

    assert "after the cancel" in ask(child, "after the cancel")
    assert recorder.sockets == 1
    assert stats.requests_started == 2
    # The partial answer was kept as the assistant turn (see the REPL's docstring).
    (user, partial, follow_up) = recorder.requests[1]
    assert (user["role"], user["content"]) == ("user", long_message)
    assert partial["role"] == "assistant"
    assert partial["content"].startswith("w0 w1 w2")
    assert long_message.startswith(partial["content"]) and partial["content"] != long_message
    assert (follow_up["role"], follow_up["content"]) == ("user", "after the cancel")
    child.sendline("/exit")
    assert finish(child) == 0


def test_unreachable_server_is_reported_without_a_traceback(spawn):
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    url = f"ws://127.0.0.1:{port}/v1/realtime"
    child = spawn(url)
    child.expect_exact(f"cannot connect to {url}: connection refused")
    assert finish(child) == 1


def test_server_refusing_the_session_is_reported_with_code_and_reason(server, spawn):
    server.engine.unavailable = "maintenance"  # the endpoint accepts, then closes with 1011
    child = spawn(server.ws_url)
    closed = "server closed the connection: 1011 engine unavailable: maintenance"
    # Usually noticed before the first prompt; on a slow machine, at the first send.
    if child.expect_exact([closed, PROMPT]) == 1:
        child.sendline("hello")
        child.expect_exact(closed)
    assert finish(child) == 1


def test_server_closing_mid_session_is_reported_with_code_and_reason(server, spawn):
    child = spawn(server.ws_url)
    child.expect_exact(PROMPT)
    server.engine.unavailable = "maintenance"
    child.sendline("hello")
    # The request's error frame, then the Close frame that ends the session.
    child.expect(r"error: engine unavailable: [^\r\n]+")
    child.expect(r"server closed the connection: 1011 engine unavailable: [^\r\n]+")
    assert finish(child) == 1


def test_reset_clears_the_conversation_and_exit_closes_normally(server, spawn):
    recorder = record(server)
    child = spawn(server.ws_url)
    ask(child, "one")
    ask(child, "two")
    child.expect_exact(PROMPT)
    child.sendline("/reset")
    child.expect_exact("[conversation cleared]")
    assert "three" in ask(child, "three")

    assert [len(r) for r in recorder.requests] == [1, 3, 1]
    assert turns(recorder.requests[2]) == [("user", "three")]
    child.expect_exact(PROMPT)
    child.sendline("/exit")
    assert finish(child) == 0
    wait_until(lambda: len(server.sessions()) == 0)
    assert recorder.sockets == 1


def test_ctrl_d_quits_and_ctrl_c_at_the_prompt_only_clears_the_line(server, spawn):
    child = spawn(server.ws_url)
    child.expect_exact(PROMPT)
    child.send("half typed")
    child.expect_exact("half typed")  # a person sees what they typed before pressing Ctrl-C
    child.sendintr()
    child.expect_exact("Ctrl-C again")
    assert "still here" in ask(child, "still here")
    child.expect_exact(PROMPT)
    child.sendeof()
    assert finish(child) == 0


def test_two_ctrl_c_at_the_prompt_quit(server, spawn):
    child = spawn(server.ws_url)
    child.expect_exact(PROMPT)
    child.sendintr()
    child.expect_exact("Ctrl-C again")
    child.expect_exact(PROMPT)
    child.sendintr()
    assert finish(child) == 0


# --- pure helpers ---


def test_stats_line():
    assert format_stats(0.0521, 12, 0.55) == "[ttft 52 ms, 20.0 tok/s, 12 tokens]"
    assert format_stats(0.0521, 1, 0.0) == "[ttft 52 ms, - tok/s, 1 token]"
    assert format_stats(None, 0, None) == "[ttft -, - tok/s, 0 tokens]"
    assert format_stats(0.01, None, 0.5) == "[ttft 10 ms, - tok/s]"


def test_decode_rate_leaves_out_the_first_token():
    assert decode_rate(11, 0.5) == pytest.approx(20.0)
    assert decode_rate(1, 0.5) is None
    assert decode_rate(5, 0.0) is None
    assert decode_rate(None, 1.0) is None


def test_close_and_connect_errors_read_as_sentences():
    assert describe_close(ConnectionClosed(Close(1011, "engine unavailable: x"), None)) == (
        "1011 engine unavailable: x"
    )
    assert describe_close(ConnectionClosed(Close(1001, ""), None)) == "1001 (going away)"
    assert describe_close(ConnectionClosed(None, None)) == "connection lost without a close frame"
    assert describe_connect_error(ConnectionRefusedError(111, "Connection refused")) == (
        "connection refused"
    )
    assert describe_connect_error(OSError(113, "No route to host")) == "no route to host"


def test_models_url_sits_next_to_the_socket():
    assert models_url("ws://127.0.0.1:8000/v1/realtime") == "http://127.0.0.1:8000/v1/models"
    assert models_url("wss://example.test/api/v1/realtime") == "https://example.test/api/v1/models"
    assert models_url("ws://host:1") == "http://host:1/v1/models"


@pytest.mark.parametrize("key", ["has space", "", "x" * 257, "tab\there"])
def test_a_session_key_a_header_cannot_carry_is_refused_before_connecting(key: str) -> None:
    run = subprocess.run(
        [sys.executable, "-m", "realtime.client", "ws://127.0.0.1:9/v1/realtime", "--session", key],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert run.returncode == 2  # argparse's usage error: nothing was dialled
    assert "a session key is 1 to 256 printable ASCII characters" in run.stderr
