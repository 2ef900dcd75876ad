"""Load-generator worker processes for the many-sockets scenarios, and their parent-side handle.

Why separate processes: 2,000 sockets at 20 frames/s each is 40k frames/s of
client work, and 10,000 idle sockets need 10,000 file descriptors on the client
side as well as on the server; splitting that over worker processes (each an
asyncio loop full of `bench.wire.WsClient`s) keeps the clients off the critical
path and each process under its descriptor limit. Every worker reports its own
CPU time so the report can show the load generator was not the bottleneck.

Worker protocol (`python -m bench.loadgen`, JSON lines): the first stdin line is
the job; then commands, each answered by one stdout line:

* `connect K` - open K more sockets (bounded concurrency) -> `{"total", "failed", "error"}`;
* `go` - every socket sends the job's request, starting staggered over one
  period so 2,000 streams do not tick in lockstep; answers when all ended, with
  counts, CPU time, and the added inter-token gaps written to `gaps_file`
  (float32 milliseconds: observed gap between consecutive content frames minus
  the period);
* `check` - how many sockets are still open -> `{"alive"}`;
* `close` - reset every socket, answer with the CPU time, exit.
"""

from __future__ import annotations

import array
import asyncio
import json
import queue
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.client_loop import run as run_client
from bench.procs import ROOT, raise_fd_limit
from bench.wire import DONE_PREFIX, WsClient, is_terminal

CONNECT_CONCURRENCY = 128


class _Stream:
    """Per-socket bookkeeping for `go`: gaps between the first `tokens` frames."""

    __slots__ = ("count", "done", "first", "gaps", "last", "ok", "on_end", "period", "tokens")

    def __init__(
        self, tokens: int, period: float, gaps: array.array[float], on_end: Callable[[], None]
    ):
        self.tokens, self.period, self.gaps, self.on_end = tokens, period, gaps, on_end
        self.count = 0
        self.first = 0.0
        self.last = 0.0
        self.done = False
        self.ok = False

    def on_frame(self, payload: bytes, now: float) -> None:
        count = self.count
        if count < self.tokens:
            if count:
                self.gaps.append((now - self.last - self.period) * 1000.0)
            else:
                self.first = now
            self.last = now
        self.count = count + 1
        if is_terminal(payload) and not self.done:
            self.done = True
            self.ok = payload.startswith(DONE_PREFIX)
            self.on_end()


class Worker:
    def __init__(self, job: dict[str, Any]):
        self.job = job
        self.clients: list[WsClient] = []
        self.streams: list[_Stream] = []
        self.gaps: array.array[float] = array.array("f")
        self.failed = 0
        self.error = ""
        self.remaining = 0
        self.all_done: asyncio.Future[None] | None = None

    def _ended(self) -> None:
        self.remaining -= 1
        if self.remaining == 0 and self.all_done is not None and not self.all_done.done():
            self.all_done.set_result(None)

    async def connect(self, count: int) -> dict[str, Any]:
        job = self.job
        limit = asyncio.Semaphore(CONNECT_CONCURRENCY)

        async def one() -> None:
            stream = _Stream(job["tokens"], job["period"], self.gaps, self._ended)
            async with limit:
                try:
                    client = await WsClient.connect(
                        job["host"], job["port"], job["path"], stream.on_frame, timeout=60
                    )
                except (OSError, asyncio.TimeoutError) as exc:
                    self.failed += 1
                    self.error = self.error or f"{type(exc).__name__}: {exc}"
                    return
            self.clients.append(client)
            self.streams.append(stream)

        await asyncio.gather(*(one() for _ in range(count)))
        return {"total": len(self.clients), "failed": self.failed, "error": self.error}

    async def go(self) -> dict[str, Any]:
        job = self.job
        loop = asyncio.get_running_loop()
        self.all_done = loop.create_future()
        self.remaining = len(self.clients)
        request = job["request"].encode()
        cpu0, t0 = time.process_time(), time.perf_counter()
        for index, client in enumerate(self.clients):
            offset = (job["first_index"] + index) / max(1, job["total"]) * job["period"]
            loop.call_later(offset, client.send_text, request)
        if self.clients:
            try:
                await asyncio.wait_for(asyncio.shield(self.all_done), job["timeout"])
            except asyncio.TimeoutError:
                self.error = self.error or "timed out waiting for the streams to end"
        wall = time.perf_counter() - t0
        with open(job["gaps_file"], "wb") as gaps_file:  # noqa: ASYNC230 - once, after the run
            self.gaps.tofile(gaps_file)
        return {
            "streams": len(self.streams),
            "completed": sum(1 for s in self.streams if s.ok),
            "frames": sum(s.count for s in self.streams),
            "content_frames": sum(min(s.count, s.tokens) for s in self.streams),
            "cpu_s": time.process_time() - cpu0,
            # perf_counter is CLOCK_MONOTONIC on Linux: comparable across processes.
            "first_content": min((s.first for s in self.streams if s.count), default=0.0),
            "last_content": max((s.last for s in self.streams if s.count), default=0.0),
            "wall_s": wall,
            "error": self.error,
        }

    def alive(self) -> dict[str, Any]:
        return {"alive": sum(1 for c in self.clients if not c.closed.done())}

    def close(self) -> dict[str, Any]:
        for client in self.clients:
            client.abort()
        return {"cpu_s": time.process_time()}


