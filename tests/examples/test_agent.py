"""The agent example (clients/agent/) end to end against a real server, and its tools.

The server runs the scripted engine with the example's own script.json and the
hermes tool parser, so the tool calls the agent executes are real parsed calls and
the final answer depends on the tool results reaching the model's prompt.
"""

from __future__ import annotations

import contextlib
import io
import json
import subprocess
import sys
from pathlib import Path

import pytest

from clients.agent.agent import (
    WORKSPACE,
    AgentError,
    AgentRun,
    compare,
    endpoints,
    run_over_http,
    run_over_socket,
)
from clients.agent.tools import (
    MAX_FILE_BYTES,
    ToolError,
    calculate,
    format_number,
    read_file,
    run_tool,
)
from realtime.client import ClientEvent
from realtime.config import ServerConfig
from realtime.engine.scripted import ScriptedEngine
from tests.conftest import async_wait_until, scrape_metrics

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "clients" / "agent" / "script.json"
QUESTION = "What is 17 * 23, and what does notes.txt say?"
NOTES = (WORKSPACE / "notes.txt").read_text(encoding="utf-8")
ANSWER = json.loads(SCRIPT.read_text(encoding="utf-8"))[1]["reply"]
CONFIG = ServerConfig(log_level="warning", tool_parser="hermes")


def check_run(run: AgentRun, engine: ScriptedEngine) -> None:
    """The example conversation: both tools ran, their results reached the model."""
    assert run.answer == ANSWER
    assert [len(turn.results) for turn in run.turns] == [2, 0]
    (calc, calc_out), (read, read_out) = run.turns[0].results
    assert (calc.name, json.loads(calc.arguments), calc_out) == (
        "calculator",
        {"expression": "17 * 23"},
        "391",
    )
    assert (read.name, json.loads(read.arguments), read_out) == (
        "read_file",
        {"path": "notes.txt"},
        NOTES,
    )
    roles = [m["role"] for m in run.messages]
    assert roles == ["system", "user", "assistant", "tool", "tool", "assistant"]
    tool_messages = run.messages[3:5]
    assert [m["tool_call_id"] for m in tool_messages] == [calc.id, read.id]
    assert [m["content"] for m in tool_messages] == ["391", NOTES]
    # The second request's prompt carries both results: the model "read" them.
    assert "391" in engine.prompts[-1] and NOTES.strip() in engine.prompts[-1]
    for turn in run.turns:
        assert turn.reply.ttft is not None and 0 < turn.reply.ttft <= turn.reply.total


@pytest.mark.anyio
async def test_agent_over_one_socket(server_factory):
    engine = ScriptedEngine(SCRIPT)
    server = server_factory(CONFIG, engine)
    events: list[ClientEvent] = []
    run = await run_over_socket(server.http_url, QUESTION, root=WORKSPACE, on_event=events.append)
    check_run(run, engine)
    assert [event.kind for event in events] == ["open", "closed"]
    await async_wait_until(lambda: not server.sessions())
    metrics = scrape_metrics(server.http_url)
    assert metrics['realtime_ws_handshakes_total{outcome="accepted"}'] == 1
    assert metrics['realtime_requests_total{status="completed",transport="ws"}'] == 2


@pytest.mark.anyio
async def test_agent_over_http_with_the_openai_sdk(server_factory):
    engine = ScriptedEngine(SCRIPT)
    server = server_factory(CONFIG, engine)
    run = await run_over_http(server.http_url, QUESTION, root=WORKSPACE)
    check_run(run, engine)
    metrics = scrape_metrics(server.http_url)
    assert metrics['realtime_requests_total{status="completed",transport="http"}'] == 2
    assert 'realtime_ws_handshakes_total{outcome="accepted"}' not in metrics


@pytest.mark.anyio
async def test_agent_with_a_real_tokenizer_and_template(server_factory, tiny_model_dir):
    """With --model, the script replays through the model's BPE tokenizer and ChatML
    template: tool calls and results are rendered the way Qwen-style models see them."""
    engine = ScriptedEngine(SCRIPT, model_dir=tiny_model_dir)
    server = server_factory(CONFIG, engine)
    run = await run_over_socket(server.http_url, QUESTION, root=WORKSPACE)
    check_run(run, engine)
    assert "<tool_response>\n391\n</tool_response>" in engine.prompts[-1]


