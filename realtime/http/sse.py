"""Server-sent events for chat chunks: the framing, and the response that streams it.

`data: {json}\n\n` per chunk, `data: [DONE]\n\n` at the end (as OpenAI does), a
`: keep-alive` comment when nothing was sent for a while (proxies and load
balancers drop idle connections during long prefills), and an error event
`data: {"error": {...}}` when a request fails after the stream started - the
`openai` SDK raises `APIError` with that body. When the server's shutdown grace
runs out (`stop` is set), the stream ends the same way, with the error
`shutting_down`, rather than being cut off.

`EventStreamResponse` is a small ASGI response rather than starlette's
`StreamingResponse` over an iterator that races every chunk against a timeout:
that cost a task, a timer and a wait per chunk, about half of the server's CPU
per SSE chunk. Here one task (the pump) pulls chunks and sends them, nothing
else, and everything that is not per chunk - the keep-alive, the end of the
shutdown grace, the client hanging up - is watched once for the whole stream by
the request's own task.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncGenerator, Callable
from contextlib import aclosing
from dataclasses import dataclass
from typing import Any

import orjson
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from realtime.http.ready import Suspended, start
from realtime.protocol.errors import RealtimeError, ServerShuttingDownError, as_realtime_error

log = logging.getLogger("realtime.http")

DONE_EVENT = b"data: [DONE]\n\n"

#: The most chunks, and bytes, one write gathers: bounds the latency of a batch and its
#: memory when the chunks never stop being ready (`EventStreamResponse._pump`).
BATCH_EVENTS = 32
BATCH_BYTES = 64 * 1024
KEEPALIVE_COMMENT = b": keep-alive\n\n"

_SHUTDOWN_ERROR = ServerShuttingDownError("server shutting down; the request was cancelled")

SSE_HEADERS = {
    "Cache-Control": "no-cache",
    "X-Accel-Buffering": "no",
    "Connection": "keep-alive",
}


def encode_event(data: dict[str, Any]) -> bytes:
    return b"data: " + orjson.dumps(data) + b"\n\n"


def encode_named_event(event: dict[str, Any]) -> bytes:
    """An event named by its type (`event: <type>` + `data: <json>`): the Responses API's."""
    kind: str = event["type"]
    return b"event: " + kind.encode() + b"\ndata: " + orjson.dumps(event) + b"\n\n"


def encode_error(error: RealtimeError) -> bytes:
    return encode_event(error.to_body())


@dataclass(frozen=True, slots=True)
class SseFraming:
    """How one API frames its events: the chat APIs' (the default), or another's.

    The Responses API names each event (`event: response.output_text.delta`),
    ends without `[DONE]` (`done=None`) and reports a late failure as its own
    numbered `error` event."""

    encode: Callable[[dict[str, Any]], bytes] = encode_event
    #: The last event; None ends the stream without one.
    done: bytes | None = DONE_EVENT
    #: The event for a failure after the stream started (and for the shutdown).
    error: Callable[[RealtimeError], bytes] = encode_error
    #: What is sent while nothing else was for a while (the Messages API: a `ping` event).
    keepalive: bytes = KEEPALIVE_COMMENT


CHAT_FRAMING = SseFraming()


