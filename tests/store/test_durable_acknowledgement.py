"""Nothing acknowledged is lost: `realtime serve --response-store DIR` killed with kill -9.

Four clients create responses of about 300 kB each as fast as the server takes
them; the server is killed with SIGKILL while they write, restarted on the same
directory, and every response whose 200 had arrived before the kill must be
there. Twenty repetitions, each short, one server start per repetition (the
restart that checks one repetition is the server of the next).

A disk that stalls is what turns "acknowledged before written" into lost
responses at any load: in each repetition another connection holds the
database's write lock for a while (SQLite's stand-in for a slow disk), the
server's writes wait behind it, and the kill comes while it is held or just
after. A server that acknowledged before its write was committed answers all
through the stall and loses those answers; one that commits first makes the
clients wait instead.
"""

from __future__ import annotations

import asyncio
import random
import signal
import sqlite3
from pathlib import Path

import httpx
import pytest

from realtime.store.sqlite import FILENAME
from tests.conftest import ServerProcess, spawn_server

REPETITIONS = 20
WRITERS = 4
#: Characters of each response's input (the store keeps its input items).
INPUT_CHARS = 300_000
#: The echo engine, with a context that takes the input (its tokens are 6 bytes).
SERVE = ("--engine-option", "context_length=131072")


async def _writer(
    base_url: str, acknowledged: list[str], stop: asyncio.Event, first: asyncio.Event
) -> None:
    body = {
        "model": "echo",
        "input": "x" * INPUT_CHARS,
        "max_output_tokens": 1,
        "store": True,
    }
    async with httpx.AsyncClient(base_url=base_url, timeout=30) as client:
        while not stop.is_set():
            try:
                response = await client.post("/v1/responses", json=body)
            except httpx.TransportError:
                return  # the server was killed mid-request: never acknowledged
            if response.status_code == 503:  # could not be stored: not acknowledged
                assert response.json()["error"]["code"] == "store_unavailable"
                continue
            assert response.status_code == 200, response.text
            acknowledged.append(response.json()["id"])
            first.set()


async def _write_then_kill(server: ServerProcess, database: Path, rng: random.Random) -> list[str]:
    """Writers, a stall, then a kill -9 at a random moment; the ids whose 200 arrived
    before the kill."""
    acknowledged: list[str] = []
    stop, first = asyncio.Event(), asyncio.Event()
    writers = [
        asyncio.create_task(_writer(server.http_url, acknowledged, stop, first))
        for _ in range(WRITERS)
    ]
    await asyncio.wait([*writers, asyncio.create_task(first.wait())], return_when="FIRST_COMPLETED")
    stall = sqlite3.connect(database, timeout=10, isolation_level=None, check_same_thread=False)
    await asyncio.to_thread(stall.execute, "BEGIN IMMEDIATE")  # the server's writes wait
    await asyncio.sleep(0.2 + rng.random() * 0.5)
    if rng.random() < 0.5:  # the stall ends before the kill, or lasts through it
        stall.execute("ROLLBACK")
        await asyncio.sleep(rng.random() * 0.2)
    server.proc.send_signal(signal.SIGKILL)
    # Only what was acknowledged before the kill counts: a 200 read after it was sent
    # by a process that no longer exists, so take the list now.
    counted = list(acknowledged)
    stop.set()
    await asyncio.gather(*writers)
    server.proc.wait()
    stall.close()
    return counted


async def _missing(base_url: str, ids: list[str]) -> list[str]:
    async with httpx.AsyncClient(base_url=base_url, timeout=30) as client:
        missing = []
        for response_id in ids:
            found = await client.get(f"/v1/responses/{response_id}")
            if found.status_code != 200:
                missing.append(response_id)
        return missing


@pytest.mark.timeout(600)
def test_no_acknowledged_response_is_lost_to_kill_9(tmp_path: Path) -> None:
    store = str(tmp_path / "store")
    rng = random.Random(27)
    pending: list[str] = []  # acknowledged by the server just killed, not yet checked
    acknowledged_total = 0
    lost: list[str] = []
    for repetition in range(REPETITIONS + 1):
        server = spawn_server(*SERVE, "--response-store", store, tmp_path=tmp_path)
        try:
            lost += asyncio.run(_missing(server.http_url, pending))
            if repetition == REPETITIONS:
                break
            database = tmp_path / "store" / FILENAME
            pending = asyncio.run(_write_then_kill(server, database, rng))
            acknowledged_total += len(pending)
        finally:
            if server.proc.poll() is None:
                server.proc.kill()
                server.proc.wait()
    print(f"{acknowledged_total} acknowledged over {REPETITIONS} kills, {len(lost)} lost")
    assert acknowledged_total > REPETITIONS  # the writers got responses through
    assert lost == [], f"{len(lost)} of {acknowledged_total} acknowledged responses were lost"
