"""`python -m bench.front_ends`: echo over SSE at many streams, with 1, 2, ... front ends.

What `--api-servers N` buys on this machine. The zero-delay echo engine streams each
prompt back one token per chunk; `streams` concurrent SSE requests run back to back
for `seconds`, driven by load-generator worker processes (plain asyncio HTTP/1.1
keep-alive clients that count `data:` lines). Per server variant, interleaved and
repeated: chunks/s, time to first chunk (p50, p99) and the server's CPU per chunk
(its whole process tree: the supervisor and every front end).

`--dynamo-python PATH` adds the peer the issue names, NVIDIA Dynamo's Rust frontend
with its echo engine (`bench/dynamo_echo.py`), run from its own virtual environment
and measured the same way, interleaved with ours. Its echo streams one character
per chunk, ours one token (up to 6 bytes) per chunk: the figures compare the cost of
a chunk, not of an answer.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import os
import statistics
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from bench.batching.servers import tree_cpu_seconds
from bench.procs import ServerProcess, raise_fd_limit, start_server
from realtime.testing.postgres import free_port

PROMPT = " ".join(f"word{i}" for i in range(60))


async def _stream_loop(port: int, deadline: float, out: dict[str, Any]) -> None:
    body = json.dumps(
        {"model": "echo", "messages": [{"role": "user", "content": PROMPT}], "stream": True}
    ).encode()
    head = (
        f"POST /v1/chat/completions HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: "
        f"application/json\r\ncontent-length: {len(body)}\r\n\r\n"
    ).encode()
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        while time.monotonic() < deadline:
            sent = time.perf_counter()
            writer.write(head + body)
            first: float | None = None
            chunks = 0
            # chunked transfer encoding: read lines until the terminating 0-length chunk
            while True:
                line = await reader.readline()
                if not line:
                    return
                if line.startswith(b"data: "):
                    if line.startswith(b"data: [DONE]"):
                        continue
                    chunks += 1
                    if first is None:
                        first = time.perf_counter() - sent
                elif line == b"0\r\n":
                    await reader.readline()
                    break
            out["chunks"] += chunks
            out["answers"] += 1
            if first is not None:
                out["ttft"].append(first)
    finally:
        writer.close()


def _worker(port: int, streams: int, seconds: float, queue: Any) -> None:
    async def main() -> dict[str, Any]:
        out: dict[str, Any] = {"chunks": 0, "answers": 0, "ttft": []}
        deadline = time.monotonic() + seconds
        await asyncio.gather(*(_stream_loop(port, deadline, out) for _ in range(streams)))
        return out

    import uvloop

    queue.put(uvloop.run(main()))


def _ttft_buckets(server: ServerProcess) -> dict[float, float] | None:
    """The server's own TTFT histogram for HTTP (cumulative count per upper bound; empty
    before its first request), or None for a server without one (Dynamo)."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{server.port}/metrics", timeout=10) as r:
            text = r.read().decode()
    except OSError:
        return None
    buckets: dict[float, float] = {}
    if "realtime_time_to_first_token_seconds" not in text:
        return None
    for family in text_string_to_metric_families(text):
        if family.name != "realtime_time_to_first_token_seconds":
            continue
        for sample in family.samples:
            if sample.name.endswith("_bucket") and sample.labels.get("transport") == "http":
                buckets[float(sample.labels["le"])] = sample.value
    return buckets


def _bucket_quantile(before: dict[float, float], after: dict[float, float], q: float) -> float:
    """The upper bound (ms) of the bucket holding quantile `q` of what was observed
    between the two scrapes."""
    bounds = sorted(after)
    counts = [after[b] - before.get(b, 0.0) for b in bounds]
    total = counts[-1]
    for bound, count in zip(bounds, counts, strict=True):
        if total and count >= q * total:
            return bound * 1000
    return float("nan")