@pytest.mark.anyio
async def test_compare_prints_turns_answers_and_the_comparison(server_factory):
    server = server_factory(CONFIG, ScriptedEngine(SCRIPT))
    lines: list[str] = []
    runs = await compare(
        server.http_url, QUESTION, root=WORKSPACE, transports=["ws", "http"], write=lines.append
    )
    assert [run.transport for run in runs] == ["ws", "http"]
    assert all(run.answer == ANSWER for run in runs)
    text = "\n".join(lines)
    assert "[ws  ] turn 1" in text and "[http] turn 2" in text
    assert "calculator(" in text and "-> '391'" in text
    table = text.splitlines()[-3:]
    assert table[0].split() == [
        "transport",
        "turns",
        "mean",
        "ttft",
        "mean",
        "turn",
        "whole",
        "run",
    ]
    assert table[1].split()[:2] == ["ws", "2"] and table[2].split()[:2] == ["http", "2"]


def test_the_readme_command_runs(server_factory):
    """`python -m clients.agent --url ...` from the repository root, as README.md says."""
    server = server_factory(CONFIG, ScriptedEngine(SCRIPT))
    result = subprocess.run(
        [sys.executable, "-m", "clients.agent", "--url", server.http_url],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.count(f"] answer: {ANSWER}") == 2
    assert "transport" in result.stdout.splitlines()[-3]


def _serve_knows_script() -> bool:
    from realtime.cli import _parser

    try:
        with contextlib.redirect_stderr(io.StringIO()):  # argparse's usage message
            _parser().parse_args(["serve", "--engine", "scripted", "--script", str(SCRIPT)])
    except SystemExit:
        return False
    return True


@pytest.mark.skipif(not _serve_knows_script(), reason="`realtime serve --script` is not wired yet")
def test_the_readme_serve_command_with_the_agent(serve_process):
    """README.md's two commands as they stand: `realtime serve --engine scripted ...`
    in a subprocess (no model, no torch needed), then the agent over both transports."""
    server = serve_process(
        "--engine", "scripted", "--script", str(SCRIPT), "--tool-parser", "hermes"
    )  # fmt: skip
    result = subprocess.run(
        [sys.executable, "-m", "clients.agent", "--url", server.http_url],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr + server.stderr()
    assert result.stdout.count(f"] answer: {ANSWER}") == 2


def test_the_command_fails_cleanly_without_a_server():
    result = subprocess.run(
        [sys.executable, "-m", "clients.agent", "--url", "http://127.0.0.1:1", "--transport", "ws"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 1
    assert result.stderr.startswith("agent: ") and "connection refused" in result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.anyio
async def test_a_failing_tool_takes_the_scripts_error_branch(server_factory, tmp_path):
    """Without notes.txt the file tool returns an error; the model reads it and stops."""
    engine = ScriptedEngine(SCRIPT)
    server = server_factory(CONFIG, engine)
    run = await run_over_socket(server.http_url, QUESTION, root=tmp_path)
    assert run.turns[0].results[1][1] == "error: no such file in the workspace: notes.txt"
    assert run.answer.startswith("I could not finish")


@pytest.mark.anyio
async def test_a_model_that_never_stops_calling_tools_is_cut_off(server_factory):
    call = '<tool_call>\n{"name": "calculator", "arguments": {"expression": "1 + 1"}}\n</tool_call>'
    engine = ScriptedEngine([{"match": "again", "reply": call}])
    server = server_factory(CONFIG, engine)
    with pytest.raises(AgentError, match="after 3 steps"):
        await run_over_socket(server.http_url, "again and again", root=WORKSPACE, max_steps=3)
    assert engine.stats.requests_finished == 3


def test_endpoints():
    assert endpoints("http://127.0.0.1:8000") == (
        "ws://127.0.0.1:8000/v1/realtime",
        "http://127.0.0.1:8000/v1",
    )
    assert endpoints("https://example.com/llm/v1/") == (
        "wss://example.com/llm/v1/realtime",
        "https://example.com/llm/v1",
    )


# --- the calculator ---


@pytest.mark.parametrize(
    ("expression", "value"),
    [
        ("17 * 23", "391"),
        ("2 + 3 * 4", "14"),
        ("(2 + 3) * 4", "20"),
        ("2 ** 3 ** 2", "512"),  # right-associative
        ("-2 ** 2", "-4"),  # ** binds tighter than unary minus
        ("10 - 4 - 3", "3"),  # left-associative
        ("7 / 2", "3.5"),
        ("6 / 2", "3"),
        ("7 // 2", "3"),
        ("-7 // 2", "-4"),
        ("7 % 3", "1"),
        ("0.1 + 0.2", "0.3"),
        ("2 ** -1", "0.5"),
        (" +5 ", "5"),
        ("1e3 * 2", "2000"),
    ],
)
def test_calculator_evaluates_arithmetic_with_python_precedence(expression, value):
    assert format_number(calculate(expression)) == value


@pytest.mark.parametrize(
    ("expression", "message"),
    [
        ("x + 1", "names are not allowed: x"),
        ("__import__('os').system('id')", "function calls are not allowed"),
        ("abs(-3)", "function calls are not allowed"),
        ("(1).real", "attributes are not allowed: .real"),
        ("'a' * 3", "not a number: 'a'"),
        ("True + 1", "not a number: True"),
        ("1j * 1j", "not a number: 1j"),
        ("[1, 2]", "not allowed in an arithmetic expression: List"),
        ("1 if 1 else 2", "not allowed in an arithmetic expression: IfExp"),
        ("1 < 2", "not allowed in an arithmetic expression: Compare"),
        ("lambda: 1", "not allowed in an arithmetic expression: Lambda"),
        ("17 *", "not an arithmetic expression"),
        ("1; 2", "not an arithmetic expression"),
        ("1 / 0", "division by zero"),
        ("5 // (3 - 3)", "division by zero"),
        ("5 % 0", "division by zero"),
        ("9 ** 9 ** 9", "the result is too large"),
        ("10.0 ** 400", "the result is too large"),
        ("1" * 501, "longer than 500 characters"),
    ],
)
def test_calculator_refuses_everything_but_arithmetic(expression, message):
    with pytest.raises(ToolError, match=message.replace("(", r"\(").replace(")", r"\)")):
        calculate(expression)


def test_run_tool_returns_results_and_errors_as_text(tmp_path):
    assert run_tool("calculator", '{"expression": "17 * 23"}', root=tmp_path) == "391"
    assert run_tool("calculator", '{"expression": "1/0"}', root=tmp_path) == (
        "error: division by zero"
    )
    assert run_tool("calculator", "{}", root=tmp_path) == (
        "error: argument 'expression' must be a string"
    )
    assert run_tool("calculator", "[1]", root=tmp_path) == "error: arguments must be a JSON object"
    assert run_tool("calculator", "{", root=tmp_path).startswith("error: arguments are not valid")
    assert run_tool("shell", '{"cmd": "ls"}', root=tmp_path) == "error: unknown tool 'shell'"


# --- the file tool ---


def test_read_file_reads_inside_its_root(tmp_path):
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "a.txt").write_text("alpha", encoding="utf-8")
    assert read_file("sub/a.txt", tmp_path) == "alpha"
    assert read_file("sub/../sub/./a.txt", tmp_path) == "alpha"
    assert read_file("notes.txt", WORKSPACE) == NOTES


@pytest.mark.parametrize(
    "path",
    ["../secret.txt", "sub/../../secret.txt", "../" * 20 + "etc/passwd", "/etc/passwd", "link"],
)
def test_read_file_refuses_paths_outside_its_root(tmp_path, path):
    root = tmp_path / "root"
    (root / "sub").mkdir(parents=True)
    (tmp_path / "secret.txt").write_text("do not show", encoding="utf-8")
    (root / "link").symlink_to(tmp_path / "secret.txt")
    with pytest.raises(ToolError, match="outside the workspace"):
        read_file(path, root)
    assert "refused" in run_tool("read_file", json.dumps({"path": path}), root=root)


def test_read_file_errors(tmp_path):
    (tmp_path / "dir").mkdir()
    (tmp_path / "binary.bin").write_bytes(b"\xff\xfe\x00")
    (tmp_path / "big.txt").write_text("x" * (MAX_FILE_BYTES + 10), encoding="utf-8")
    for path, message in [
        ("missing.txt", "no such file"),
        ("dir", "no such file"),
        ("binary.bin", "not a UTF-8 text file"),
        ("", "no path given"),
        ("a\x00b", "bad path"),
    ]:
        with pytest.raises(ToolError, match=message):
            read_file(path, tmp_path)
    big = read_file("big.txt", tmp_path)
    assert big.startswith("x" * MAX_FILE_BYTES) and big.endswith("[truncated at 65536 bytes]")
