"""A throwaway PostgreSQL cluster for tests and benchmarks: `initdb`, `postgres`, stop by PID.

    with ThrowawayPostgres() as cluster:
        store = PostgresResponseStore(cluster.dsn)

The cluster lives in a temporary directory (its data, its Unix socket), listens on a free
loopback port with trust authentication for its one user, and is stopped with
SIGINT (PostgreSQL's "fast" shutdown) to the postmaster's own PID, then SIGKILL
if it has not gone in 10 s. Nothing of it outlives the `with`.

The binaries are found on PATH or in Debian's `/usr/lib/postgresql/VERSION/bin`
(Debian's `postgresql` package does not put `initdb` on PATH). PostgreSQL refuses
to run as root; under root the cluster runs as the `postgres` user the package
creates (its directory handed to that user).
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from types import TracebackType
from typing import Any

#: Seconds to wait for the server to accept connections, and for it to stop.
START_SECONDS = 60.0
STOP_SECONDS = 10.0


class PostgresUnavailable(RuntimeError):
    """No PostgreSQL server binaries here (or no user to run them as)."""


def find_binaries() -> Path | None:
    """The directory holding `initdb` and `postgres`, or None."""
    found = shutil.which("initdb")
    if found is not None and shutil.which("postgres") is not None:
        return Path(found).resolve().parent
    versions = sorted(
        Path("/usr/lib/postgresql").glob("*/bin/initdb"),
        key=lambda path: int(path.parent.parent.name) if path.parent.parent.name.isdigit() else 0,
    )
    return versions[-1].parent if versions else None


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


class ThrowawayPostgres:
    """One PostgreSQL cluster in `directory`; `dsn` reaches its `postgres` database."""

    def __init__(
        self, directory: str | os.PathLike[str] | None = None, *, port: int | None = None
    ) -> None:
        #: A directory of our own (removed on `stop`) unless one is given: under root the
        #: cluster's user must reach it, and a test's own temporary directory is private.
        self._own_directory = directory is None
        self.directory = Path(directory or tempfile.mkdtemp(prefix="realtime-pg-"))
        self.port = port or free_port()
        self.user = "realtime"
        self.database = "postgres"
        self.process: subprocess.Popen[bytes] | None = None
        binaries = find_binaries()
        if binaries is None:
            raise PostgresUnavailable("no PostgreSQL server binaries (initdb, postgres) found")
        self.binaries = binaries
        self._as: dict[str, Any] = {}
        if os.geteuid() == 0:
            try:
                account = pwd.getpwnam("postgres")
            except KeyError:
                raise PostgresUnavailable("running as root and no `postgres` user") from None
            self._as = {"user": account.pw_uid, "group": account.pw_gid, "extra_groups": []}

    @property
    def dsn(self) -> str:
        return f"postgresql://{self.user}@127.0.0.1:{self.port}/{self.database}"

    @property
    def log_path(self) -> Path:
        return self.directory / "postgres.log"

    def start(self) -> ThrowawayPostgres:
        data = self.directory / "data"
        self.directory.mkdir(parents=True, exist_ok=True)
        if self._as:
            os.chown(self.directory, self._as["user"], self._as["group"])
        initdb = [
            str(self.binaries / "initdb"), "-D", str(data), "-U", self.user,
            "--auth=trust", "--no-sync", "-E", "UTF8", "--locale=C",
        ]  # fmt: skip
        subprocess.run(
            initdb,
            check=True,
            capture_output=True,
            **self._as,
        )
        self._launch()
        self._wait_until_accepting()
        return self

    def _launch(self) -> None:
        argv = [
            str(self.binaries / "postgres"), "-D", str(self.directory / "data"),
            "-p", str(self.port), "-h", "127.0.0.1", "-k", str(self.directory),
            "-c", "max_connections=200", "-c", "shared_buffers=32MB",
        ]  # fmt: skip
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(
                argv,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                **self._as,
            )

    def _wait_until_accepting(self) -> None:
        assert self.process is not None
        deadline = time.monotonic() + START_SECONDS
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"postgres exited {self.process.returncode}: {self.log_tail()}")
            ready = subprocess.run(
                [str(self.binaries / "pg_isready"), "-h", "127.0.0.1", "-p", str(self.port)],
                capture_output=True,
            )
            if ready.returncode == 0:
                return
            time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"postgres did not accept connections in {START_SECONDS:g} s")

    def log_tail(self, chars: int = 2000) -> str:
        with contextlib.suppress(OSError):
            return self.log_path.read_text(errors="replace")[-chars:]
        return ""

    def kill(self) -> None:
        """SIGKILL the postmaster (a crash; its backends exit when they notice)."""
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait()

    def stop(self) -> None:
        """Fast shutdown by PID; SIGKILL after `STOP_SECONDS`."""
        self._stop_server()
        if self._own_directory:
            shutil.rmtree(self.directory, ignore_errors=True)

    def _stop_server(self) -> None:
        process, self.process = self.process, None
        if process is None or process.poll() is not None:
            return
        process.send_signal(signal.SIGINT)
        try:
            process.wait(STOP_SECONDS)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()

    def restart(self) -> None:
        """Stop (fast, or after `kill`) and start the same cluster on the same port."""
        self._stop_server()
        self._launch()
        self._wait_until_accepting()

    def __enter__(self) -> ThrowawayPostgres:
        return self.start()

    def __exit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()
