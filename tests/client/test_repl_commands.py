"""The REPL's commands and terminal behaviour, driven through a pseudo-terminal (pexpect).

What the server received is recorded in-process (each request as the pipeline
saw it), so "/set temperature 0.2" is proven by the request, not by the REPL's
own confirmation. Every spawned REPL has a temporary HOME (see conftest.py).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pexpect
import pytest

from realtime.client.repl import parse_parameter, read_conversation
from tests.client.conftest import REPO_ROOT
from tests.client.servers import record_requests

PROMPT = "> "
CONTINUATION = "... "
STATS = re.compile(r"\[ttft \d+ ms, (?:[\d.]+|-) tok/s, \d+ tokens?\]")


def record(running: Any) -> list[dict[str, Any]]:
    return record_requests(running.app)


def ask(child: pexpect.spawn, text: str) -> str:
    child.expect_exact(PROMPT)
    child.sendline(text)
    child.expect_exact(text + "\r\n")
    child.expect(STATS)
    return str(child.before)


def command(child: pexpect.spawn, line: str, answer: str) -> None:
    child.expect_exact(PROMPT)
    child.sendline(line)
    child.expect_exact(answer)


def finish(child: pexpect.spawn) -> int:
    child.expect(pexpect.EOF)
    child.close()
    assert "Traceback" not in str(child.before)
    return int(child.exitstatus) if child.exitstatus is not None else -1


def turns(request: dict[str, Any]) -> list[tuple[str, str]]:
    return [(m["role"], m["content"]) for m in request["messages"]]


def test_system_model_set_unset_and_reset(server, spawn):
    requests = record(server)
    child = spawn(server.ws_url)

    command(child, "/system Answer in one word.", "[system prompt set: Answer in one word.]")
    command(child, "/set temperature 0.2", "[temperature = 0.2]")
    command(child, "/set max_tokens 50", "[max_tokens = 50]")
    command(child, '/set stop ["###", "END"]', '[stop = ["###", "END"]]')
    command(child, "/set temprature 0.2", "unknown parameter 'temprature'")
    command(child, "/set temperature warm", "temperature takes a number, not 'warm'")
    command(child, "/model", "[model echo; served: echo]")
    command(child, "/model gpt-4o", "unknown model 'gpt-4o'; served: echo")
    command(child, "/model echo", "[model set to echo]")
    command(
        child,
        "/set",
        '[model echo; system "Answer in one word."; settings: '
        'temperature=0.2, max_tokens=50, stop=["###", "END"]]',
    )
    assert "first" in ask(child, "first")
    first = requests[-1]
    assert first["temperature"] == 0.2 and first["max_tokens"] == 50
    assert first["stop"] == ["###", "END"] and first["model"] == "echo"
    assert turns(first) == [("system", "Answer in one word."), ("user", "first")]

    command(child, "/unset stop", "[stop unset]")
    command(child, "/unset stop", "stop is not set")
    command(child, "/system", "[system prompt cleared]")
    assert "second" in ask(child, "second")
    second = requests[-1]
    assert "stop" not in second and second["temperature"] == 0.2
    assert turns(second) == [("user", "first"), ("assistant", "first"), ("user", "second")]

    command(child, "/reset", "[conversation cleared]")
    command(child, "/bogus", "unknown command /bogus")
    command(child, "/help", "/set KEY VAL")
    assert "third" in ask(child, "third")
    assert turns(requests[-1]) == [("user", "third")]
    assert requests[-1]["temperature"] == 0.2  # /reset keeps the settings
    child.expect_exact(PROMPT)
    child.sendline("/exit")
    assert finish(child) == 0


def test_save_and_load_a_conversation_as_json(server, spawn, tmp_path: Path):
    requests = record(server)
    saved = tmp_path / "chat.json"
    child = spawn(server.ws_url, "--system", "Be brief.")
    ask(child, "hello one")
    ask(child, "hello two")
    command(child, "/set temperature 0.5", "[temperature = 0.5]")
    command(child, f"/save {saved}", f"[saved 5 messages to {saved}]")
    document = json.loads(saved.read_text())
    assert document == {
        "model": "echo",
        "params": {"temperature": 0.5},
        "messages": [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "hello one"},
            {"role": "assistant", "content": "hello one"},
            {"role": "user", "content": "hello two"},
            {"role": "assistant", "content": "hello two"},
        ],
    }
    command(child, "/reset", "[conversation cleared]")
    command(child, "/unset temperature", "[temperature unset]")
    command(child, f"/load {tmp_path / 'missing.json'}", "cannot read")
    (tmp_path / "bad.json").write_text('{"messages": [{"role": "wizard"}]}')
    command(child, f"/load {tmp_path / 'bad.json'}", "is not a saved conversation: message 0")
    # counted as /save counts them: the system prompt is one of the 5
    command(child, f"/load {saved}", f"[loaded 5 messages from {saved}; model echo]")
    ask(child, "hello three")
    assert turns(requests[-1]) == [
        ("system", "Be brief."),
        ("user", "hello one"),
        ("assistant", "hello one"),
        ("user", "hello two"),
        ("assistant", "hello two"),
        ("user", "hello three"),
    ]
    assert requests[-1]["temperature"] == 0.5
    child.expect_exact(PROMPT)
    child.sendeof()
    assert finish(child) == 0


def test_multi_line_input_with_backslash_and_triple_quotes(server, spawn):
    requests = record(server)
    child = spawn(server.ws_url)
    child.expect_exact(PROMPT)
    child.sendline("first line \\")
    child.expect_exact(CONTINUATION)
    child.sendline("second line")
    child.expect(STATS)
    assert requests[-1]["messages"][-1]["content"] == "first line \nsecond line"

    child.expect_exact(PROMPT)
    child.sendline('"""')
    child.expect_exact(CONTINUATION)
    child.sendline("  indented stays")
    child.expect_exact(CONTINUATION)
    child.sendline("")
    child.expect_exact(CONTINUATION)
    child.sendline('last"""')
    child.expect(STATS)
    assert requests[-1]["messages"][-1]["content"] == "  indented stays\n\nlast"

    child.expect_exact(PROMPT)
    child.sendline('"""one line"""')
    child.expect(STATS)
    assert requests[-1]["messages"][-1]["content"] == "one line"
    child.expect_exact(PROMPT)
    child.sendline("/exit")
    assert finish(child) == 0


