"""Accepting every waiting connection when the listening socket is ready, not one per loop pass.

uvloop's server (libuv) accepts one connection per readiness of the listening
socket, that is one per pass of the event loop. On a busy server a pass takes
tens of milliseconds (every stream's chunks are written in it), so a burst of
new connections waits in the kernel's backlog for one pass each: measured with
200 SSE streams of the echo engine, the last of 100 connections opened together
was accepted 6 s after the first, and its request waited that long for its first
chunk while the connections already open were served throughout.

`Acceptor` watches a listening socket itself and, each time it is readable,
accepts what is waiting (at most `ACCEPTS_PER_WAKE`, so one wake-up stays
short), handing each connection to the event loop as uvicorn's own server
would (`loop.connect_accepted_socket` with uvicorn's protocol). Running out of
file descriptors pauses accepting for `RETRY_SECONDS` with one warning, as
asyncio's own server does, instead of spinning on a socket that stays readable.
It stands where uvicorn keeps its servers (`Server.servers`), so uvicorn's
shutdown closes it like one.

Front ends sharing one listening socket (`--api-servers`) each watch it; the one
whose loop wakes first takes what is waiting, so a burst of connections goes
mostly to the least busy front end (uvloop's one-per-pass did the same, slower).
"""

from __future__ import annotations

import asyncio
import errno
import logging
import socket
from collections.abc import Callable

log = logging.getLogger("realtime")

#: The most connections accepted per wake-up of the listening socket.
ACCEPTS_PER_WAKE = 256
#: How long accepting pauses after the process ran out of file descriptors.
RETRY_SECONDS = 1.0

#: accept() failures that mean "no resources now": pause, then try again.
_EXHAUSTED = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM})


class Acceptor:
    """Accept connections on `sock` for `protocol_factory` (see the module docstring)."""

    def __init__(
        self,
        sock: socket.socket,
        protocol_factory: Callable[[], asyncio.Protocol],
        *,
        backlog: int,
    ) -> None:
        self._loop = asyncio.get_running_loop()
        self._sock = sock
        self._factory = protocol_factory
        #: connections being handed to the loop (a task each, kept until done)
        self._connecting: set[asyncio.Task[None]] = set()
        self._retry: asyncio.TimerHandle | None = None
        self._serving = False
        sock.setblocking(False)
        sock.listen(backlog)
        self._start()

    @property
    def sockets(self) -> tuple[socket.socket, ...]:
        """The listening socket, as `asyncio.Server.sockets` names its own."""
        return (self._sock,)

    def close(self) -> None:
        """Stop accepting; the socket itself stays open for its owner to close."""
        self._stop()
        if self._retry is not None:
            self._retry.cancel()
            self._retry = None

    async def wait_closed(self) -> None:
        """Nothing to wait for: connections already handed over belong to the server."""

    def _start(self) -> None:
        if not self._serving and self._sock.fileno() != -1:
            self._loop.add_reader(self._sock.fileno(), self._accept_waiting)
            self._serving = True

    def _stop(self) -> None:
        if self._serving:
            self._serving = False
            if self._sock.fileno() != -1:
                self._loop.remove_reader(self._sock.fileno())

    def _accept_waiting(self) -> None:
        for _ in range(ACCEPTS_PER_WAKE):
            try:
                conn, _address = self._sock.accept()
            except (BlockingIOError, InterruptedError):
                return  # nothing more is waiting
            except OSError as exc:
                if exc.errno in _EXHAUSTED:
                    log.warning(
                        "cannot accept connections (%s); trying again in %.0f s",
                        exc.strerror,
                        RETRY_SECONDS,
                    )
                    self._stop()
                    self._retry = self._loop.call_later(RETRY_SECONDS, self._resume)
                    return
                continue  # that connection failed (reset before it was accepted)
            conn.setblocking(False)
            task = self._loop.create_task(self._hand_over(conn))
            self._connecting.add(task)
            task.add_done_callback(self._connecting.discard)

    def _resume(self) -> None:
        self._retry = None
        self._start()

    async def _hand_over(self, conn: socket.socket) -> None:
        try:
            await self._loop.connect_accepted_socket(self._factory, conn)
        except OSError:
            conn.close()  # the client went away before its transport was made
