"""`realtime serve --engine` with engines from outside: module paths, options, one-line errors."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import openai
import pytest

from realtime.cli import _parser, config_from_args
from realtime.config import ServerConfig
from tests.conftest import ServerProcess, spawn_server


def _config(*argv: str) -> ServerConfig:
    return config_from_args(_parser().parse_args(["serve", *argv]))


def serve_fails(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "realtime", "serve", "--port", "0", *args],
        capture_output=True,
        text=True,
        timeout=60,
    )


def ask(server: ServerProcess) -> tuple[str | None, str]:
    client = openai.OpenAI(base_url=server.http_url + "/v1", api_key="unused", max_retries=0)
    [model] = client.models.list()
    answer = client.chat.completions.create(
        model=model.id, messages=[{"role": "user", "content": "same words back"}], max_tokens=2
    )
    return answer.choices[0].message.content, model.id


def test_a_builtin_by_its_module_path_serves_as_the_builtin() -> None:
    by_name = spawn_server("--engine", "echo", "--model-name", "e")
    by_path = spawn_server("--engine", "realtime.engine.echo:EchoEngine", "--model-name", "e")
    try:
        assert ask(by_path) == ask(by_name) == ("same words", "e")
    finally:
        assert by_name.stop() == 0 and by_path.stop() == 0


def test_a_builtin_by_its_module_path_takes_its_flags() -> None:
    config = _config("--engine", "realtime.engine.scripted:ScriptedEngine", "--script", "s.json")
    assert (config.engine, config.engine_options) == ("scripted", {"script": "s.json"})


@pytest.mark.parametrize(
    ("args", "line"),
    [
        (
            ["--engine", "no_such_package.engines:make"],
            "realtime: cannot load engine 'no_such_package.engines:make': cannot import"
            " 'no_such_package.engines': ModuleNotFoundError: No module named 'no_such_package'",
        ),
        (
            ["--engine", "json:no_such_factory"],
            "realtime: cannot load engine 'json:no_such_factory': module 'json' has no"
            " 'no_such_factory'",
        ),
        (
            ["--engine", "json:dumps"],
            "realtime: cannot start engine 'json:dumps': the factory raised TypeError: dumps()"
            " missing 1 required positional argument: 'obj'",
        ),
        (
            ["--engine", "builtins:dict"],
            "realtime: cannot start engine 'builtins:dict': the factory returned a dict, not an"
            " engine (it lacks info, ready, unavailable_reason, generate, start, close)",
        ),
    ],
)
def test_an_engine_that_cannot_be_had_is_one_line_and_exit_2(args: list[str], line: str) -> None:
    result = serve_fails(*args)
    assert result.returncode == 2
    assert result.stderr == line + "\n"


def test_engine_options_are_json_when_they_are_json() -> None:
    config = _config(
        "--engine-option", "size=99", "--engine-option", "owner=me",
        "--engine-option", 'tags=["a", 1]', "--engine-option", "on=true",
    )  # fmt: skip
    assert config.engine_options == {"size": 99, "owner": "me", "tags": ["a", 1], "on": True}


def test_engine_options_reach_the_factory_as_keywords() -> None:
    from realtime.app import engine_from_config

    config = _config("--engine", "echo", "--engine-option", "context_length=99")
    assert engine_from_config(config).info.context_length == 99
    wrong = _config("--engine", "echo", "--engine-option", "colour=red")
    with pytest.raises(ValueError, match="unexpected keyword argument 'colour'"):
        engine_from_config(wrong)


def test_an_engine_option_given_twice_is_an_error() -> None:
    with pytest.raises(ValueError, match="the engine option 'max_batch_size' is given twice"):
        _config("--engine", "cpu", "--max-batch-size", "2", "--engine-option", "max_batch_size=3")


@pytest.mark.parametrize("option", ["no-equals", "=1", "two words=1"])
def test_a_malformed_engine_option_is_refused(option: str) -> None:
    result = serve_fails("--engine-option", option)
    assert result.returncode == 2
    assert "expected KEY=VALUE with KEY a name" in result.stderr


def test_a_plugin_takes_no_builtin_engine_flags() -> None:
    with pytest.raises(ValueError, match="--cache-size applies to the exllamav2 engine only"):
        _config("--engine", "json:dumps", "--cache-size", "512")


def test_an_engine_whose_start_fails_is_one_line(tmp_path: Path) -> None:
    (tmp_path / "badstart.py").write_text(
        "from realtime.engine.echo import EchoEngine\n"
        "class BadStart(EchoEngine):\n"
        "    async def start(self):\n"
        "        raise RuntimeError('no weights here')\n"
    )
    result = subprocess.run(
        [sys.executable, "-m", "realtime", "serve", "--port", "0", "--engine", "badstart:BadStart"],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PYTHONPATH": str(tmp_path)},
    )
    assert result.returncode != 0
    assert "ERROR uvicorn.error: cannot start the engine: RuntimeError: no weights here\n" in (
        result.stderr
    )
    assert "Traceback" not in result.stderr