def test_history_is_kept_in_the_home_directory(server, spawn, home: Path):
    requests = record(server)
    child = spawn(server.ws_url)
    ask(child, "remember me")
    child.expect_exact(PROMPT)
    child.sendline("/exit")
    assert finish(child) == 0
    history = (home / ".realtime_history").read_text().splitlines()
    assert history[-2:] == ["remember me", "/exit"]

    child = spawn(server.ws_url)
    child.expect_exact(PROMPT)
    child.send("\x10\x10")  # Ctrl-P twice: readline's previous-history, past /exit
    child.expect_exact("remember me")
    child.sendline("")
    child.expect(STATS)
    assert requests[-1]["messages"][-1]["content"] == "remember me"
    child.expect_exact(PROMPT)
    child.sendline("/exit")
    assert finish(child) == 0


def test_history_stays_in_memory_without_a_writable_home_or_with_no_history(
    server, spawn, tmp_path: Path, home: Path
):
    missing_home = tmp_path / "no-such-home"
    for args, env in (((), {"HOME": str(missing_home)}), (("--no-history",), {})):
        child = spawn(server.ws_url, *args, env=env)
        ask(child, "not persisted")
        child.expect_exact(PROMPT)
        child.sendline("/exit")
        assert finish(child) == 0
    assert not missing_home.exists()
    assert not (home / ".realtime_history").exists()


def test_reasoning_is_dimmed_tool_calls_shown_and_a_spinner_turns_on_a_tty(scripted, spawn):
    scripted.first_delay = 0.4  # long enough for the spinner to be drawn
    child = spawn(scripted.ws_url, env={"TERM": "xterm", "NO_COLOR": None})
    child.expect_exact(PROMPT)
    child.sendline("think about it")
    child.expect_exact("\r|")  # the spinner, at the start of the line
    child.expect_exact("\x1b[2m[reasoning] \x1b[0m\x1b[2mThe user wants\x1b[0m")
    child.expect_exact("\x1b[2m a number.\x1b[0m\r\nThe answer is 42.")
    child.expect(STATS)
    child.expect_exact(PROMPT)
    child.sendline("weather in Paris")
    child.expect_exact("Let me check.")
    child.expect_exact('\x1b[36m[tool call call_1] get_weather {"city": "Paris"}\x1b[0m')
    child.expect(STATS)
    child.expect_exact(PROMPT)
    child.sendline("next")
    child.expect(STATS)
    # The tool call went back as part of the assistant turn.
    assistant = scripted.frames[-1]["messages"][-2]
    assert assistant["tool_calls"] == [
        {
            "id": "call_1",
            "type": "function",
            "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
        }
    ]
    child.sendline("/exit")
    assert finish(child) == 0


