"""The page's routes (realtime/http/ui.py) and its packaging; no browser needed."""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import httpx
import pytest

from realtime.http.ui import CHECKOUT_DIR, PACKAGED_DIR, default_static_dir, ui_routes
from tests.client.servers import with_ui

REPO_ROOT = Path(__file__).resolve().parents[2]
PAGE_FILES = {
    "index.html": "text/html; charset=utf-8",
    "app.js": "text/javascript; charset=utf-8",
    "realtime.js": "text/javascript; charset=utf-8",
    "style.css": "text/css; charset=utf-8",
}


def test_the_page_and_its_files_are_served(server):
    with_ui(server.app)
    with httpx.Client(base_url=server.http_url) as http:
        page = http.get("/")
        assert page.status_code == 200
        assert page.headers["content-type"] == "text/html; charset=utf-8"
        assert page.text == (CHECKOUT_DIR / "index.html").read_text()
        assert "script-src 'self'" in page.headers["content-security-policy"]
        assert page.headers["x-content-type-options"] == "nosniff"
        assert page.headers["cache-control"] == "no-cache"
        for name, media_type in PAGE_FILES.items():
            response = http.get(f"/{name}")
            assert response.status_code == 200, name
            assert response.headers["content-type"] == media_type
            assert response.content == (CHECKOUT_DIR / name).read_bytes()
        assert http.head("/realtime.js").status_code == 200


def test_the_api_and_its_404s_are_unchanged(server):
    with_ui(server.app)
    with httpx.Client(base_url=server.http_url) as http:
        missing = http.get("/no-such-file.js")
        assert missing.status_code == 404
        assert missing.json()["error"]["code"] == "not_found"
        assert http.get("/README.md").status_code == 404  # only page files are routed
        assert http.post("/").status_code == 405
        assert http.get("/v1/models").json()["data"][0]["id"] == "echo"


def test_routes_for_another_directory(tmp_path: Path):
    (tmp_path / "index.html").write_text("<!doctype html>")
    (tmp_path / "logo.svg").write_text("<svg/>")
    (tmp_path / "notes.md").write_text("not served")
    (tmp_path / ".hidden.js").write_text("not served")
    paths = sorted(route.path for route in ui_routes(tmp_path))
    assert paths == ["/", "/index.html", "/logo.svg"]


def test_the_repository_has_one_copy_of_the_page():
    assert PACKAGED_DIR.is_symlink() and PACKAGED_DIR.resolve() == CHECKOUT_DIR.resolve()
    assert default_static_dir() == PACKAGED_DIR
    assert {p.name for p in CHECKOUT_DIR.iterdir()} >= set(PAGE_FILES)


@pytest.mark.skipif(
    importlib.util.find_spec("setuptools") is None, reason="building a wheel needs setuptools"
)
def test_a_built_wheel_carries_the_page(tmp_path: Path):
    source = tmp_path / "src"
    source.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO_ROOT / name, source / name)
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    shutil.copytree(REPO_ROOT / "realtime", source / "realtime", symlinks=True, ignore=ignore)
    shutil.copytree(REPO_ROOT / "clients" / "browser", source / "clients" / "browser")
    subprocess.run(
        [sys.executable, "-c", "from setuptools import build_meta; build_meta.build_wheel('dist')"],
        cwd=source,
        check=True,
        capture_output=True,
        timeout=120,
    )
    (wheel,) = (source / "dist").glob("*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    assert {f"realtime/ui_static/{name}" for name in PAGE_FILES} <= names
    assert "realtime/http/ui.py" in names
