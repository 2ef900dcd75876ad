"""The socket transport stays thin: its decisions live in `realtime.session`, its modules small."""

from __future__ import annotations

from tests.test_layers import PACKAGE

MAX_LINES = 450


def test_no_module_under_ws_is_over_450_lines() -> None:
    sizes = {
        path.name: len(path.read_text(encoding="utf-8").splitlines())
        for path in (PACKAGE / "ws").glob("*.py")
    }
    assert "session.py" in sizes and sizes["session.py"] > 100  # the glue is really read
    assert {name: n for name, n in sizes.items() if n > MAX_LINES} == {}
