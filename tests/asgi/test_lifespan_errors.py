"""OneLineLifespanErrors: a startup failure is logged as its exception's line, not a traceback."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from realtime.asgi.lifespan_errors import OneLineLifespanErrors, last_line

pytestmark = pytest.mark.anyio

TRACEBACK = (
    "Traceback (most recent call last):\n"
    '  File "engine.py", line 4, in start\n'
    '    raise RuntimeError("no weights here")\n'
    "RuntimeError: no weights here\n"
)


async def run(message: dict[str, Any], kind: str = "lifespan") -> list[dict[str, Any]]:
    async def app(scope: Any, receive: Any, send: Any) -> None:
        await send(message)

    sent: list[dict[str, Any]] = []

    async def send(m: dict[str, Any]) -> None:
        sent.append(m)

    async def receive() -> dict[str, Any]:
        return {}

    await OneLineLifespanErrors(app)({"type": kind}, receive, send)
    return sent


async def test_a_failed_startup_is_one_line(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="realtime")
    sent = await run({"type": "lifespan.startup.failed", "message": TRACEBACK})
    assert sent == [
        {
            "type": "lifespan.startup.failed",
            "message": "cannot start the engine: RuntimeError: no weights here",
        }
    ]
    [record] = caplog.records
    assert record.levelno == logging.DEBUG and "Traceback" in record.getMessage()


async def test_other_messages_pass_unchanged() -> None:
    for message in (
        {"type": "lifespan.startup.complete"},
        {"type": "http.response.start", "status": 200, "headers": []},
    ):
        assert await run(message, "lifespan" if "lifespan" in message["type"] else "http") == [
            message
        ]


def test_last_line() -> None:
    assert last_line(TRACEBACK) == "RuntimeError: no weights here"
    assert last_line("") == "no reason given"
