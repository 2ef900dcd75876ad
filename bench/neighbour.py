"""A neighbour that times `GET /health` back to back, in a process of its own.

Why a process: the scenarios that time a neighbour next to hostile input send that
input from the benchmark's own event loop. Framing, masking and reading an 8 MiB
message there stood that loop still, and a neighbour timed on the same loop
counted the client's own pause as the server's. In its own process the neighbour
sees only the server. Its samples carry their start on the system-wide monotonic
clock (`time.perf_counter`), so the caller keeps the ones sent while a hostile
request was in flight.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import time
from multiprocessing.connection import Connection
from multiprocessing.synchronize import Event

from bench.client_loop import run as run_client

HEALTH = b"GET /health HTTP/1.1\r\nHost: bench\r\n\r\n"
#: A pause between requests, so the neighbour is a steady client, not a flood.
PAUSE_S = 0.001

#: (perf_counter at the request's write, seconds to the whole response)
Sample = tuple[float, float]


async def read_response(reader: asyncio.StreamReader) -> int:
    """One HTTP/1.1 response with a Content-Length; returns the status."""
    head = await reader.readuntil(b"\r\n\r\n")
    status = int(head.split(b" ", 2)[1])
    length = 0
    for line in head.split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            length = int(line.split(b":", 1)[1])
    await reader.readexactly(length)
    return status


async def _probe(port: int, ready: Event, stop: Event) -> list[Sample]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    samples: list[Sample] = []
    try:
        ready.set()
        while not stop.is_set():
            t0 = time.perf_counter()
            writer.write(HEALTH)
            status = await read_response(reader)
            samples.append((t0, time.perf_counter() - t0))
            if status != 200:
                raise RuntimeError(f"GET /health answered {status}")
            await asyncio.sleep(PAUSE_S)
    finally:
        writer.close()
    return samples


def _main(port: int, ready: Event, stop: Event, results: Connection) -> None:
    try:
        results.send(run_client(_probe(port, ready, stop)))
    except Exception as exc:  # reported to the caller, which raises it
        results.send(f"{type(exc).__name__}: {exc}")
        ready.set()


class Neighbour:
    """Start it, send hostile input inside `window()`s, stop it for the samples inside them."""

    def __init__(self, port: int) -> None:
        context = multiprocessing.get_context("spawn")
        self._ready = context.Event()
        self._stop = context.Event()
        self._results, child_end = context.Pipe(duplex=False)
        self._process = context.Process(
            target=_main, args=(port, self._ready, self._stop, child_end), daemon=True
        )
        self._windows: list[tuple[float, float]] = []
        self._opened: float | None = None

    async def start(self) -> None:
        self._process.start()
        if not await asyncio.to_thread(self._ready.wait, 60):
            raise RuntimeError("the neighbour process did not start")

    def open_window(self) -> None:
        self._opened = time.perf_counter()

    def close_window(self) -> None:
        assert self._opened is not None
        self._windows.append((self._opened, time.perf_counter()))
        self._opened = None

    async def stop(self) -> list[float]:
        """Seconds of each request whose write fell inside a window."""
        self._stop.set()
        answer = await asyncio.to_thread(self._results.recv)
        await asyncio.to_thread(self._process.join, 30)
        if isinstance(answer, str):
            raise RuntimeError(f"the neighbour failed: {answer}")
        return [
            elapsed
            for start, elapsed in answer
            if any(opened <= start <= closed for opened, closed in self._windows)
        ]
