"""`--response-store` takes a directory; a URL is refused, never made into `./scheme:/...`."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from realtime.app import response_store
from realtime.cli import _parser
from realtime.config import ServerConfig
from realtime.config.values import store_url_refusal

URL = "postgresql://app:s3cret@db.internal:5432/realtime"


@pytest.mark.parametrize(
    "value",
    [URL, "postgres://db/x", "sqlite:///var/lib/responses.db", "redis://cache", "s3://bucket/p"],
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
        "realtime serve: error: argument --response-store: postgresql:// URLs are not"
        " supported: give a directory (stored responses are kept in SQLite there) or leave"
        " the flag out (kept in memory)",
    ]
    assert "s3cret" not in result.stderr  # the URL's password is never echoed
    assert list(tmp_path.iterdir()) == []  # no ./postgresql:/ directory, no SQLite file


def test_an_embedder_passing_a_url_gets_a_value_error_and_nothing_on_disk():
    with pytest.raises(ValueError, match=r"^response store: postgresql:// URLs"):
        response_store(ServerConfig(response_store_dir=URL))
    assert not Path("postgresql:").exists()


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
