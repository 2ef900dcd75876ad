"""nginx in front of replicas, for tests and benchmarks: the shipped configuration, run by PID.

    with ThrowawayNginx(DEPLOY / "nginx", [8001, 8002, 8003]) as proxy:
        httpx.get(proxy.url + "/v1/models")

It runs `deploy/nginx/realtime.conf` as shipped, with three changes a deployment
makes too: the `listen` line (a free loopback port), the replica list
(`realtime-replicas.conf`, written from `replicas`), and, for a round-robin
baseline only (`affinity=False`), the `hash` line left out. A wrapper `nginx.conf`
in a temporary directory of its own (its pid file, logs and buffers) includes
it; the access log uses the shipped `realtime_upstream` format, so
`served()` tells which replica answered each request. nginx runs in the
foreground (`daemon off`), stopped with SIGTERM (fast: open sockets too) to its master's PID,
then SIGKILL after 10 s. Debian's package puts nginx in /usr/sbin.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType

from realtime.testing.postgres import free_port

START_SECONDS = 30.0
STOP_SECONDS = 10.0
LISTEN = re.compile(r"^(\s*)listen\s+8080;\s*$", re.MULTILINE)
HASH = re.compile(r"^\s*hash \$realtime_affinity consistent;\s*$", re.MULTILINE)
_SERVED = re.compile(r'key="(?P<key>[^"]*)" upstream=(?P<upstream>\S+) ')


class NginxUnavailable(RuntimeError):
    """No nginx binary here."""


def find_nginx() -> str | None:
    found = shutil.which("nginx")
    if found is None and os.access("/usr/sbin/nginx", os.X_OK):
        found = "/usr/sbin/nginx"
    return found


class ThrowawayNginx:
    def __init__(
        self,
        config_dir: str | os.PathLike[str],
        replicas: Sequence[int],
        *,
        affinity: bool = True,
        fail_timeout: float = 10.0,
    ) -> None:
        binary = find_nginx()
        if binary is None:
            raise NginxUnavailable("no nginx binary found")
        self.binary = binary
        self.config_dir = Path(config_dir)
        self.replicas = list(replicas)
        self.affinity = affinity
        self.fail_timeout = fail_timeout
        self.port = free_port()
        self.directory = Path(tempfile.mkdtemp(prefix="realtime-nginx-"))
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def ws_url(self) -> str:
        return f"ws://127.0.0.1:{self.port}"

    @property
    def access_log(self) -> Path:
        return self.directory / "access.log"

    def write_config(self) -> Path:
        """The shipped configuration with this run's port and replicas; the main file."""
        shipped = (self.config_dir / "realtime.conf").read_text()
        conf, listens = LISTEN.subn(rf"\1listen 127.0.0.1:{self.port};", shipped)
        if listens != 1:
            raise ValueError("realtime.conf has no `listen 8080;` line to replace")
        if not self.affinity:
            conf, hashes = HASH.subn("", conf)
            if hashes != 1:
                raise ValueError("realtime.conf has no `hash $realtime_affinity consistent;`")
        (self.directory / "realtime.conf").write_text(conf)
        (self.directory / "realtime-replicas.conf").write_text(
            "".join(
                f"server 127.0.0.1:{port} max_fails=1 fail_timeout={self.fail_timeout:g}s;\n"
                for port in self.replicas
            )
        )
        d = self.directory
        user = "user root root;\n" if os.geteuid() == 0 else ""
        main = d / "nginx.conf"
        main.write_text(
            f"daemon off;\n{user}worker_processes 1;\npid {d}/nginx.pid;\n"
            f"error_log {d}/error.log warn;\n"
            "events { worker_connections 1024; }\n"
            "http {\n"
            f"    client_body_temp_path {d}/body;\n    proxy_temp_path {d}/proxy;\n"
            f"    fastcgi_temp_path {d}/fastcgi;\n    uwsgi_temp_path {d}/uwsgi;\n"
            f"    scgi_temp_path {d}/scgi;\n"
            "    include realtime.conf;\n"
            f"    access_log {d}/access.log realtime_upstream;\n"
            "}\n"
        )
        return main

    def start(self) -> ThrowawayNginx:
        main = self.write_config()
        with open(self.directory / "stderr.log", "ab") as stderr:
            self.process = subprocess.Popen(
                [self.binary, "-p", str(self.directory), "-e", "stderr", "-c", str(main)],
                stdout=stderr,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        deadline = time.monotonic() + START_SECONDS
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"nginx exited {self.process.returncode}: {self.log_tail()}")
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                return self
            except OSError:
                time.sleep(0.05)
        self.stop()
        raise RuntimeError(f"nginx did not listen in {START_SECONDS:g} s")

    def served(self) -> list[tuple[str, str]]:
        """(session key, replica address) of every request answered so far, in order; the
        address is the last replica tried (nginx lists each one it tried)."""
        if not self.access_log.exists():
            return []
        found = []
        for line in self.access_log.read_text().splitlines():
            match = _SERVED.search(line)
            if match is not None:
                found.append((match["key"], match["upstream"].split(",")[-1].strip()))
        return found

    def log_tail(self, chars: int = 2000) -> str:
        text = ""
        for name in ("stderr.log", "error.log"):
            path = self.directory / name
            if path.exists():
                text += path.read_text(errors="replace")
        return text[-chars:]

    def stop(self) -> None:
        process, self.process = self.process, None
        if process is not None and process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(STOP_SECONDS)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        shutil.rmtree(self.directory, ignore_errors=True)

    def __enter__(self) -> ThrowawayNginx:
        return self.start()

    def __exit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()