def test_no_colours_or_spinner_without_a_tty(scripted):
    scripted.first_delay = 0.3
    env = {**os.environ, "TERM": "xterm", "HOME": str(REPO_ROOT / "no-such-home")}
    env.pop("NO_COLOR", None)
    result = subprocess.run(
        [sys.executable, "-m", "realtime.client", scripted.ws_url],
        input="think about it\nweather\n/exit\n",
        capture_output=True,
        text=True,
        timeout=20,
        cwd=REPO_ROOT,
        env=env,
    )
    assert result.returncode == 0, result.stderr
    assert "\x1b[" not in result.stdout and "\r" not in result.stdout
    assert "[reasoning] The user wants a number.\nThe answer is 42.\n" in result.stdout
    assert '[tool call call_1] get_weather {"city": "Paris"}' in result.stdout


def test_json_mode_prints_every_frame_for_scripts(server):
    env = {**os.environ, "HOME": str(REPO_ROOT / "no-such-home")}
    result = subprocess.run(
        [sys.executable, "-m", "realtime.client", "--json", server.ws_url],
        input="/set temperature 0.3\nhello json\nand again\n/model nope\n",
        capture_output=True,
        text=True,
        timeout=20,
        cwd=REPO_ROOT,
        env=env,
    )
    assert result.returncode == 0, result.stderr
    frames = [json.loads(line) for line in result.stdout.splitlines()]
    done = [f for f in frames if f.get("type") == "response.done"]
    assert len(done) == 2 and all(f["status"] == "completed" for f in done)
    first_id, _ = (f["request_id"] for f in done)
    text = "".join(
        c["delta"].get("content") or ""
        for f in frames
        if f["request_id"] == first_id
        for c in f.get("choices", [])
    )
    assert text == "hello json"
    assert "[temperature = 0.3]" in result.stderr
    assert "unknown model 'nope'" in result.stderr
    assert "\x1b[" not in result.stderr


def test_json_mode_prints_error_frames_too(server):
    env = {**os.environ, "HOME": str(REPO_ROOT / "no-such-home")}
    result = subprocess.run(
        [sys.executable, "-m", "realtime.client", "--json", "--model", "nope", server.ws_url],
        input="hello\n",
        capture_output=True,
        text=True,
        timeout=20,
        cwd=REPO_ROOT,
        env=env,
    )
    (frame,) = [json.loads(line) for line in result.stdout.splitlines()]
    assert frame["type"] == "error" and frame["error"]["code"] == "model_not_found"


def test_api_key_option_sends_a_bearer_token(spawn):
    from tests.client.servers import ScriptedServer

    scripted = ScriptedServer(require_key="sk-repl").start()
    try:
        child = spawn(scripted.ws_url)
        child.expect_exact("cannot connect to")
        child.expect_exact("HTTP 401")
        assert finish(child) == 1
        child = spawn(scripted.ws_url, env={"REALTIME_API_KEY": "sk-repl"})
        assert "hello" in ask(child, "hello")
        child.expect_exact(PROMPT)
        child.sendline("/exit")
        assert finish(child) == 0
        assert scripted.authorization[-1] == "Bearer sk-repl"
    finally:
        scripted.stop()


# --- pure parts ---


def test_parameters_are_typed_and_unknown_ones_refused():
    assert parse_parameter("temperature", "0.2") == 0.2
    assert parse_parameter("max_tokens", "12") == 12
    assert parse_parameter("stop", "###") == "###"
    assert parse_parameter("ignore_eos", "on") is True
    with pytest.raises(ValueError, match="an integer"):
        parse_parameter("max_tokens", "1.5")
    with pytest.raises(ValueError, match="unknown parameter"):
        parse_parameter("max_token", "5")


def test_loaded_conversations_are_validated():
    messages, model, params = read_conversation(
        {"model": "m", "params": {"top_p": 0.9}, "messages": [{"role": "user", "content": "x"}]}
    )
    assert (messages, model, params) == ([{"role": "user", "content": "x"}], "m", {"top_p": 0.9})
    assert read_conversation([{"role": "assistant", "content": None}])[0][0]["role"] == "assistant"
    for bad in ({"messages": "x"}, [{"content": "x"}], {"params": {"bogus": 1}, "messages": []}):
        with pytest.raises(ValueError):
            read_conversation(bad)