class EventStreamResponse(Response):
    """Stream `chunks` as SSE; it closes `chunks` (and so the engine) however the stream ends.

    Sends never overlap: the pump is the only sender while chunks flow, and the
    watcher sends a keep-alive only while the pump is not mid-`send`, making the
    pump wait for it before its next one.
    """

    media_type = "text/event-stream"

    def __init__(
        self,
        chunks: AsyncGenerator[dict[str, Any], None],
        *,
        keepalive_seconds: float,
        stop: asyncio.Event | None = None,
        framing: SseFraming = CHAT_FRAMING,
    ) -> None:
        self.status_code = 200
        self.background = None
        self.init_headers(SSE_HEADERS)
        self.chunks = chunks
        self.keepalive_seconds = keepalive_seconds
        self.stop = stop
        self.framing = framing
        self._send: Send | None = None
        #: `loop.time()` when the last send finished: the keep-alive's idle clock.
        self._last_write = 0.0
        #: The pump is inside `send`; a keep-alive now would overlap it.
        self._writing = False
        #: Set while the watcher sends a keep-alive; the pump waits for it before sending.
        self._keepalive_in_flight: asyncio.Future[None] | None = None
        #: The chunks are done; the end of the grace no longer interrupts what is left to send.
        self._finishing = False

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        loop = asyncio.get_running_loop()
        self._send = send
        await send(
            {"type": "http.response.start", "status": self.status_code, "headers": self.raw_headers}
        )
        self._last_write = loop.time()
        pump = loop.create_task(self._pump())
        hangup = loop.create_task(_disconnected(receive))
        expired = loop.create_task(self.stop.wait()) if self.stop is not None else None
        watched = {pump, hangup} if expired is None else {pump, hangup, expired}
        keepalive = self.keepalive_seconds if self.keepalive_seconds > 0 else None
        try:
            while True:
                timeout = None
                if keepalive is not None:
                    due_in = self._last_write + keepalive - loop.time()
                    if due_in <= 0 and not self._writing:
                        await self._keep_alive(loop)
                        continue
                    # While the pump is stuck in `send` (a client not reading), look again later.
                    timeout = due_in if due_in > 0 else keepalive
                done, _ = await asyncio.wait(
                    watched, timeout=timeout, return_when=asyncio.FIRST_COMPLETED
                )
                if pump in done:
                    pump.result()  # a failed `send` is the only error the pump lets out
                    return
                if hangup in done:
                    return  # `finally` cancels the pump, which closes the chunks
                if expired in done and not self._finishing:
                    await _cancel(pump)
                    if pump.cancelled():  # else the chunks ignored it and the pump ended the stream
                        await self._write(self.framing.error(_SHUTDOWN_ERROR))
                        await self._end()
                    return
                if expired in done:  # only [DONE] is left to send: let the pump finish
                    watched.discard(expired)
        except OSError:
            pass  # how a server of ASGI spec 2.4 reports that the client is gone
        finally:
            hangup.cancel()
            if expired is not None:
                expired.cancel()
            await _cancel(pump)  # also collects its error if it failed after we stopped watching

    async def _pump(self) -> None:
        """Pull the chunks and send them: the only work done per chunk.

        The chunks that are ready one after another (the next pull would not
        suspend: `ready.start`) go out in one write, up to `BATCH_EVENTS` of them or
        `BATCH_BYTES`; a chunk is never held back for one that is not ready yet.
        The last batch, the failure event and the end share the last write."""
        encode = self.framing.encode
        batch: list[bytes] = []
        size = 0
        failure: bytes | None = None
        async with aclosing(self.chunks) as chunks:
            pull = chunks.__anext__
            while True:
                try:
                    pulled = start(pull())
                    if isinstance(pulled, Suspended):
                        if batch:
                            await self._write_before(pulled, batch)
                            size = 0
                        chunk = await pulled
                    else:
                        chunk = pulled
                    data = encode(chunk)
                except StopAsyncIteration:
                    break
                except _WriteFailed as failed:
                    raise failed.error from None
                except Exception as exc:
                    failure = self._failure(exc)
                    break
                batch.append(data)
                size += len(data)
                if len(batch) >= BATCH_EVENTS or size >= BATCH_BYTES:
                    await self._write(b"".join(batch))
                    batch.clear()
                    size = 0
        self._finishing = True
        if failure is not None:
            batch.append(failure)
        done = self.framing.done
        if done is not None:
            batch.append(done)
        await self._write(b"".join(batch), more_body=False)

    async def _write_before(self, pulled: Suspended[Any], batch: list[bytes]) -> None:
        """Write `batch` while the next pull is suspended. A failed or cancelled write
        cancels the pull first, so the chunks (and the engine's iterator) unwind."""
        try:
            await self._write(b"".join(batch))
        except BaseException as exc:
            await pulled.cancel()
            raise _WriteFailed(exc) from None
        batch.clear()

    def _failure(self, exc: Exception) -> bytes:
        """The error event for what the chunks raised (a bug is logged, once)."""
        error = as_realtime_error(exc)
        if error is not exc:
            log.exception("stream failed")
        return self.framing.error(error)

    async def _end(self) -> None:
        """The framing's last event (or none) and the end of the body."""
        done = self.framing.done
        await self._write(done if done is not None else b"", more_body=False)

    async def _write(self, data: bytes, *, more_body: bool = True) -> None:
        """Send one event from the pump, or from the watcher once the pump is over."""
        assert self._send is not None
        if self._keepalive_in_flight is not None:
            await asyncio.wait((self._keepalive_in_flight,))
        self._writing = True
        await self._send({"type": "http.response.body", "body": data, "more_body": more_body})
        self._writing = False
        self._last_write = asyncio.get_running_loop().time()

    async def _keep_alive(self, loop: asyncio.AbstractEventLoop) -> None:
        """Send the keep-alive comment; the pump holds its next send until this one is done."""
        assert self._send is not None
        self._keepalive_in_flight = sending = loop.create_future()
        try:
            await self._send(
                {"type": "http.response.body", "body": self.framing.keepalive, "more_body": True}
            )
        finally:
            self._keepalive_in_flight = None
            sending.set_result(None)  # the pump waits on it with `asyncio.wait`: never cancelled
            self._last_write = loop.time()


class _WriteFailed(Exception):
    """A write of the pump failed (the client went away) or was cancelled: raised
    again as itself, never mistaken for a failure of the chunks."""

    def __init__(self, error: BaseException) -> None:
        super().__init__()
        self.error = error


async def _disconnected(receive: Receive) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass


async def _cancel(task: asyncio.Task[None]) -> None:
    """Cancel `task` (if still running) and wait until it has finished, closing its chunks."""
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
