"""The flag table: one flag per `ServerConfig` field, every flag in the docs, and the
flags of `realtime serve` reaching ServerConfig with their documented defaults."""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path

import pytest

from realtime.cli import _parser, config_from_args, open_server_warning
from realtime.config import ServerConfig
from realtime.config.flags import FLAGS, GROUPS, Flag
from realtime.config.values import Integer, Number
from realtime.server import uvicorn_config

DOCS = Path(__file__).resolve().parents[2] / "docs"
FIELDS = [field.name for field in dataclasses.fields(ServerConfig)]


def _config(*argv: str) -> ServerConfig:
    return config_from_args(_parser().parse_args(["serve", *argv]))


# --- the table ----------------------------------------------------------------


def test_every_config_field_has_exactly_one_flag():
    for name in FIELDS:
        owners = [flag.option for flag in FLAGS if flag.field == name]
        if name == "engine_options":  # filled by the engine flags, keyword by keyword
            assert owners == []
        else:
            assert len(owners) == 1, f"ServerConfig.{name} is set by {owners or 'no flag'}"
    keywords = [(flag.engine.engines, flag.engine.keyword) for flag in FLAGS if flag.engine]
    assert len(keywords) == len(set(keywords)) >= 10


def test_every_flag_sets_exactly_one_thing_that_exists():
    for flag in FLAGS:
        targets = [flag.field, flag.engine, flag.adds_to]
        assert sum(target is not None for target in targets) == 1, flag.option
        for name in (flag.field, flag.adds_to):
            assert name is None or name in FIELDS, flag.option
        if flag.adds_to is not None:  # to a field another flag sets, or to the engine's bag
            assert flag.adds_to == "engine_options" or any(
                other.field == flag.adds_to for other in FLAGS
            ), flag.option
        assert flag.group in GROUPS and flag.help, flag.option
        assert flag.limit is None or flag.field is not None, flag.option
    options = [flag.option for flag in FLAGS]
    assert len(options) == len(set(options))


def _serve_parser() -> argparse.ArgumentParser:
    commands = next(
        action for action in _parser()._actions if isinstance(action, argparse._SubParsersAction)
    )
    parser: argparse.ArgumentParser = commands.choices["serve"]
    return parser


def test_the_command_line_has_exactly_the_tables_flags():
    """A flag added to argparse by hand, outside the table, fails here."""
    given = {option for action in _serve_parser()._actions for option in action.option_strings}
    assert given == {flag.option for flag in FLAGS} | {"-h", "--help"}


def test_every_flag_is_in_the_docs_with_its_default():
    flags_md = (DOCS / "flags.md").read_text(encoding="utf-8")
    protocol_md = (DOCS / "protocol.md").read_text(encoding="utf-8")
    for flag in FLAGS:
        assert f"| `{flag.option}` |" in flags_md, flag.option
        if flag.limit is not None:
            assert f"| `{flag.option}` |" in protocol_md, flag.option
    # a default as the docs write it
    assert "| `--max-frame-bytes` | integer, 1 or more | 8388608 | `max_frame_bytes` |" in flags_md
    assert "| `--max-json-depth` | integer, 1 to 256 | 64 |" in flags_md


def _sample(flag: Flag) -> tuple[list[str], object]:
    """Arguments that give `flag` a value other than its default, and the field's value."""
    if flag.kind == "switch":
        return [flag.option], True
    if flag.kind == "off":
        return [flag.option], False
    if flag.kind == "repeat":
        return [flag.option, "sk-one", flag.option, "sk-two"], ("sk-one", "sk-two")
    if flag.none_as is not None and getattr(ServerConfig(), flag.field) is not None:
        return [flag.option, str(flag.none_as)], None  # `--ws-ping-interval 0`: None
    if flag.choices is not None:
        choice = next(c for c in flag.choices if c not in (flag.default(), "auto"))
        return [flag.option, choice], choice
    if isinstance(flag.value, (Integer, Number)):
        value = flag.value.minimum + 1
        return [flag.option, str(value)], value
    if flag.value is float:
        return [flag.option, "0.25"], 0.25
    return [flag.option, "given"], "given"


@pytest.mark.parametrize(
    "flag", [flag for flag in FLAGS if flag.field is not None], ids=lambda flag: flag.option
)
def test_each_flag_reaches_its_field(flag):
    argv, expected = _sample(flag)
    config = _config(*argv)
    assert getattr(config, flag.field) == expected
    assert getattr(config, flag.field) != getattr(ServerConfig(), flag.field)


# --- the command line ---------------------------------------------------------


def test_defaults_equal_server_config():
    assert _config() == ServerConfig()


def test_every_new_flag_reaches_the_config(tmp_path):
    keys = tmp_path / "keys.txt"
    keys.write_text("sk-from-file\n# comment\nsk-two\n")
    config = _config(
        "--api-key", "sk-a", "--api-key", "sk-b", "--api-key-file", str(keys),
        "--allowed-origin", "https://a.example", "--allowed-origin", "*",
        "--max-in-flight", "3", "--max-connections", "7", "--outbound-queue", "9",
        "--slow-consumer-timeout", "2.5", "--idle-timeout", "0", "--max-session", "60",
        "--session-expiry-grace", "5", "--ws-ping-interval", "0", "--ws-ping-timeout", "4",
        "--max-tokens-cap", "100", "--log-format", "json", "--gc-threshold", "0",
    )  # fmt: skip
    assert config.api_keys == ("sk-a", "sk-b", "sk-from-file", "sk-two")
    assert config.allowed_origins == ("https://a.example", "*")
    assert (config.max_in_flight_per_socket, config.max_connections) == (3, 7)
    assert config.outbound_queue_frames == 9
    assert config.slow_consumer_seconds == 2.5 and config.idle_timeout_seconds == 0
    assert config.max_session_seconds == 60 and config.session_expiry_grace_seconds == 5
    assert config.ws_ping_interval is None and config.ws_ping_timeout == 4
    assert config.max_tokens_cap == 100 and config.log_format == "json"
    assert config.gc_threshold == 0