def _emit(reply: dict[str, Any]) -> None:
    print(json.dumps(reply), flush=True)


async def _serve(job: dict[str, Any]) -> None:
    loop = asyncio.get_running_loop()
    worker = Worker(job)
    while True:
        line = (await loop.run_in_executor(None, sys.stdin.readline)).strip()
        if not line or line == "close":
            _emit(worker.close())
            await asyncio.sleep(0)  # let the resets go out before the loop closes
            return
        if line.startswith("connect "):
            _emit(await worker.connect(int(line.split()[1])))
        elif line == "go":
            _emit(await worker.go())
        elif line == "check":
            _emit(worker.alive())
        else:
            _emit({"error": f"unknown command {line!r}"})


def main() -> int:
    raise_fd_limit()
    job = json.loads(sys.stdin.readline())
    run_client(_serve(job))
    return 0


# --- the parent's side ---


class Fleet:
    """`workers` worker processes sharing `total` sockets to one server."""

    def __init__(self, workers: int, total: int, job: dict[str, Any], scratch: Path):
        raise_fd_limit()
        self.total = total
        counts = [total // workers + (1 if i < total % workers else 0) for i in range(workers)]
        self.counts = [c for c in counts if c] or [0]
        self.gap_files: list[Path] = []
        self.procs: list[subprocess.Popen[str]] = []
        self._replies: list[queue.Queue[dict[str, Any]]] = []
        first = 0
        for i, count in enumerate(self.counts):
            gaps = scratch / f"gaps-{time.monotonic_ns()}-{i}.f32"
            self.gap_files.append(gaps)
            proc = subprocess.Popen(
                [sys.executable, "-m", "bench.loadgen"],
                cwd=ROOT,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
                bufsize=1,
            )
            worker_job = dict(job, first_index=first, total=total, gaps_file=str(gaps))
            assert proc.stdin is not None
            proc.stdin.write(json.dumps(worker_job) + "\n")
            proc.stdin.flush()
            first += count
            replies: queue.Queue[dict[str, Any]] = queue.Queue()
            threading.Thread(target=self._pump, args=(proc, replies), daemon=True).start()
            self.procs.append(proc)
            self._replies.append(replies)

    @staticmethod
    def _pump(proc: subprocess.Popen[str], replies: queue.Queue[dict[str, Any]]) -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            replies.put(json.loads(line))
        replies.put({"error": f"worker exited with {proc.wait()}", "exited": True})

    def send(self, per_worker: Callable[[int], str]) -> None:
        for i, proc in enumerate(self.procs):
            assert proc.stdin is not None
            proc.stdin.write(per_worker(i) + "\n")
            proc.stdin.flush()

    def replies(
        self, timeout: float, tick: Callable[[], None] | None = None
    ) -> list[dict[str, Any]]:
        """One reply from every worker; `tick` runs about every 0.2 s while waiting."""
        deadline = time.monotonic() + timeout
        out: list[dict[str, Any]] = []
        for replies in self._replies:
            while True:
                if tick is not None:
                    tick()
                try:
                    out.append(replies.get(timeout=0.2))
                    break
                except queue.Empty:
                    if time.monotonic() > deadline:
                        raise TimeoutError("a load-generator worker did not answer") from None
        return out

    def connect(self, count: int, timeout: float = 300.0) -> list[dict[str, Any]]:
        """Open `count` more sockets, split over the workers like the initial total."""
        shares = [
            count // len(self.procs) + (1 if i < count % len(self.procs) else 0)
            for i in range(len(self.procs))
        ]
        self.send(lambda i: f"connect {shares[i]}")
        return self.replies(timeout)

    def read_gaps(self) -> array.array[float]:
        gaps: array.array[float] = array.array("f")
        for path in self.gap_files:
            if path.exists():
                gaps.frombytes(path.read_bytes())
        return gaps

    def close(self) -> list[dict[str, Any]]:
        replies: list[dict[str, Any]] = []
        try:
            self.send(lambda _i: "close")
            replies = self.replies(30)
        except (OSError, TimeoutError):
            pass
        for proc in self.procs:
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5)
        return replies


if __name__ == "__main__":
    raise SystemExit(main())
