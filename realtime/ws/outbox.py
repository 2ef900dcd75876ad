"""The frames one socket has yet to send: sent at once when the socket is free, else held.

    request tasks --put--> [sent now]            (nothing waiting: no queue, no task hop)
                     \\--> [backlog, bounded] --writer task--> socket

Most of the time a streamed chunk goes straight to the socket from the task that
made it: a hand-off through a queue to a writer task would cost a task switch per
token for nothing. Frames wait in the backlog, which one writer task drains in
order, while a send is under way (another request's frame is being written) and
while the socket is backed up (`writable()` is false: the server's write buffer
is above its high-water mark because the client reads slower than frames are
made). Then the request task keeps producing instead of waiting inside a send,
and a text delta folds into the previous held frame of its request, by the
dialect's rule (`Dialect.fold`: chat chunks by `realtime.chat.coalesce`, the
Responses and Realtime text deltas by theirs): a reader that falls behind gets
fewer, larger frames with the same text.

Backpressure: `put` waits while the backlog holds `capacity` chunks - a folded
chunk still counts as one, so folding never lets more text pile up than
`capacity` separate frames would - which stops the request task pulling tokens
from the engine. `offer` never waits (for teardown, when waiting is wrong) and
drops the frame if there is no room.

Frames are serialized (orjson) when they are sent, not when they are queued, so a
held chunk can still be folded. Serializing and writing a frame costs time in
proportion to its size, on the event loop: after a frame of `LARGE_FRAME_BYTES`
or more the sender yields to the loop, so a burst of large frames (twenty
retrieves of a 4 MB Realtime item) holds the other clients up for one frame at a
time, not for the burst. A small frame (a token) costs no task switch.

A failed send means the peer is gone: `on_gone` is called once and every later
frame is dropped; the session's teardown takes it from there.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import orjson

from realtime.ws.transport import UTF8_TEXT

log = logging.getLogger("realtime.ws")

#: The kind of frame ("chunk", "done", ...): the sent-frames metric's label.
Kind = str

#: A frame this large yields the event loop once it is written (`Outbox._transmit`).
LARGE_FRAME_BYTES = 64 * 1024


@dataclass(slots=True)
class _Held:
    frame: dict[str, Any]
    kind: Kind
    #: Chunks fold only into a held chunk of the same request.
    request_id: str | None
    #: Frames this one stands for (1 + the chunks folded into it).
    units: int = 1


class Outbox:
    def __init__(
        self,
        send: Callable[[dict[str, Any]], Awaitable[None]],
        *,
        capacity: int,
        on_sent: Callable[[Kind], None],
        on_gone: Callable[[], None],
        clock: Callable[[], float],
        fold: Callable[[dict[str, Any], dict[str, Any]], bool],
        writable: Callable[[], bool] | None = None,
    ):
        """`fold`: the dialect's rule for folding a request's output frame into its last
        held one (`Dialect.fold`); `writable`: whether the socket takes a frame now
        without waiting (None: the server does not say, and frames are held only while
        another send is under way)."""
        #: An ASGI-style send (starlette's `WebSocket.send`): one layer less than `send_text`.
        self._send = send
        self.capacity = capacity
        self._on_sent = on_sent
        self._on_gone = on_gone
        self._clock = clock
        self._writable = writable
        self._fold_into = fold
        self._backlog: deque[_Held] = deque()
        #: The last held chunk per request: where that request's next chunk may fold.
        self._last_chunk: dict[str, _Held] = {}
        #: Frames held, counting folded chunks: what `capacity` bounds.
        self._units = 0
        self._busy = False  # a send is under way
        self._gone = False
        self._writer: asyncio.Task[None] | None = None
        self._wake_writer: asyncio.Event | None = None
        self._room: asyncio.Event | None = None
        self._idle: asyncio.Event | None = None
        #: When the send under way started (None: no send under way); for slow-consumer checks.
        self.send_started: float | None = None
        #: When the last frame that reached the socket started its send.
        self.last_sent: float | None = None
        #: Chunks folded into an earlier chunk instead of being sent on their own.
        self.folded = 0

    def __len__(self) -> int:
        """Frames held (not counting one being sent)."""
        return len(self._backlog)

    @property
    def empty(self) -> bool:
        """Nothing held and nothing being sent."""
        return not self._backlog and not self._busy

    @property
    def gone(self) -> bool:
        return self._gone

    async def put(self, frame: dict[str, Any], kind: Kind, request_id: str | None = None) -> None:
        """Send `frame` now if the socket is free, else hold it (waiting while the backlog
        is full)."""
        if self._gone:
            return
        if not self._busy and not self._backlog:
            writable = self._writable
            if writable is None or writable():
                await self._transmit(frame, kind)
                return
        folded = self._fold(frame, kind, request_id)
        while self._units >= self.capacity and not self._gone:
            if self._room is None:
                self._room = asyncio.Event()
            self._room.clear()
            await self._room.wait()
        if not folded and not self._gone:
            self._append(frame, kind, request_id)

    def offer(self, frame: dict[str, Any], kind: Kind, request_id: str | None = None) -> bool:
        """Hold `frame` for the writer without ever waiting; False if dropped (no room)."""
        if self._gone or self._units >= self.capacity:
            return False
        if not self._fold(frame, kind, request_id):
            self._append(frame, kind, request_id)
        return True

    async def flush(self, timeout: float) -> bool:
        """Wait up to `timeout` s until everything held was sent; True if it was."""
        if self._gone:
            return False
        if self.empty:
            return True
        if self._idle is None:
            self._idle = asyncio.Event()
        self._idle.clear()
        try:
            await asyncio.wait_for(self._idle.wait(), timeout)
        except asyncio.TimeoutError:
            return False
        return not self._gone

    def close(self) -> None:
        """Stop the writer; frames still held are dropped."""
        if self._writer is not None:
            self._writer.cancel()
        self._drop_held()

    def release(self) -> None:
        """The session is over: send nothing more, and let go of its callbacks.

        They are the session's bound methods, and the session holds this outbox: a
        reference cycle that only the garbage collector could free, which under the
        server's tuned collector meant every closed socket's objects (its protocol,
        transport, buffers) waited minutes, the RSS rising meanwhile.
        """
        self.close()
        self._gone = True
        self._send = _send_nothing
        self._on_sent = _ignore_kind
        self._on_gone = _do_nothing

    # --- internals ---

    def _fold(self, frame: dict[str, Any], kind: Kind, request_id: str | None) -> bool:
        """Fold a chunk into its request's last held chunk, if there is one and it folds."""
        if kind != "chunk" or request_id is None:
            return False
        last = self._last_chunk.get(request_id)
        if last is None or not self._fold_into(last.frame, frame):
            return False
        last.units += 1
        self._units += 1
        self.folded += 1
        return True

    def _append(self, frame: dict[str, Any], kind: Kind, request_id: str | None) -> None:
        held = _Held(frame, kind, request_id)
        if request_id is not None:
            if kind == "chunk":
                self._last_chunk[request_id] = held
            else:
                # Nothing of this request may fold across its non-chunk frame.
                self._last_chunk.pop(request_id, None)
        self._backlog.append(held)
        self._units += 1
        if not self._busy:
            self._start_writer()

    def _start_writer(self) -> None:
        if self._writer is None or self._writer.done():
            self._writer = asyncio.get_running_loop().create_task(
                self._drain(), name="realtime-writer"
            )
        elif self._wake_writer is not None:
            self._wake_writer.set()

    async def _drain(self) -> None:
        """The writer task: send held frames in order, then wait for more."""
        if self._wake_writer is None:
            self._wake_writer = asyncio.Event()
        while not self._gone:
            if not self._backlog or self._busy:
                self._wake_writer.clear()
                if self._idle is not None and self.empty:
                    self._idle.set()
                await self._wake_writer.wait()
                continue
            held = self._backlog.popleft()
            self._units -= held.units
            if held.request_id is not None and self._last_chunk.get(held.request_id) is held:
                del self._last_chunk[held.request_id]
            if self._room is not None and self._units < self.capacity:
                self._room.set()
            await self._transmit(held.frame, held.kind)

    async def _transmit(self, frame: dict[str, Any], kind: Kind) -> None:
        self._busy = True
        self.send_started = started = self._clock()
        try:
            data = orjson.dumps(frame)
            if len(data) < LARGE_FRAME_BYTES:
                await self._send({"type": "websocket.send", "text": data.decode()})
            else:
                await self._send(self._large(data))
                await asyncio.sleep(0)  # let the loop's other clients run
        except asyncio.CancelledError:
            raise
        except Exception:
            log.debug("send failed; treating the peer as gone", exc_info=True)
            self._peer_gone()
            return
        finally:
            self._busy = False
            self.send_started = None
            # Frames held meanwhile (or still held if this send was cancelled) go next.
            if self._backlog and not self._gone:
                self._start_writer()
        self.last_sent = started
        self._on_sent(kind)
        if self._idle is not None and self.empty:
            self._idle.set()

    def _large(self, data: bytes) -> dict[str, Any]:
        """The send of a large frame's JSON: as UTF-8 bytes when the server is this
        one's own transport (the only one that says whether the socket is `writable`;
        `UTF8_TEXT`), saving a decode and an encode of its megabytes; else as text."""
        if self._writable is not None:
            return {"type": "websocket.send", UTF8_TEXT: data}
        return {"type": "websocket.send", "text": data.decode()}

    def _peer_gone(self) -> None:
        if self._gone:
            return
        self._gone = True
        self._drop_held()
        self._on_gone()

    def _drop_held(self) -> None:
        """Forget every held frame and wake whoever waits on the backlog."""
        self._backlog.clear()
        self._last_chunk.clear()
        self._units = 0
        for event in (self._room, self._idle, self._wake_writer):
            if event is not None:
                event.set()


async def _send_nothing(message: dict[str, Any]) -> None:
    return None


def _ignore_kind(kind: Kind) -> None:
    return None


def _do_nothing() -> None:
    return None
