"""Starting the engine process and knowing when it is gone.

`EngineProcess` runs `python -m realtime.engine.process.main` with the spec, in a
private directory (mode 0700) that holds the engine's Unix socket, and waits for
its one-line handshake. The child's stdin is a pipe only this process holds: when
the server dies, however it dies, the engine process reads EOF and stops, so no
engine (and no GPU memory) outlives its server.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

from realtime.engine.errors import EngineUnavailable
from realtime.engine.process.main import Handshake
from realtime.engine.process.spec import EngineSpec

SOCKET_NAME = "engine.sock"


class EngineStartError(RuntimeError):
    """The engine process could not start; the message is its reason, one line."""


class EngineProcess:
    """The engine core as a child process: start, address, stop, kill."""

    def __init__(self, spec: EngineSpec):
        self.spec = spec
        self._dir: str | None = None
        self._proc: subprocess.Popen[str] | None = None
        self.handshake: Handshake | None = None

    @property
    def address(self) -> str:
        if self._dir is None:
            raise EngineUnavailable("engine unavailable: the engine process is not started")
        return str(Path(self._dir) / SOCKET_NAME)

    @property
    def pid(self) -> int | None:
        return None if self._proc is None else self._proc.pid

    @property
    def returncode(self) -> int | None:
        return None if self._proc is None else self._proc.poll()

    def start_sync(self) -> Handshake:
        """Spawn the child and wait (blocking) until it has loaded the model."""
        self.spawn()
        return self.wait_ready()

    def spawn(self) -> None:
        """Start the child without waiting: it imports and loads while the caller builds
        the rest of the server (`wait_ready` then waits for its handshake)."""
        self._dir = tempfile.mkdtemp(prefix="realtime-engine-")
        os.chmod(self._dir, 0o700)
        self._proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "realtime.engine.process.main",
                self.spec.to_json(),
                self.address,
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )

    def wait_ready(self) -> Handshake:
        """Wait (blocking) for the spawned child's handshake; EngineStartError if it failed."""
        assert self._proc is not None and self._proc.stdout is not None
        line = self._proc.stdout.readline()
        try:
            answer = json.loads(line) if line else {}
        except ValueError:
            answer = {}
        if "ready" not in answer:
            reason = answer.get("error") or f"it exited with status {self._proc.wait()}"
            self._cleanup()
            raise EngineStartError(str(reason))
        self.handshake = Handshake(**answer["ready"])
        return self.handshake

    async def start(self) -> Handshake:
        return await asyncio.to_thread(self.start_sync)

    def stop_sync(self, timeout: float = 10.0) -> int | None:
        """Ask the engine to stop (SIGTERM, then its stdin closes), wait, kill if it must."""
        proc = self._proc
        if proc is None:
            return None
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
        if proc.stdin is not None:
            try:
                proc.stdin.close()
            except OSError:
                pass
        try:
            code = proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            code = proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()
        self._cleanup()
        return code

    async def stop(self, timeout: float = 10.0) -> int | None:
        return await asyncio.to_thread(self.stop_sync, timeout)

    def kill(self) -> None:
        """SIGKILL, as a crash would (tests)."""
        if self._proc is not None and self._proc.poll() is None:
            self._proc.kill()

    def _cleanup(self) -> None:
        if self._dir is not None:
            shutil.rmtree(self._dir, ignore_errors=True)
        self._proc = None if self._proc is None or self._proc.poll() is not None else self._proc
