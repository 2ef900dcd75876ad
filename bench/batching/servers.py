"""The two servers of the batching benchmark, each a process tree started and stopped by PID.

Ours is `python -m realtime serve --engine cpu` (its port read from its startup line,
as every scenario of `bench` does). vLLM is its OpenAI API server from the venv that
`install_vllm.sh` builds, on a free loopback port, in its own session: it starts an
engine-core process of its own, so it is stopped through its process group and its
CPU time is counted over the whole tree (ours too: its engine process and, with
`--api-servers N`, its N front ends are children of the process we start).
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from bench.procs import ROOT, ServerProcess, start_server

MODEL_NAME = "bench-model"
_TICKS = os.sysconf("SC_CLK_TCK")


def tree_cpu_seconds(root: int) -> float:
    """CPU seconds (user + system) of `root` and every live descendant (10 ms ticks)."""
    parents: dict[int, int] = {}
    times: dict[int, float] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            fields = Path(f"/proc/{entry.name}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        pid = int(entry.name)
        parents[pid] = int(fields[1])
        times[pid] = (int(fields[11]) + int(fields[12])) / _TICKS
    total, stack, seen = 0.0, [root], set()
    while stack:
        pid = stack.pop()
        if pid in seen:
            continue
        seen.add(pid)
        total += times.get(pid, 0.0)
        stack.extend(child for child, parent in parents.items() if parent == pid)
    return total


def start_realtime(
    model_dir: Path,
    scratch: Path,
    *,
    threads: int,
    engine_process: str = "auto",
    api_servers: int = 1,
) -> ServerProcess:
    """Ours; `engine_process` "off" runs the engine on a thread of the server's process,
    `api_servers` N > 1 runs N front ends sharing the port and the one engine process."""
    argv = [
        "-m", "realtime", "serve", "--host", "127.0.0.1", "--port", "0",
        "--engine", "cpu", "--model", str(model_dir), "--model-name", MODEL_NAME,
        "--threads", str(threads), "--log-level", "warning", "--shutdown-grace", "2",
        "--no-ui", "--engine-process", engine_process, "--api-servers", str(api_servers),
    ]  # fmt: skip
    name = f"realtime-cpu-{engine_process}-{api_servers}fe"
    return start_server(name, argv, scratch, timeout=180.0)


def vllm_python(venv: Path) -> Path | None:
    """The venv's interpreter if vLLM imports there, else None."""
    python = venv / "bin" / "python"
    if not python.exists():
        return None
    done = subprocess.run(
        [str(python), "-c", "import vllm"], capture_output=True, text=True, timeout=300
    )
    return python if done.returncode == 0 else None


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@dataclass
class VllmServer:
    popen: subprocess.Popen[bytes]
    port: int
    log_path: Path

    @property
    def pid(self) -> int:
        return self.popen.pid

    def log_tail(self, chars: int = 3000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-chars:]
        except OSError:
            return ""

    def stop(self, timeout: float = 60.0) -> None:
        """SIGTERM to its process group (the API server and its engine core), then SIGKILL."""
        if self.popen.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.pid, signal.SIGTERM)
            try:
                self.popen.wait(timeout)
            except subprocess.TimeoutExpired:
                pass
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.popen.wait(10)


def start_vllm(
    python: Path, model_dir: Path, scratch: Path, *, timeout: float = 900.0
) -> VllmServer:
    """vLLM's OpenAI server on the model (float32, as ours), ready to answer."""
    port = _free_port()
    log_path = scratch / f"vllm-{time.monotonic_ns()}.log"
    env = dict(os.environ)
    # KV cache in GiB; the default (4) is far more than a 128-wide model needs.
    env.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    env.setdefault("HF_HUB_OFFLINE", "1")
    argv = [
        str(python), "-m", "vllm.entrypoints.openai.api_server",
        "--model", str(model_dir), "--served-model-name", MODEL_NAME,
        "--host", "127.0.0.1", "--port", str(port), "--dtype", "float32",
        "--disable-uvicorn-access-log",
    ]  # fmt: skip
    with log_path.open("wb") as log:
        popen = subprocess.Popen(
            argv,
            cwd=ROOT,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )
    server = VllmServer(popen, port, log_path)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if popen.poll() is not None:
            raise RuntimeError(f"vLLM exited with {popen.returncode}:\n{server.log_tail()}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/models", timeout=2) as r:
                if r.status == 200:
                    return server
        except (urllib.error.URLError, OSError):
            pass
        time.sleep(1.0)
    server.stop()
    raise RuntimeError(f"vLLM was not ready after {timeout:.0f} s:\n{server.log_tail()}")
