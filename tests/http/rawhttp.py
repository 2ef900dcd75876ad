"""HTTP/1.1 over a plain socket, for requests no client library sends (floods, trickles).

A test reads the status, headers and body the server really wrote, and whether it
then closed the connection.
"""

from __future__ import annotations

import json
import socket
import time
from dataclasses import dataclass
from typing import Any


@dataclass
class RawResponse:
    status: int
    headers: dict[str, str]
    body: bytes
    #: The server closed the connection after this response.
    closed: bool = False

    def json(self) -> Any:
        return json.loads(self.body)

    @property
    def error_code(self) -> str | None:
        code: str | None = self.json()["error"]["code"]
        return code


class RawConnection:
    def __init__(self, port: int, *, timeout: float = 10.0):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        self.buffer = b""

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def trickle(self, data: bytes, *, pause: float) -> bool:
        """Send `data` a byte at a time; False once the server has closed the connection."""
        for i in range(len(data)):
            try:
                self.sock.sendall(data[i : i + 1])
            except OSError:
                return False
            time.sleep(pause)
        return True

    def response(self) -> RawResponse:
        """Read one response: status, headers, and a Content-Length body (or up to EOF)."""
        while b"\r\n\r\n" not in self.buffer:
            data = self._recv()
            if not data:
                raise ConnectionError(f"closed before a response: {self.buffer[:200]!r}")
            self.buffer += data
        raw_head, self.buffer = self.buffer.split(b"\r\n\r\n", 1)
        status_line, *lines = raw_head.decode("latin-1").split("\r\n")
        status = int(status_line.split(" ", 2)[1])
        headers = {}
        for line in lines:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
        if "content-length" in headers:
            length = int(headers["content-length"])
            while len(self.buffer) < length:
                data = self._recv()
                if not data:
                    break
                self.buffer += data
            body, self.buffer = self.buffer[:length], self.buffer[length:]
        else:
            while data := self._recv():
                self.buffer += data
            body, self.buffer = self.buffer, b""
        return RawResponse(status, headers, body, closed=headers.get("connection") == "close")

    def closed_by_server(self) -> bool:
        """Whether the server has closed (reads EOF, or a reset) within the socket's timeout."""
        try:
            while True:
                data = self.sock.recv(65536)
                if not data:
                    return True
        except ConnectionResetError:
            return True
        except TimeoutError:
            return False

    def _recv(self) -> bytes:
        try:
            return self.sock.recv(65536)
        except ConnectionResetError:
            return b""

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> RawConnection:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def head(method: str, path: str, headers: list[tuple[str, str]] | None = None) -> bytes:
    """A request head; `headers` follow Host."""
    lines = [f"{method} {path} HTTP/1.1", "Host: 127.0.0.1"]
    lines += [f"{name}: {value}" for name, value in headers or []]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


def exchange(port: int, request: bytes, *, timeout: float = 10.0) -> RawResponse:
    with RawConnection(port, timeout=timeout) as conn:
        conn.send(request)
        return conn.response()
