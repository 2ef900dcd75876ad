"""The REPL across a real server restart: it reconnects, keeps the conversation, loses no message.

The server is `python -m realtime serve` in a subprocess, stopped with SIGTERM
(it drains, closes sockets with 1001 and exits 0) and started again on the same
port; the REPL is `python -m realtime.client` on a pseudo-terminal (pexpect).
"""

from __future__ import annotations

import json
import signal
from pathlib import Path
from typing import Any

import pexpect

from tests.client.test_repl import PROMPT, STATS, ask, finish
from tests.conftest import ServerProcess, spawn_server

LOST = "[connection lost: 1001 server shutting down; reconnecting]"
BACK = "[reconnected]"


def restart(server: ServerProcess, *args: str) -> ServerProcess:
    """The same server again, on the same port, once the old one exited cleanly."""
    assert server.stop() == 0
    return spawn_server("--port", str(server.port), "--log-level", "warning", *args)


def saved_turns(child: pexpect.spawn, path: Path) -> list[tuple[str, str]]:
    child.expect_exact(PROMPT)
    child.sendline(f"/save {path}")
    child.expect_exact("[saved")
    messages: list[dict[str, Any]] = json.loads(path.read_text())["messages"]
    return [(m["role"], m["content"]) for m in messages]


def test_the_repl_reconnects_after_a_restart_and_keeps_the_conversation(spawn, tmp_path):
    server = spawn_server("--log-level", "warning")
    child = spawn(server.ws_url)
    try:
        assert "first question" in ask(child, "first question")
        server = restart(server)
        answer = ask(child, "second question")  # typed after the restart: sent once it is back
        assert LOST in answer and "second question" in answer
        assert saved_turns(child, tmp_path / "chat.json") == [
            ("user", "first question"),
            ("assistant", "first question"),
            ("user", "second question"),
            ("assistant", "second question"),
        ]
        child.expect_exact(PROMPT)
        child.sendline("/exit")
        assert finish(child) == 0
    finally:
        server.stop()


def test_a_message_typed_while_the_server_is_down_goes_out_when_it_is_back(spawn):
    server = spawn_server("--log-level", "warning")
    child = spawn(server.ws_url)
    try:
        ask(child, "before")
        assert server.stop() == 0
        child.expect_exact(PROMPT)
        child.sendline("typed while down")
        child.expect_exact("typed while down\r\n")  # the terminal's echo
        child.expect_exact(LOST)  # shown while it waits: the user knows why
        server = spawn_server("--port", str(server.port), "--log-level", "warning")
        child.expect_exact(BACK)
        child.expect(STATS)
        assert "typed while down" in str(child.before)
        child.expect_exact(PROMPT)
        child.sendeof()
        assert finish(child) == 0
    finally:
        server.stop()


def test_an_answer_cut_by_the_restart_is_offered_again_not_resent(spawn, tmp_path):
    server = spawn_server(
        "--log-level", "warning", "--echo-delay", "0.05", "--shutdown-grace", "0.3"
    )
    long_message = " ".join(f"w{i}" for i in range(200))  # 10 s: cut by the 0.3 s grace
    child = spawn(server.ws_url)
    try:
        child.expect_exact(PROMPT)
        child.sendline(long_message)
        child.expect_exact(long_message + "\r\n")
        child.expect_exact("w0 w1 w2")  # streaming
        server.proc.send_signal(signal.SIGTERM)
        child.expect_exact(
            "[interrupted: 1001 server shutting down; the message was not resent: "
            "press Enter to send it again]"
        )
        assert server.proc.wait(15) == 0
        server = spawn_server("--port", str(server.port), "--log-level", "warning")
        child.expect_exact(PROMPT + long_message)  # typed in advance at the prompt
        child.sendline("")  # Enter sends it, once
        child.expect(STATS)
        assert str(child.before).rstrip().endswith("w197 w198 w199")
        # The cut answer was not kept: the conversation has the resent turn only.
        assert saved_turns(child, tmp_path / "chat.json") == [
            ("user", long_message),
            ("assistant", long_message),
        ]
        child.expect_exact(PROMPT)
        child.sendline("/exit")
        assert finish(child) == 0
    finally:
        server.stop()


def test_ctrl_c_while_waiting_for_the_server_cancels_the_message(spawn):
    server = spawn_server("--log-level", "warning")
    child = spawn(server.ws_url)
    try:
        ask(child, "hello")
        assert server.stop() == 0
        child.expect_exact(PROMPT)
        child.sendline("never sent")
        child.expect_exact(LOST)
        child.sendintr()
        child.expect_exact("[cancelled]")
        server = spawn_server("--port", str(server.port), "--log-level", "warning")
        assert "after" in ask(child, "after")
        child.expect_exact(PROMPT)
        child.sendline("/exit")
        assert finish(child) == 0
    finally:
        server.stop()
