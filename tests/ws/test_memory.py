"""A closed socket's objects are freed by reference counting, not left for the garbage collector.

Why it matters: `realtime serve` tunes the collector to run rarely (`server.tune_gc`),
so objects kept alive only by a reference cycle wait minutes to hours, and under
steady connection churn the server's RSS rose for as long as the soak ran. The
test disables the collector, opens and closes real sockets (requests, a cancel, a
dropped connection), then asks the collector what it would have had to free.
"""

from __future__ import annotations

import asyncio
import gc
import json
from collections import Counter
from collections.abc import Iterator

import pytest
from websockets.asyncio.client import connect

from realtime.config import ServerConfig
from tests.conftest import async_wait_until
from tests.ws.wsclient import chat, collect_until_terminal

pytestmark = pytest.mark.anyio

#: Server-side objects of one socket; none may end up as cyclic garbage.
SERVER_TYPES = {
    "RealtimeSession",
    "Outbox",
    "RequestQueue",
    "RealtimeWebSocketProtocol",
    "RealtimeServerProtocol",
    "HttpToolsProtocol",
    "HttpRequestParser",
}


@pytest.fixture
def collector_off() -> Iterator[None]:
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        gc.enable()


def server_objects() -> Counter[str]:
    """Server-side objects of sockets still in memory, freed or not yet, by type name.

    Not `gc.garbage` under DEBUG_SAVEALL: a cycle through a suspended generator (the
    websockets parser) is broken when the collector finalizes the generator, and its
    objects are then freed by reference counting without ever being listed there.
    """
    return Counter(
        name for o in gc.get_objects() if (name := type(o).__name__) in SERVER_TYPES
    )


async def test_closed_sockets_leave_no_cyclic_garbage_on_the_server(server_factory, collector_off):
    server = server_factory(ServerConfig(echo_delay=0.005, log_level="warning"))
    long_text = " ".join(f"w{i}" for i in range(50))
    for _ in range(5):
        async with connect(server.ws_url) as ws:
            await ws.send(chat("one two three", request_id="a"))
            await collect_until_terminal(ws)
            await ws.send(chat(long_text, request_id="b"))
            await ws.recv()
            await ws.send(json.dumps({"type": "response.cancel", "request_id": "b"}))
            await collect_until_terminal(ws)
    dropped = await connect(server.ws_url)
    await dropped.send(chat(long_text, request_id="c"))
    await dropped.recv()
    dropped.transport.abort()
    await async_wait_until(lambda: not server.sessions() and server.engine.stats.active == 0)
    await asyncio.sleep(0.2)  # the server's last callbacks of those sockets run
    leftovers = server_objects()
    assert leftovers == {}, f"left for the collector: {dict(leftovers)}"
