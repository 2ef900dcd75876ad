"""`Acceptor`: every waiting connection accepted per wake-up, a pause when out of descriptors."""

from __future__ import annotations

import asyncio
import errno
import socket
from typing import Any

import pytest

from realtime import accept
from realtime.accept import Acceptor

pytestmark = pytest.mark.anyio


class Recorder(asyncio.Protocol):
    made: list[Recorder] = []

    def __init__(self) -> None:
        self.transport: asyncio.BaseTransport | None = None
        self.data = b""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport
        Recorder.made.append(self)

    def data_received(self, data: bytes) -> None:
        self.data += data
        assert isinstance(self.transport, asyncio.Transport)
        self.transport.write(b"echo:" + data)


@pytest.fixture
def listener():
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    sock.listen(64)
    Recorder.made = []
    yield sock
    sock.close()


def connect_all(port: int, count: int) -> list[socket.socket]:
    """Connections the kernel has completed (in the backlog), none accepted yet."""
    return [socket.create_connection(("127.0.0.1", port)) for _ in range(count)]


def close_all(acceptor: Acceptor, clients: list[socket.socket]) -> None:
    acceptor.close()
    for client in clients:
        client.close()
    for protocol in Recorder.made:
        assert protocol.transport is not None
        protocol.transport.close()


async def until(predicate: Any, timeout: float = 10.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not predicate():
        assert asyncio.get_running_loop().time() < deadline, "condition never became true"
        await asyncio.sleep(0.005)


async def test_one_wake_up_accepts_every_waiting_connection(listener):
    clients = connect_all(listener.getsockname()[1], 20)
    acceptor = Acceptor(listener, Recorder, backlog=64)
    try:
        acceptor._accept_waiting()  # one wake-up, as the loop would call it
        await until(lambda: len(Recorder.made) == 20)
        # and each is a working connection
        clients[7].sendall(b"hello")
        await until(lambda: any(p.data == b"hello" for p in Recorder.made))
        clients[7].settimeout(5)
        assert clients[7].recv(100) == b"echo:hello"
    finally:
        close_all(acceptor, clients)


async def test_a_wake_up_accepts_at_most_accepts_per_wake(listener, monkeypatch):
    monkeypatch.setattr(accept, "ACCEPTS_PER_WAKE", 3)
    clients = connect_all(listener.getsockname()[1], 5)
    acceptor = Acceptor(listener, Recorder, backlog=64)
    acceptor.close()  # only the direct call below accepts
    try:
        acceptor._accept_waiting()
        await until(lambda: len(Recorder.made) == 3)
        await asyncio.sleep(0.05)
        assert len(Recorder.made) == 3
    finally:
        close_all(acceptor, clients)


async def test_running_out_of_descriptors_pauses_accepting_then_resumes(
    listener, monkeypatch, caplog
):
    monkeypatch.setattr(accept, "RETRY_SECONDS", 0.05)
    acceptor = Acceptor(listener, Recorder, backlog=64)

    class Exhausted:
        """The listening socket while the process has no descriptor left."""

        def __init__(self, sock: socket.socket) -> None:
            self.sock, self.calls = sock, 0

        def accept(self) -> tuple[socket.socket, Any]:
            self.calls += 1
            raise OSError(errno.EMFILE, "Too many open files")

        def fileno(self) -> int:
            return self.sock.fileno()

    exhausted = Exhausted(listener)
    acceptor._sock = exhausted  # type: ignore[assignment]
    clients: list[socket.socket] = []
    try:
        acceptor._accept_waiting()
        assert exhausted.calls == 1  # no spinning on a socket that stays readable
        assert not acceptor._serving and acceptor._retry is not None
        assert "cannot accept connections (Too many open files)" in caplog.text
        acceptor._sock = listener  # descriptors are free again
        clients = connect_all(listener.getsockname()[1], 2)
        await until(lambda: len(Recorder.made) == 2)  # resumed by itself
        assert acceptor._serving
    finally:
        close_all(acceptor, clients)


async def test_a_closed_acceptor_accepts_nothing_more(listener):
    acceptor = Acceptor(listener, Recorder, backlog=64)
    acceptor.close()
    await acceptor.wait_closed()
    clients = connect_all(listener.getsockname()[1], 2)  # completed by the kernel only
    try:
        await asyncio.sleep(0.1)
        assert Recorder.made == []
        assert acceptor.sockets == (listener,)
    finally:
        for client in clients:
            client.close()
