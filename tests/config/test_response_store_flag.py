"""`--response-store` takes a directory or a postgresql:// URL; any other URL is refused, never
made into `./scheme:/...`, and a URL's password is never echoed."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import pytest

from realtime.app import response_store
from realtime.cli import _parser
from realtime.config import ServerConfig
from realtime.config.values import store_url_refusal

URL = "redis://app:s3cret@cache.internal:6379/0"


@pytest.mark.parametrize(
    "value", [URL, "sqlite:///var/lib/responses.db", "redis://cache", "s3://bucket/p"]
)
def test_a_url_is_refused_by_its_scheme(value):
    refusal = store_url_refusal(value)
    assert refusal is not None and refusal.startswith(value.split("://")[0] + ":// URLs")


@pytest.mark.parametrize(
    "value", ["responses", "./postgresql", "/var/lib/realtime", "a:b", "dir/with://inside", "~/x"]
)
def test_a_path_is_a_path(value):
    assert store_url_refusal(value) is None
    assert _parser().parse_args(["serve", "--response-store", value]).response_store == value


def test_serve_refuses_a_url_with_one_line_and_exit_status_2_creating_nothing(tmp_path: Path):
    result = subprocess.run(
        [sys.executable, "-m", "realtime", "serve", "--response-store", URL],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
    )
    assert result.returncode == 2
    assert result.stderr.splitlines() == [
        "usage: realtime serve [-h] [OPTIONS]",
        "realtime serve: error: argument --response-store: redis:// URLs are not supported:"
        " give a postgresql:// URL (a shared store), a directory (stored responses are kept"
        " in SQLite there) or leave the flag out (kept in memory)",
    ]
    assert "s3cret" not in result.stderr  # the URL's password is never echoed
    assert list(tmp_path.iterdir()) == []  # no ./redis:/ directory, no SQLite file


def test_an_embedder_passing_a_url_gets_a_value_error_and_nothing_on_disk():
    with pytest.raises(ValueError, match=r"^response store: redis:// URLs"):
        response_store(ServerConfig(response_store_dir=URL))
    assert not Path("redis:").exists()


@pytest.mark.parametrize(
    "value", ["postgresql://app:s3cret@db.internal:5432/realtime", "postgres://db/x"]
)
def test_a_postgresql_url_is_a_store(value):
    assert store_url_refusal(value) is None
    assert _parser().parse_args(["serve", "--response-store", value]).response_store == value


def test_an_unreachable_postgresql_store_stops_the_start_with_one_line_without_the_password(
    tmp_path: Path,
):
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    url = f"postgresql://app:s3cret@127.0.0.1:{port}/realtime"
    result = subprocess.run(
        [sys.executable, "-m", "realtime", "serve", "--port", "0", "--response-store", url],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
    )
    assert result.returncode == 2
    (line,) = [line for line in result.stderr.splitlines() if not line.startswith("INFO")]
    assert line.startswith(
        "realtime: cannot start: cannot open the response store"
        f" postgresql://app:***@127.0.0.1:{port}/realtime: "
    ), line
    assert "s3cret" not in result.stderr + result.stdout
    assert list(tmp_path.iterdir()) == []


def test_a_store_directory_that_cannot_be_used_is_not_blamed_on_the_engine(tmp_path: Path):
    taken = tmp_path / "a-file"
    taken.write_text("")
    result = subprocess.run(
        [sys.executable, "-m", "realtime", "serve", "--port", "0", "--response-store", str(taken)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2
    (line,) = [line for line in result.stderr.splitlines() if not line.startswith("INFO")]
    assert line.startswith("realtime: cannot start: cannot open the response store ")
