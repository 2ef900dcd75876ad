"""Servers as separate processes, and reading their CPU time and memory.

Why separate processes: in-process servers share the client's interpreter, GIL
and CPU accounting, so neither the throughput nor the CPU per token would be the
server's. Each server here is started the way an operator starts it
(`python -m realtime serve --port 0 ...`), its port read from the startup line,
and measured from outside through Linux's per-process CPU clock and /proc.
"""

from __future__ import annotations

import contextlib
import os
import re
import resource
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

#: The repository root: servers and workers run with it as their working directory
#: so that `python -m bench...` and `python -m realtime` import this checkout.
ROOT = Path(__file__).resolve().parent.parent

_PORT_LINE = re.compile(r"(?:http|ws)://127\.0\.0\.1:(\d+)/")
_PAGE = os.sysconf("SC_PAGE_SIZE")
_TICKS = os.sysconf("SC_CLK_TCK")


def raise_fd_limit() -> int:
    """Lift the soft open-files limit to the hard one (children inherit it); returns it."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY:
        hard = max(soft, 1 << 20)
    if soft < hard:
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


def cpu_seconds(pid: int) -> float:
    """CPU time (user + system, all threads, dead ones included) of another process.

    Linux exposes every process's CPU clock as a clock id (what glibc's
    clock_getcpuclockid computes: `(~pid << 3) | 2`), with nanosecond resolution;
    /proc/PID/stat only counts 10 ms ticks, too coarse for sub-second runs.
    """
    try:
        return time.clock_gettime((~pid << 3) | 2)
    except OSError:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / _TICKS


def rss_bytes(pid: int) -> int:
    """Resident set size from /proc/PID/statm."""
    return int(Path(f"/proc/{pid}/statm").read_text().split()[1]) * _PAGE


@dataclass
class ServerProcess:
    """A server child process listening on 127.0.0.1:`port`."""

    name: str
    popen: subprocess.Popen[str]
    port: int
    log_path: Path
    _drain: threading.Thread | None = field(default=None, repr=False)

    @property
    def pid(self) -> int:
        return self.popen.pid

    def cpu(self) -> float:
        return cpu_seconds(self.pid)

    def rss(self) -> int:
        return rss_bytes(self.pid)

    def alive(self) -> bool:
        return self.popen.poll() is None

    def log_tail(self, lines: int = 20) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def stop(self, timeout: float = 15.0) -> None:
        """SIGTERM (the server's graceful shutdown), then SIGKILL if it hangs."""
        if self.popen.poll() is None:
            self.popen.send_signal(signal.SIGTERM)
            try:
                self.popen.wait(timeout)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait(5)
        if self._drain is not None:
            self._drain.join(5)  # it ends at EOF; closing the pipe under it would race
        if self.popen.stdout is not None:
            self.popen.stdout.close()


def start_server(
    name: str,
    argv: Sequence[str],
    log_dir: Path,
    *,
    timeout: float = 30.0,
    python: str = sys.executable,
    env: dict[str, str] | None = None,
    cwd: Path = ROOT,
) -> ServerProcess:
    """Start `python argv...` and wait for the line that names its loopback port.

    `python` and `env` run a peer server from its own virtual environment; `cwd`
    another checkout's `python -m realtime` (the working directory comes first on
    `sys.path`)."""
    log_dir.mkdir(parents=True, exist_ok=True)
    log_path = log_dir / f"{name}-{time.monotonic_ns()}.log"
    raise_fd_limit()
    with log_path.open("w") as log:
        popen = subprocess.Popen(
            [python, *argv],
            cwd=cwd,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=log,
            text=True,
            bufsize=1,
        )
    lines: list[str] = []
    found = threading.Event()
    port_box: list[int] = []

    def read_stdout() -> None:
        # Keeps draining after the startup line, so the child never blocks on a full pipe.
        assert popen.stdout is not None
        for line in popen.stdout:
            lines.append(line)
            match = _PORT_LINE.search(line)
            if match and not port_box:
                port_box.append(int(match.group(1)))
                found.set()
        found.set()

    drain = threading.Thread(target=read_stdout, name=f"{name}-stdout", daemon=True)
    drain.start()
    found.wait(timeout)
    if not port_box:
        popen.kill()
        popen.wait(5)
        tail = log_path.read_text(errors="replace")[-2000:]
        raise RuntimeError(f"{name} did not announce a port: {''.join(lines)[-500:]}\n{tail}")
    return ServerProcess(name, popen, port_box[0], log_path, drain)


#: Sockets our server accepts in the benchmarks: above the largest scenario (10,000 idle).
MAX_CONNECTIONS = 20_000


def start_realtime(
    log_dir: Path, *, echo_delay: float = 0.0, checkout: Path = ROOT
) -> ServerProcess:
    """`python -m realtime serve` on a free port, quiet logs, the echo engine (of
    `checkout`, another clone's, to compare two commits side by side)."""
    argv = [
        "-m",
        "realtime",
        "serve",
        "--host",
        "127.0.0.1",
        "--port",
        "0",
        "--engine",
        "echo",
        "--echo-delay",
        repr(echo_delay),
        "--log-level",
        "warning",
        "--shutdown-grace",
        "2",
        # The default cap (1024 sockets) is a production safety limit; the many-socket
        # scenarios measure past it, as the raw baseline (which has no cap) does.
        "--max-connections",
        str(MAX_CONNECTIONS),
    ]
    return start_server("realtime", argv, log_dir, cwd=checkout)


def start_raw(
    log_dir: Path, frames_file: Path, *, delay: float = 0.0, yield_each_frame: bool = False
) -> ServerProcess:
    """The bare starlette + uvicorn baseline (`bench.raw_server`)."""
    argv = ["-m", "bench.raw_server", "--frames", str(frames_file), "--delay", repr(delay)]
    if yield_each_frame:
        argv.append("--yield-each-frame")
    return start_server("raw", argv, log_dir)


@contextlib.contextmanager
def running(server: ServerProcess) -> Iterator[ServerProcess]:
    try:
        yield server
    finally:
        server.stop()
