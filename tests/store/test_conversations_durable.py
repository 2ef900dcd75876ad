"""Nothing acknowledged is lost from a conversation: `realtime serve` killed with kill -9.

Writers add to one conversation as fast as the server takes them: responses in the
conversation (each input item with an id of the writer's own) and `items.create`
calls. While they write, another connection holds the store's write lock for a
while (a stalled disk, or a slow database), and the server is killed with SIGKILL
while it is held or just after. Restarted on the same store, the conversation
must hold every item whose 200 had arrived before the kill: each response's
input and output items, each created item. SQLite (`--response-store DIR`) and
PostgreSQL (`--response-store postgresql://...`) alike.
"""

from __future__ import annotations

import asyncio
import itertools
import random
import signal
import sqlite3
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from realtime.store.sqlite import FILENAME
from tests.conftest import ServerProcess, spawn_server

REPETITIONS = 3
#: Characters of each response's input: a write that takes a moment.
INPUT_CHARS = 100_000
SERVE = ("--engine-option", "context_length=131072")


async def _responder(
    base_url: str,
    conversation_id: str,
    writer: int,
    acknowledged: list[str],
    stop: asyncio.Event,
    first: asyncio.Event,
) -> None:
    async with httpx.AsyncClient(base_url=base_url, timeout=30) as client:
        for n in itertools.count():
            if stop.is_set():
                return
            item_id = f"msg_w{writer}_{n}_{random.getrandbits(32)}"
            body = {
                "model": "echo",
                "input": [{"id": item_id, "role": "user", "content": "x" * INPUT_CHARS}],
                "max_output_tokens": 1,
                "conversation": conversation_id,
            }
            try:
                answer = await client.post("/v1/responses", json=body)
            except httpx.TransportError:
                return  # killed mid-request: never acknowledged
            if answer.status_code == 503:
                continue  # not stored, not acknowledged
            assert answer.status_code == 200, answer.text
            acknowledged += [item_id, *(item["id"] for item in answer.json()["output"])]
            first.set()


async def _item_writer(
    base_url: str,
    conversation_id: str,
    acknowledged: list[str],
    stop: asyncio.Event,
    first: asyncio.Event,
) -> None:
    async with httpx.AsyncClient(base_url=base_url, timeout=30) as client:
        while not stop.is_set():
            items = [{"role": "user", "content": "y" * 1000} for _ in range(5)]
            try:
                answer = await client.post(
                    f"/v1/conversations/{conversation_id}/items", json={"items": items}
                )
            except httpx.TransportError:
                return
            if answer.status_code == 503:
                continue
            assert answer.status_code == 200, answer.text
            acknowledged += [item["id"] for item in answer.json()["data"]]
            first.set()


Stall = Callable[[], Awaitable[Callable[[], Awaitable[None]]]]


async def _write_then_kill(
    server: ServerProcess, conversation_id: str, stall: Stall, rng: random.Random
) -> list[str]:
    acknowledged: list[str] = []
    stop, first = asyncio.Event(), asyncio.Event()
    url = server.http_url
    writers = [
        asyncio.create_task(_responder(url, conversation_id, w, acknowledged, stop, first))
        for w in range(2)
    ]
    writers.append(
        asyncio.create_task(_item_writer(url, conversation_id, acknowledged, stop, first))
    )
    await asyncio.wait([*writers, asyncio.create_task(first.wait())], return_when="FIRST_COMPLETED")
    release = await stall()  # the server's writes wait behind it
    await asyncio.sleep(0.2 + rng.random() * 0.4)
    if rng.random() < 0.5:
        await release()
        await asyncio.sleep(rng.random() * 0.2)
    server.proc.send_signal(signal.SIGKILL)
    counted = list(acknowledged)  # a 200 read after the kill was sent before it
    stop.set()
    await asyncio.gather(*writers)
    server.proc.wait()
    await release()
    return counted


async def _items(base_url: str, conversation_id: str) -> set[str]:
    found: set[str] = set()
    params: dict[str, Any] = {"order": "asc", "limit": 100}
    async with httpx.AsyncClient(base_url=base_url, timeout=30) as client:
        while True:
            page = await client.get(f"/v1/conversations/{conversation_id}/items", params=params)
            assert page.status_code == 200, page.text
            body = page.json()
            found |= {item["id"] for item in body["data"]}
            if not body["has_more"]:
                return found
            params["after"] = body["last_id"]


def _sqlite_stall(database: Path) -> Stall:
    async def stall() -> Callable[[], Awaitable[None]]:
        db = sqlite3.connect(database, timeout=10, isolation_level=None, check_same_thread=False)
        await asyncio.to_thread(db.execute, "BEGIN IMMEDIATE")
        released = False

        async def release() -> None:
            nonlocal released
            if not released:
                released = True
                db.execute("ROLLBACK")
                db.close()

        return release

    return stall


def _postgres_stall(url: str) -> Stall:
    async def stall() -> Callable[[], Awaitable[None]]:
        import asyncpg

        db = await asyncpg.connect(url)
        transaction = db.transaction()
        await transaction.start()
        await db.execute("SELECT bytes FROM realtime_usage FOR UPDATE")  # every write waits
        released = False

        async def release() -> None:
            nonlocal released
            if not released:
                released = True
                await transaction.rollback()
                await db.close()

        return release

    return stall


@pytest.fixture(params=["sqlite", "postgresql"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[str, Stall]:
    """`--response-store`'s value, and how to stall its writes."""
    if request.param == "postgresql":
        url = str(request.getfixturevalue("postgres_url"))
        return url, _postgres_stall(url)
    directory = tmp_path / "store"
    return str(directory), _sqlite_stall(directory / FILENAME)


@pytest.mark.timeout(600)
def test_no_acknowledged_conversation_item_is_lost_to_kill_9(
    tmp_path: Path, store: tuple[str, Stall]
) -> None:
    where, stall = store
    rng = random.Random(30)
    conversation_id = ""
    pending: list[str] = []
    acknowledged_total = 0
    lost: list[str] = []
    for repetition in range(REPETITIONS + 1):
        server = spawn_server(*SERVE, "--response-store", where, tmp_path=tmp_path)
        try:
            if not conversation_id:
                made = httpx.post(server.http_url + "/v1/conversations", json={}, timeout=30)
                conversation_id = made.json()["id"]
            kept = asyncio.run(_items(server.http_url, conversation_id))
            lost += [item_id for item_id in pending if item_id not in kept]
            if repetition == REPETITIONS:
                break
            pending = asyncio.run(_write_then_kill(server, conversation_id, stall, rng))
            acknowledged_total += len(pending)
        finally:
            if server.proc.poll() is None:
                server.proc.kill()
                server.proc.wait()
    print(f"{acknowledged_total} items acknowledged over {REPETITIONS} kills, {len(lost)} lost")
    assert acknowledged_total > REPETITIONS
    assert lost == [], f"{len(lost)} of {acknowledged_total} acknowledged items were lost"
