"""The hardening flags of `realtime serve` reach ServerConfig with their documented defaults."""

from __future__ import annotations

import pytest

from realtime.cli import _parser, config_from_args, open_server_warning
from realtime.config import ServerConfig
from realtime.server import uvicorn_config


def _config(*argv: str) -> ServerConfig:
    return config_from_args(_parser().parse_args(["serve", *argv]))


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
