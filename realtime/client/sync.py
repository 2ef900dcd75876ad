"""`RealtimeClientSync`: the async client driven from ordinary (threaded or plain) code.

Why a background event loop rather than a second, blocking implementation: the
demultiplexing, terminal-frame and reconnect rules live in one place
(`realtime.client.client`). Here one daemon thread runs the loop and every call
hands a coroutine to it. Frames are read by that thread even while the caller
is busy, so the server's keepalive pings are always answered.

`SyncChatStream.poll(timeout)` exists for callers that must stay responsive
while waiting (the REPL checks for Ctrl-C between polls): a poll that times out
keeps its pending read, so no frame is ever lost between two polls.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import Awaitable, Coroutine, Iterator, Mapping, Sequence
from types import TracebackType
from typing import Any, TypeVar

from realtime.client.client import (
    DEFAULT_URL,
    ChatStream,
    RealtimeClient,
    _ChunkItem,
    _FailItem,
    _Item,
)
from realtime.client.errors import APIError, RealtimeClientError
from realtime.client.types import ChatResult, ConnectionState, ResponseDone
from realtime.dialects.chat.response import ChatCompletionChunk, ModelCard

T = TypeVar("T")


async def _cancel_remaining_tasks() -> None:
    current = asyncio.current_task()
    tasks = [task for task in asyncio.all_tasks() if task is not current]
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    await asyncio.get_running_loop().shutdown_asyncgens()


class SyncChatStream:
    """A blocking view of a `ChatStream`: iterate for chunks; `done`, `cancel()`, `collect()`."""

    def __init__(self, owner: RealtimeClientSync, stream: ChatStream):
        self._owner = owner
        self.stream = stream
        self._pending: concurrent.futures.Future[_Item | None] | None = None
        self._ended = False
        self._deferred: RealtimeClientError | None = None

    @property
    def request_id(self) -> str:
        return self.stream.request_id

    @property
    def done(self) -> ResponseDone | None:
        return self.stream.done

    @property
    def finished(self) -> bool:
        """True once the terminal item has been read through this object."""
        return self._ended

    @property
    def cancelled(self) -> bool:
        return self.stream.cancelled

    @property
    def ttft(self) -> float | None:
        return self.stream.ttft

    @property
    def decode_seconds(self) -> float | None:
        return self.stream.decode_seconds

    def start(self) -> None:
        self._owner._call(self.stream.start())

    def cancel(self) -> None:
        """Send `response.cancel` (or never send the request); returns without waiting."""
        self._owner._call(self.stream.cancel())

    def _poll_item(self, timeout: float | None) -> _Item | None:
        if self._ended:
            return None
        if self._pending is None:
            self._pending = self._owner._submit(self.stream._next_item())
        try:
            item = self._pending.result(timeout)
        except concurrent.futures.TimeoutError:
            return None
        self._pending = None
        if item is None or not isinstance(item, _ChunkItem):
            self._ended = True
        return item

    def poll(self, timeout: float | None = None) -> ChatCompletionChunk | None:
        """The next chunk, or None if none came within `timeout` or the stream ended
        (then `finished` is True). Raises like iteration does."""
        item = self._poll_item(timeout)
        if isinstance(item, _ChunkItem):
            return item.chunk
        if isinstance(item, _FailItem):
            raise item.error
        return None

    def poll_frame(self, timeout: float | None = None) -> dict[str, Any] | None:
        """The next raw frame (terminal frames included; an `error` frame is returned,
        not raised), or None as for `poll()`. A socket that closed before the
        terminal frame raises `RequestInterruptedError`, after returning the
        `response.done` the server sent just before closing, if any."""
        if self._deferred is not None:
            error, self._deferred = self._deferred, None
            raise error
        item = self._poll_item(timeout)
        if item is None:
            return None
        if isinstance(item, _FailItem) and not isinstance(item.error, APIError):
            if item.raw is None:
                raise item.error
            self._deferred = item.error
        return item.raw

    def __iter__(self) -> Iterator[ChatCompletionChunk]:
        while True:
            chunk = self.poll()
            if chunk is None:
                return
            yield chunk

    def collect(self) -> ChatResult:
        return self._owner._call(self.stream.collect())

    def text(self) -> str:
        return self._owner._call(self.stream.text())

    def __enter__(self) -> SyncChatStream:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if not self.stream.finished:
            self.cancel()


class RealtimeClientSync:
    """`RealtimeClient` for code without an event loop; same arguments, blocking methods.

        with RealtimeClientSync("ws://127.0.0.1:8000/v1/realtime") as client:
            for chunk in client.chat([{"role": "user", "content": "Hi"}]):
                ...

    `on_event` handlers run in the client's own thread.
    """

    def __init__(self, url: str = DEFAULT_URL, **options: Any):
        self.url = url
        self._options = options
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._client: RealtimeClient | None = None

    @property
    def client(self) -> RealtimeClient:
        """The underlying async client (its methods must run in `loop`)."""
        if self._client is None:
            raise RealtimeClientError("not connected: call connect() or use `with`")
        return self._client

    @property
    def state(self) -> ConnectionState:
        return self._client.state if self._client is not None else "idle"

    @property
    def close_error(self) -> RealtimeClientError | None:
        return self._client.close_error if self._client is not None else None

    def _submit(self, coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        if self._loop is None:
            coro.close()
            raise RealtimeClientError("not connected: call connect() or use `with`")
        return asyncio.run_coroutine_threadsafe(coro, self._loop)

    def _call(self, coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        return self._submit(coro).result(timeout)

    def connect(self) -> None:
        """Start the client's thread and open the socket; raises like `RealtimeClient.connect`."""
        if self._loop is not None:
            raise RealtimeClientError("connect() called twice")
        loop = asyncio.new_event_loop()
        thread = threading.Thread(target=loop.run_forever, name="realtime-client", daemon=True)
        thread.start()
        self._loop, self._thread = loop, thread

        async def make() -> RealtimeClient:
            client = RealtimeClient(self.url, **self._options)
            self._client = client
            await client.connect()
            return client

        try:
            self._call(make())
        except BaseException:
            self._stop_loop()
            raise

    def close(self, *, drain: bool = False, timeout: float = 10.0) -> None:
        """Close the socket (see `RealtimeClient.close`) and stop the thread."""
        if self._loop is None:
            return
        try:
            if self._client is not None:
                self._call(self._client.close(drain=drain, timeout=timeout))
        finally:
            self._stop_loop()

    def _stop_loop(self) -> None:
        loop, thread = self._loop, self._thread
        if loop is None or thread is None:
            return
        if thread.is_alive():
            # Let whatever still runs (a read a poll left pending) end cleanly
            # instead of being destroyed with the loop.
            try:
                self._call(_cancel_remaining_tasks(), timeout=5)
            except (concurrent.futures.TimeoutError, RuntimeError):
                pass
        loop.call_soon_threadsafe(loop.stop)
        thread.join(5)
        if not thread.is_alive():
            loop.close()
        self._loop = self._thread = None

    def wait_closed(self, timeout: float | None = None) -> bool:
        """True once the client is closed for good (see `RealtimeClient.wait_closed`)."""
        if self._loop is None:
            return True
        return self._call(self.client.wait_closed(timeout))

    def chat(
        self,
        messages: Sequence[Mapping[str, Any]],
        *,
        model: str | None = None,
        request_id: str | None = None,
        **params: Any,
    ) -> SyncChatStream:
        """Like `RealtimeClient.chat`; the request is sent when iteration starts."""
        client = self.client

        async def make() -> ChatStream:
            return client.chat(messages, model=model, request_id=request_id, **params)

        return SyncChatStream(self, self._call(make()))

    def cancel(self, request_id: str) -> None:
        self._call(self.client.cancel(request_id))

    def models(self) -> list[ModelCard]:
        return self._call(self.client.models())

    def run(self, awaitable: Awaitable[T]) -> T:
        """Run any coroutine of the underlying client in its loop and wait for it."""

        async def wrapper() -> T:
            return await awaitable

        return self._call(wrapper())

    def __enter__(self) -> RealtimeClientSync:
        self.connect()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
