"""Adding a protocol takes its own package and one registration line: shown on a real server.

`tests/dialects/upper_echo/` is a whole made-up protocol (its dialect, its job on
the chat pipeline, its handshake selector), written as a package of
`realtime/dialects/` would be. `UPPER` below is the one line that adds it: an
entry of the socket-protocol list `build_app` takes (`SOCKET_PROTOCOLS` and this
one). A real uvicorn server serves it and the real `websockets` client speaks it,
beside the built-in protocols, which it leaves as they were.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import InvalidStatus

from realtime.app import SOCKET_PROTOCOLS, SocketProtocol
from realtime.config import ServerConfig
from tests.conftest import async_wait_until
from tests.dialects.upper_echo.selector import upper_echo
from tests.ws.wsclient import chat, collect_until_terminal, text_of

pytestmark = pytest.mark.anyio

#: The registration line.
UPPER = SocketProtocol("/v1/upper", lambda parts: upper_echo(parts.pipeline))


@pytest.fixture
def server(server_factory: Any) -> Any:
    config = ServerConfig(echo_delay=0.002, log_level="warning")
    return server_factory(config, protocols=[*SOCKET_PROTOCOLS, UPPER])


def url(server: Any, path: str = "/v1/upper") -> str:
    return f"ws://127.0.0.1:{server.port}{path}"


async def until(ws: Any, kind: str) -> list[dict[str, Any]]:
    frames = []
    while True:
        frames.append(json.loads(await ws.recv()))
        if frames[-1]["type"] == kind:
            return frames


async def test_the_new_protocol_answers_on_its_route_in_its_own_shapes(server: Any) -> None:
    async with connect(url(server)) as ws:
        assert json.loads(await ws.recv()) == {"type": "upper.ready", "model": "echo"}
        await ws.send("hello there world")
        await ws.send("and again")
        first = await until(ws, "upper.done")
        second = await until(ws, "upper.done")
    assert first[0] == {"type": "upper.started", "id": "up_1"}
    assert "".join(f["text"] for f in first if f["type"] == "upper.delta") == "HELLO THERE WORLD"
    assert first[-1] == {"type": "upper.done", "id": "up_1", "status": "completed", "tokens": 3}
    assert "".join(f["text"] for f in second if f["type"] == "upper.delta") == "AND AGAIN"
    assert second[-1]["id"] == "up_2" and second[-1]["status"] == "completed"


async def test_its_cancel_stops_the_engine(server: Any) -> None:
    engine = server.engine
    long = " ".join(f"w{i}" for i in range(2000))
    async with connect(url(server)) as ws:
        await ws.recv()  # upper.ready
        await ws.send(long)
        await until(ws, "upper.delta")
        await ws.send("cancel")
        frames = await until(ws, "upper.done")
    assert frames[-1]["status"] == "cancelled" and frames[-1]["tokens"] < 2000
    await async_wait_until(lambda: engine.stats.active == 0)
    assert engine.stats.requests_cancelled == 1
    assert engine.stats.tokens_generated < 2000


async def test_a_bad_frame_costs_only_an_error_frame(server: Any) -> None:
    async with connect(url(server)) as ws:
        await ws.recv()  # upper.ready
        await ws.send(b"\x00\x01")
        assert json.loads(await ws.recv()) == {
            "type": "upper.error",
            "id": None,
            "code": "binary_frame",
        }
        await ws.send("still here")
        frames = await until(ws, "upper.done")
    assert "".join(f["text"] for f in frames if f["type"] == "upper.delta") == "STILL HERE"


async def test_the_built_in_protocols_are_unchanged_beside_it(server: Any) -> None:
    async with connect(server.ws_url) as ws:
        await ws.send(chat("plain chat", request_id="c"))
        frames = await collect_until_terminal(ws)
    assert text_of(frames) == "plain chat" and frames[-1]["type"] == "response.done"


async def test_without_the_line_the_route_does_not_exist(server_factory: Any) -> None:
    plain = server_factory(ServerConfig(log_level="warning"))
    with pytest.raises(InvalidStatus) as refused:
        async with connect(url(plain)):
            pass
    assert refused.value.response.status_code == 403  # no route: starlette refuses it
