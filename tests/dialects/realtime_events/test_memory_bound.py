"""A Realtime conversation's memory stays within its byte limit, whatever its items hold.

`realtime serve` in a subprocess (its RSS is the server's alone). One socket sends
the many-parts attack: items of 40,000 empty text parts (within `--max-json-values`) (no
characters, so a character limit never fills), then as many small many-part items
as the server takes. The server's RSS may grow by the configured
`--realtime-max-conversation-bytes` plus a fixed overhead (the interpreter's
allocator, one frame's decoding), never with the parts sent. Before the limits
counted parts and bytes, 20 such items grew it by 280 MiB.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from websockets.asyncio.client import connect

from tests.conftest import ServerProcess

#: The conversation's byte limit the server is given.
LIMIT = 1 << 20
#: What the server may grow by beyond it: allocator arenas, one large frame decoded.
#: A frame of 1.2 MB goes to the decode process and back (its text, its bytes, the
#: pickled answer), and the allocator keeps some of those buffers for reuse: runs
#: measured 16-23 MiB of growth, against 280 MiB when the limits counted characters.
OVERHEAD = 32 << 20
#: Empty parts per item in the first wave, and items of it.
WIDE_PARTS, WIDE_ITEMS = 40_000, 20


def create(parts: int, item_id: str) -> str:
    content = [{"type": "input_text", "text": ""}] * parts
    item = {"id": item_id, "type": "message", "role": "user", "content": content}
    return json.dumps({"type": "conversation.item.create", "item": item})


async def attack(url: str) -> dict[str, int]:
    outcomes: dict[str, int] = {}

    def count(event: dict[str, Any]) -> None:
        key = event["error"]["code"] if event["type"] == "error" else event["type"]
        outcomes[key] = outcomes.get(key, 0) + 1

    async with connect(url, max_size=None) as ws:
        json.loads(await ws.recv())  # session.created
        for n in range(WIDE_ITEMS):
            await ws.send(create(WIDE_PARTS, f"wide_{n}"))
            event = json.loads(await ws.recv())
            count(event)
            if event["type"] != "error":
                await ws.recv()  # its conversation.item.done
        for n in range(4096):
            await ws.send(create(64, f"narrow_{n}"))
            event = json.loads(await ws.recv())
            count(event)
            if event["type"] == "error":
                break
            await ws.recv()
    return outcomes


async def warm_up(url: str) -> None:
    async with connect(url) as ws:
        await ws.recv()
        await ws.send(create(1, "one"))
        await ws.recv()
        await ws.recv()


def test_rss_stays_within_the_byte_limit_under_the_many_parts_attack(
    serve_process: Any,
) -> None:
    # The allocator gives freed memory back, so RSS is what the server holds (by default
    # it keeps up to 256 MiB freed for reuse: `realtime/allocator.py`).
    server: ServerProcess = serve_process(
        "--allocator-keep-mib",
        "0",
        "--realtime-max-conversation-chars",
        "1000",
        "--realtime-max-conversation-bytes",
        str(LIMIT),
    )
    url = server.ws_url + "?model=echo"
    asyncio.run(warm_up(url))  # the code paths of a socket and an item, once
    before = server.rss_bytes()
    outcomes = asyncio.run(attack(url))
    grown = server.rss_bytes() - before
    print(f"RSS grew {grown / 2**20:.1f} MiB; outcomes {outcomes}")
    assert outcomes.get("conversation_full") == 1  # the limit was reached
    assert grown <= LIMIT + OVERHEAD, f"RSS grew {grown / 2**20:.1f} MiB ({outcomes})"