def test_ping_settings_reach_uvicorn():
    from realtime.app import build_app

    config = _config("--ws-ping-interval", "3", "--ws-ping-timeout", "0")
    uv = uvicorn_config(config, build_app(config))
    assert uv.ws_ping_interval == 3 and uv.ws_ping_timeout is None


def test_http_limit_flags_reach_the_config_and_uvicorn():
    from realtime.app import build_app
    from realtime.http.protocol import LimitedHttpToolsProtocol

    config = _config(
        "--max-header-bytes", "2048", "--max-headers", "7", "--header-timeout", "2.5",
        "--max-body-bytes", "1000", "--body-timeout", "0", "--forwarded-allow-ips", "10.0.0.5",
    )  # fmt: skip
    assert (config.max_header_bytes, config.max_header_count) == (2048, 7)
    assert (config.header_timeout_seconds, config.body_timeout_seconds) == (2.5, 0)
    assert config.max_body_bytes == 1000 and config.forwarded_allow_ips == "10.0.0.5"
    uv = uvicorn_config(config, build_app(config))
    assert uv.forwarded_allow_ips == "10.0.0.5"
    protocol = uv.http
    assert isinstance(protocol, type) and issubclass(protocol, LimitedHttpToolsProtocol)
    limits = protocol.limits
    assert (limits.max_header_bytes, limits.max_header_count) == (2048, 7)
    assert (limits.header_timeout, limits.max_body_bytes, limits.body_timeout) == (2.5, 1000, 0)


@pytest.mark.parametrize(
    "argv",
    [
        ["--max-header-bytes", "0"],
        ["--max-headers", "0"],
        ["--header-timeout", "-1"],
        ["--max-body-bytes", "0"],
        ["--body-timeout", "-1"],
        ["--api-key", "has space"],
        ["--max-in-flight", "0"],
        ["--max-connections", "0"],
        ["--idle-timeout", "-1"],
        ["--max-tokens-cap", "-5"],
        ["--gc-threshold", "-1"],
        ["--gc-threshold", "many"],
        ["--log-format", "xml"],
        ["--port", "70000"],
        ["--port", "-1"],
        ["--max-json-depth", "257"],
    ],
)
def test_bad_values_are_usage_errors(argv, capsys):
    with pytest.raises(SystemExit) as exit_info:
        _parser().parse_args(["serve", *argv])
    assert exit_info.value.code == 2


def test_a_missing_key_file_is_a_usage_error(tmp_path, capsys):
    from realtime.cli import main

    with pytest.raises(SystemExit) as exit_info:
        main(["serve", "--api-key-file", str(tmp_path / "nope")])
    assert exit_info.value.code == 2
    assert "--api-key-file" in capsys.readouterr().err


def test_open_server_warning_only_without_keys_off_loopback():
    assert open_server_warning(ServerConfig(host="127.0.0.1")) is None
    assert open_server_warning(ServerConfig(host="0.0.0.0", api_keys=("sk-x",))) is None
    warning = open_server_warning(ServerConfig(host="0.0.0.0"))
    assert warning is not None and "without API keys" in warning


def test_engine_auto_keeps_the_chosen_engines_flags_and_names_it(monkeypatch):
    import realtime.engine.auto as auto

    monkeypatch.setattr(auto, "choose_engine", lambda: ("cpu", "cpu, because no CUDA here"))
    args = _parser().parse_args(
        [
            "serve",
            "--engine",
            "auto",
            "--model",
            "m",
            "--max-cache-tokens",
            "0",
            "--cache-mode",
            "Q6",
        ]
    )
    config = config_from_args(args)
    # The exllamav2 flag is for the engine auto did not choose: ignored, not an error.
    assert config.engine == "cpu" and config.engine_options == {"max_cache_tokens": 0}


def test_a_flag_for_another_named_engine_is_an_error():
    args = _parser().parse_args(["serve", "--engine", "cpu", "--model", "m", "--cache-mode", "Q6"])
    with pytest.raises(ValueError, match="--cache-mode applies to the exllamav2 engine only"):
        config_from_args(args)


def test_max_batch_size_belongs_to_both_batching_engines():
    for engine in ("cpu", "exllamav2"):
        args = _parser().parse_args(["serve", "--engine", engine, "--max-batch-size", "4"])
        assert config_from_args(args).engine_options == {"max_batch_size": 4}
    args = _parser().parse_args(["serve", "--engine", "echo", "--max-batch-size", "4"])
    with pytest.raises(ValueError, match="applies to the cpu and exllamav2 engine only"):
        config_from_args(args)


def test_engine_flags_reach_the_engine_as_python_values():
    """--gpu-split gives a list: it used to be looked up in the on/off/auto map (TypeError)."""
    args = _parser().parse_args(
        ["serve", "--engine", "exllamav2", "--gpu-split", "20,24", "--paged", "on"]
    )
    assert config_from_args(args).engine_options == {"gpu_split": [20.0, 24.0], "paged": True}
    args = _parser().parse_args(["serve", "--engine", "exllamav2", "--paged", "off"])
    assert config_from_args(args).engine_options == {"paged": False}