def measure(server: ServerProcess, streams: int, seconds: float, workers: int) -> dict[str, float]:
    context = multiprocessing.get_context("spawn")
    queue = context.Queue()
    per = [streams // workers + (1 if i < streams % workers else 0) for i in range(workers)]
    processes = [
        context.Process(target=_worker, args=(server.port, n, seconds, queue)) for n in per
    ]
    ttft0 = _ttft_buckets(server)
    cpu0 = tree_cpu_seconds(server.pid)
    started = time.perf_counter()
    for process in processes:
        process.start()
    results = [queue.get() for _ in processes]
    elapsed = time.perf_counter() - started
    cpu = tree_cpu_seconds(server.pid) - cpu0
    for process in processes:
        process.join()
    chunks = sum(r["chunks"] for r in results)
    ttft = sorted(t for r in results for t in r["ttft"])
    cells = {
        "chunks/s": chunks / elapsed,
        "TTFT p50 ms": ttft[len(ttft) // 2] * 1000 if ttft else float("nan"),
        "TTFT p99 ms": ttft[int(len(ttft) * 0.99)] * 1000 if ttft else float("nan"),
        "server CPU per chunk us": cpu / chunks * 1e6 if chunks else float("nan"),
    }
    ttft1 = _ttft_buckets(server)
    if ttft0 is not None and ttft1:
        # The server's own clock, from the request read to its first chunk: what the
        # clients' figures add is the connection's and the load generator's share.
        cells["server TTFT p50 <= ms"] = _bucket_quantile(ttft0, ttft1, 0.5)
        cells["server TTFT p99 <= ms"] = _bucket_quantile(ttft0, ttft1, 0.99)
    return cells


def start(
    front_ends: int, scratch: Path, tokens_per_step: int = 1, tree: Path | None = None
) -> ServerProcess:
    """Our server with `front_ends` front ends (`tree`: another checkout's, the baseline)."""
    argv = [
        "-m", "realtime", "serve", "--host", "127.0.0.1", "--port", "0",
        "--model-name", "echo", "--log-level", "warning", "--no-ui",
        "--api-servers", str(front_ends), "--max-connections", "4096",
    ]  # fmt: skip
    if tokens_per_step != 1:  # a baseline from before the flag runs one token per pass
        argv += ["--echo-tokens-per-step", str(tokens_per_step)]
    name = f"realtime-{front_ends}" if tree is None else f"baseline-{front_ends}"
    if tree is None:
        return start_server(name, argv, scratch)
    return start_server(name, argv, scratch, cwd=tree)


def start_dynamo(python: str, scratch: Path) -> ServerProcess:
    """Dynamo's frontend and echo engine (`bench/dynamo_echo.py`) on a free port."""
    from realtime.testing.tiny_model import build_tiny_model

    model_dir = scratch / "dynamo-model"
    if not model_dir.exists():
        build_tiny_model(model_dir)  # Dynamo reads the tokenizer and chat template
    env = dict(os.environ, DYN_TOKEN_ECHO_DELAY_MS="0", DYN_LOG="warn")
    argv = ["bench/dynamo_echo.py", str(model_dir), str(free_port())]
    return start_server("dynamo", argv, scratch, python=python, env=env, timeout=120)


def _revision(tree: Path) -> str:
    """The commit a checkout is at (its path would name this machine's layout)."""
    result = subprocess.run(
        ["git", "-C", str(tree), "rev-parse", "--short", "HEAD"], capture_output=True, text=True
    )
    return result.stdout.strip() or "(not a git checkout)"


def _start(n: int | str, args: argparse.Namespace, scratch: Path) -> ServerProcess:
    if n == "dynamo":
        return start_dynamo(args.dynamo_python, scratch)
    if n == "baseline":
        return start(1, scratch, tree=args.baseline)
    return start(int(n), scratch, args.echo_tokens_per_step)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--front-ends", default="1,2")
    parser.add_argument("--streams", type=int, default=200)
    parser.add_argument("--seconds", type=float, default=8.0)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument(
        "--echo-tokens-per-step",
        type=int,
        default=1,
        help="the echo engine's tokens per pass of the event loop (16: it runs ahead, as"
        " Dynamo's does)",
    )
    parser.add_argument(
        "--baseline",
        type=Path,
        help="another checkout of this repository: its server (one front end, one token"
        " per pass) runs beside ours, interleaved",
    )
    parser.add_argument(
        "--dynamo-python",
        help="the python of a venv with ai-dynamo 1.6.1: adds Dynamo's frontend as the peer",
    )
    args = parser.parse_args()
    raise_fd_limit()
    counts: list[int | str] = [int(n) for n in args.front_ends.split(",")]
    if args.dynamo_python:
        counts.append("dynamo")
    if args.baseline:
        counts.append("baseline")
    print(f"load before: {os.getloadavg()}")
    with tempfile.TemporaryDirectory(prefix="bench-front-ends-") as scratch:
        servers = {n: _start(n, args, Path(scratch)) for n in counts}
        runs: dict[int | str, list[dict[str, float]]] = {n: [] for n in counts}
        try:
            for repeat in range(args.repeats):
                order = counts if repeat % 2 == 0 else counts[::-1]
                for n in order:
                    time.sleep(1.0)
                    runs[n].append(measure(servers[n], args.streams, args.seconds, args.workers))
                    print(f"N={n} repeat {repeat}: {runs[n][-1]}", flush=True)
        finally:
            for server in servers.values():
                server.stop()
    print(f"load after: {os.getloadavg()}")
    print(
        f"\nmedian of {args.repeats}, {args.streams} SSE streams, echo, zero delay, "
        f"{args.echo_tokens_per_step} token(s) per pass (ours)"
    )
    for n in counts:
        cells = {k: statistics.median(r[k] for r in runs[n] if k in r) for k in runs[n][0]}
        label = {"dynamo": "dynamo 1.6.1", "baseline": f"baseline {_revision(args.baseline)}"}.get(
            str(n), f"--api-servers {n}"
        )
        print(f"{label}: " + ", ".join(f"{k} {v:,.1f}" for k, v in cells.items()))


if __name__ == "__main__":
    main()
