"""`python -m bench.hostile_floor`: the hostile scenario's 8 MiB inputs against the bare stack.

A neighbour's `GET /health` p99 (`bench/neighbour.py`, in a process of its own) while a
hostile client sends the `large body` and the `large frame` of `bench.scenarios.hostile`
(8 MiB, refused after they are read), against its idle p99, for:

* our server (this checkout), and each `--checkout DIR` (another clone of the
  repository, to compare two commits side by side in one run);
* the bare stack (`bench/bare_app.py`): uvicorn, starlette and websockets reading the
  same input whole and refusing it, with nothing of ours.

The bare stack's figure is the floor: what reading an 8 MiB input costs a neighbour on
this machine before any server can refuse it. Servers run in turn, interleaved per repeat.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from bench.client_loop import run as run_client
from bench.procs import ServerProcess, raise_fd_limit, running, start_realtime, start_server
from bench.scenarios import hostile
from realtime.testing.postgres import free_port

VARIANTS = (hostile.IDLE, hostile.LARGE_BODY, hostile.LARGE_FRAME)
BARE = "bare stack"


def _start(name: str, scratch: Path) -> ServerProcess:
    if name == BARE:
        return start_server("bare", ["bench/bare_app.py", str(free_port())], scratch)
    checkout = Path(name)
    return start_realtime(scratch, echo_delay=hostile.ECHO_DELAY, checkout=checkout)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument(
        "--checkout", action="append", default=[], help="another clone to run beside this one"
    )
    args = parser.parse_args()
    raise_fd_limit()
    p = hostile.Params.for_mode(False)
    payloads = {hostile.LARGE_BODY: hostile._padded_body(p.body_bytes)}
    servers = [str(Path(__file__).resolve().parent.parent), *args.checkout, BARE]
    p99: dict[tuple[str, str], list[float]] = {}
    with tempfile.TemporaryDirectory(prefix="bench-floor-") as scratch:
        for repeat in range(args.repeats):
            for name in servers if repeat % 2 == 0 else servers[::-1]:
                with running(_start(name, Path(scratch))) as server:
                    time.sleep(0.5)
                    for variant in VARIANTS:
                        m = run_client(hostile._one(server.port, p, variant, payloads))
                        p99.setdefault((name, variant), []).append(m["p99"])
                        print(f"{name} {variant}: p99 {m['p99']:.2f} ms", flush=True)
    print(f"\nneighbour p99 (ms), median of {args.repeats}; ratio to the same server's idle")
    for name in servers:
        idle = statistics.median(p99[(name, hostile.IDLE)])
        cells = []
        for variant in VARIANTS:
            value = statistics.median(p99[(name, variant)])
            cells.append(f"{variant} {value:.2f} ({value / idle:.1f}x)")
        print(f"{name}: " + ", ".join(cells))


if __name__ == "__main__":
    main()
