"""`RealtimeClient`: an asyncio client for /v1/realtime with typed chunks, cancel and reconnect.

Why a library and not just a few lines of `websockets`: the protocol is simple
to speak once but has rules that every serious client must get right the same
way - demultiplexing frames of concurrent requests by `request_id`, waiting for
each request's one terminal frame, reading a `response.done` with status
`cancelled` that the client did not ask for as "the server is closing", and
never sending a request twice after the socket dropped. This module does that
once; the REPL is built on it (through `RealtimeClientSync`).

    async with RealtimeClient("ws://127.0.0.1:8000/v1/realtime") as client:
        async for chunk in client.chat([{"role": "user", "content": "Hi"}]):
            print(chunk.choices[0].delta.content or "", end="")

Threading: a client belongs to the event loop it was connected in. For
threads or plain scripts use `realtime.client.sync.RealtimeClientSync`.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import logging
import secrets
import socket
import time
import urllib.parse
import urllib.request
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Literal

from pydantic import ValidationError
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import (
    ConnectionClosed,
    InvalidHandshake,
    InvalidStatus,
    InvalidURI,
)

from realtime import __version__
from realtime.client.errors import (
    APIError,
    AuthenticationError,
    ConnectError,
    ConnectionClosedError,
    ProtocolError,
    RealtimeClientError,
    RequestInterruptedError,
    api_error,
)
from realtime.client.types import (
    ChatResult,
    ClientEvent,
    ConnectionState,
    EventHandler,
    ReconnectPolicy,
    ResponseDone,
    ToolCall,
    fold_tool_calls,
)
from realtime.dialects.chat.response import ChatCompletionChunk, ErrorDetail, ModelCard

log = logging.getLogger("realtime.client")

DEFAULT_URL = "ws://127.0.0.1:8000/v1/realtime"

# Frame types, as in docs/protocol.md (realtime/dialects/chat/frames.py on the server).
REQUEST_TYPE = "response.create"
CANCEL_TYPE = "response.cancel"
CLOSE_TYPE = "session.close"
DONE_TYPE = "response.done"
ERROR_TYPE = "error"
MAX_REQUEST_ID_CHARS = 128

#: Error codes after which the server closes the socket (docs/protocol.md, Errors).
SESSION_ENDING_ERROR_CODES = frozenset({"engine_unavailable", "internal_error"})
#: Error codes of requests the server refused without starting them because the
#: socket is draining for a shutdown: safe to send again on the next socket.
REFUSED_NOT_STARTED_CODES = frozenset({"shutting_down"})
#: How long a terminal frame that announces a close waits for the Close frame, so
#: the exception can carry the close code and reason.
HOLD_FOR_CLOSE_SECONDS = 1.0
#: The server accepts messages up to 8 MiB by default; accept as much coming back.
DEFAULT_MAX_SIZE = 8 * 1024 * 1024

#: The policy `RealtimeClient` uses unless told otherwise (immutable, so shared).
DEFAULT_RECONNECT = ReconnectPolicy()

StreamState = Literal["pending", "sent", "finished"]


# --- small pure helpers (also used by the REPL) ---


def http_base(ws_url: str) -> str:
    """`http://host:port/v1/` for `ws://host:port/v1/realtime` (same host, port, prefix)."""
    parts = urllib.parse.urlsplit(ws_url)
    scheme = {"ws": "http", "wss": "https"}.get(parts.scheme, parts.scheme)
    path = parts.path
    path = path[: -len("realtime")] if path.endswith("/realtime") else "/v1/"
    return urllib.parse.urlunsplit((scheme, parts.netloc, path, "", ""))


def models_url(ws_url: str) -> str:
    """The HTTP `/v1/models` URL next to a `/v1/realtime` socket URL."""
    return http_base(ws_url) + "models"


def auth_headers(api_key: str | None) -> dict[str, str]:
    """Non-browser clients send the key as a bearer token; browsers use the subprotocol."""
    return {"Authorization": f"Bearer {api_key}"} if api_key else {}


def fetch_models(ws_url: str, api_key: str | None = None, timeout: float = 5.0) -> list[ModelCard]:
    """GET /v1/models next to the socket (blocking); raises OSError or ValueError."""
    request = urllib.request.Request(models_url(ws_url), headers=auth_headers(api_key))
    with urllib.request.urlopen(request, timeout=timeout) as response:
        body = json.load(response)
    try:
        return [ModelCard.model_validate(card) for card in body["data"]]
    except (KeyError, TypeError, ValidationError) as exc:
        raise ValueError(f"unexpected /v1/models answer: {exc}") from None


def describe_connect_error(exc: BaseException) -> str:
    """Why a connection attempt failed, in words rather than an exception repr."""
    if isinstance(exc, ConnectionRefusedError):
        return "connection refused"
    if isinstance(exc, socket.gaierror):
        return "unknown host"
    if isinstance(exc, (TimeoutError, asyncio.TimeoutError)):
        return "timed out"
    if isinstance(exc, InvalidURI):
        return "not a valid ws:// or wss:// URL"
    if isinstance(exc, InvalidStatus):
        response = exc.response
        return (
            f"the server answered HTTP {response.status_code} {response.reason_phrase} "
            "instead of accepting a WebSocket"
        )
    if isinstance(exc, InvalidHandshake):
        return f"WebSocket handshake failed: {exc}"
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror[:1].lower() + exc.strerror[1:]
    return str(exc) or type(exc).__name__


def _denial_error(body: bytes | bytearray | None) -> ErrorDetail | None:
    """The OpenAI error object of a refused handshake's body, if it has one."""
    try:
        return ErrorDetail.model_validate(json.loads(body or b"")["error"])
    except (ValueError, KeyError, TypeError, ValidationError):
        return None


def _dumps(frame: Mapping[str, Any]) -> str:
    return json.dumps(frame, ensure_ascii=False, separators=(",", ":"))


def _has_output(chunk: ChatCompletionChunk) -> bool:
    """Whether a chunk carries generated output (the "first token" of the TTFT)."""
    for choice in chunk.choices:
        delta = choice.delta
        if delta.content or delta.reasoning_content or delta.tool_calls:
            return True
    return False


# --- what a stream's queue carries ---


@dataclass(slots=True)
class _ChunkItem:
    raw: dict[str, Any]
    chunk: ChatCompletionChunk


@dataclass(slots=True)
class _DoneItem:
    raw: dict[str, Any] | None  # None: cancelled locally before it was sent
    done: ResponseDone | None


@dataclass(slots=True)
class _FailItem:
    raw: dict[str, Any] | None
    error: RealtimeClientError


_Item = _ChunkItem | _DoneItem | _FailItem


class ChatStream:
    """One chat request: an async iterator of `ChatCompletionChunk`, plus its terminal frame.

    The request is sent when iteration starts (or on `start()`), so creating a
    stream costs nothing until it is used. Iteration ends normally on
    `response.done` (`done` holds it: status, finish reason, usage), raises
    `APIError` on an `error` frame and `RequestInterruptedError` if the socket
    closed first. Use it as `async with` to cancel it when the block is left
    early. Frames are buffered without limit until read, so a stream that is not
    read while others are cannot block them.
    """

    def __init__(
        self,
        client: RealtimeClient,
        request_id: str,
        messages: list[Any],
        model: str | None,
        params: dict[str, Any],
    ):
        self._client = client
        self.request_id = request_id
        self.messages = messages
        self.model = model
        self.params = params
        self.state: StreamState = "pending"
        #: The `response.done` frame, once it came (also on `RequestInterruptedError`).
        self.done: ResponseDone | None = None
        self.error: RealtimeClientError | None = None
        self.cancel_requested = False
        #: `time.monotonic()` when the request was sent, its first output arrived, it ended.
        self.sent_at: float | None = None
        self.first_token_at: float | None = None
        self.finished_at: float | None = None
        self._queue: asyncio.Queue[_Item] = asyncio.Queue()
        self._start_lock = asyncio.Lock()
        self._consumed_end = False

    def __repr__(self) -> str:
        return f"<ChatStream {self.request_id!r} {self.state}>"

    # --- state ---

    @property
    def finished(self) -> bool:
        return self.state == "finished"

    @property
    def cancelled(self) -> bool:
        """True when the request ended cancelled (by `cancel()`, or before it was sent)."""
        if self.done is not None:
            return self.done.status == "cancelled"
        return self.finished and self.cancel_requested and self.error is None

    @property
    def ttft(self) -> float | None:
        """Seconds from sending the request to its first generated output."""
        if self.sent_at is None or self.first_token_at is None:
            return None
        return self.first_token_at - self.sent_at

    @property
    def decode_seconds(self) -> float | None:
        """Seconds from the first output to the terminal frame."""
        if self.first_token_at is None or self.finished_at is None:
            return None
        return self.finished_at - self.first_token_at

    # --- control ---

    async def start(self) -> None:
        """Send the request now (iteration does this by itself). Idempotent."""
        if self.state != "pending":  # sent, or finished (cancelled while it waited)
            return
        async with self._start_lock:
            if self.state != "pending":
                return
            if self.cancel_requested:
                self._client._deliver(self, _DoneItem(None, None))
                return
            try:
                await self._client._send_request(self)
            except RealtimeClientError as exc:
                self._client._deliver(self, _FailItem(None, exc))
                return
        if self.cancel_requested and self.state == "sent":  # cancel() came while sending
            await self._client._send_cancel(self.request_id)

    async def cancel(self) -> None:
        """Stop this answer: `response.cancel` if it was sent, else it is never sent.

        Iteration then ends with the chunks already on their way and `done.status`
        `cancelled`. Cancelling a finished request does nothing.
        """
        if self.finished or self.cancel_requested:
            return
        self.cancel_requested = True
        if self.state == "pending":
            # Not sent (perhaps waiting for a reconnect, inside `start()`): it never will
            # be; `_send_request` checks `cancel_requested` before it marks it sent.
            self._client._deliver(self, _DoneItem(None, None))
            self._client._wake_waiters()
        elif self.state == "sent":
            await self._client._send_cancel(self.request_id)

    # --- reading ---

    async def _next_item(self) -> _Item | None:
        if self._consumed_end:
            return None
        await self.start()
        item = await self._queue.get()
        if not isinstance(item, _ChunkItem):
            self._consumed_end = True
        return item

    def __aiter__(self) -> ChatStream:
        return self

    async def __anext__(self) -> ChatCompletionChunk:
        item = await self._next_item()
        if isinstance(item, _ChunkItem):
            return item.chunk
        if isinstance(item, _FailItem):
            raise item.error
        raise StopAsyncIteration

    async def frames(self) -> AsyncIterator[dict[str, Any]]:
        """The raw server frames of this request as dicts, terminal frame included.

        An `error` frame is yielded (it is the terminal frame), not raised; a
        socket that closed before the terminal frame raises `RequestInterruptedError`.
        """
        while (item := await self._next_item()) is not None:
            if item.raw is not None:
                yield item.raw
            if isinstance(item, _FailItem) and not isinstance(item.error, APIError):
                raise item.error

    async def collect(self) -> ChatResult:
        """Read the whole answer and fold it: text, reasoning, tool calls, terminal frame."""
        result = ChatResult(self.request_id)
        calls: dict[int, ToolCall] = {}
        text: list[str] = []
        reasoning: list[str] = []
        async for chunk in self:
            result.chunks.append(chunk)
            for choice in chunk.choices:
                delta = choice.delta
                if delta.content:
                    text.append(delta.content)
                if delta.reasoning_content:
                    reasoning.append(delta.reasoning_content)
                if delta.tool_calls:
                    fold_tool_calls(calls, delta.tool_calls)
        result.text = "".join(text)
        result.reasoning = "".join(reasoning)
        result.tool_calls = [calls[index] for index in sorted(calls)]
        result.done = self.done
        return result

    async def text(self) -> str:
        """The answer's text (`collect().text`)."""
        return (await self.collect()).text

    async def __aenter__(self) -> ChatStream:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if not self.finished:
            await self.cancel()


class RealtimeClient:
    """One persistent /v1/realtime socket shared by any number of concurrent `chat()` calls.

    `api_key` is sent as `Authorization: Bearer <key>`. `model` is the default
    model of `chat()`; without one the first `chat()` asks GET /v1/models.
    `reconnect` (None to turn it off) decides what happens when the socket drops
    (see `ReconnectPolicy`); the first connection is not retried, so a wrong URL
    fails at once. `on_event` is called, in the event loop, with a `ClientEvent`
    when the connection opens, drops, retries or closes, and for `error` frames
    that end no request.
    """

    def __init__(
        self,
        url: str = DEFAULT_URL,
        *,
        api_key: str | None = None,
        model: str | None = None,
        reconnect: ReconnectPolicy | None = DEFAULT_RECONNECT,
        open_timeout: float = 10.0,
        max_size: int | None = DEFAULT_MAX_SIZE,
        headers: Mapping[str, str] | None = None,
        on_event: EventHandler | None = None,
    ):
        self.url = url
        self.api_key = api_key
        self.model = model
        self.reconnect = reconnect
        self.open_timeout = open_timeout
        self.max_size = max_size
        self.headers = dict(headers or {})
        self.on_event = on_event
        self.state: ConnectionState = "idle"
        #: Why the client is closed for good (None while it is not).
        self.close_error: RealtimeClientError | None = None
        self._ws: ClientConnection | None = None
        self._reader: asyncio.Task[None] | None = None
        self._supervisor: asyncio.Task[None] | None = None
        self._changed = asyncio.Event()
        self._closing = False
        self._attempt = 0
        self._opened_at = 0.0
        #: Unfinished streams by request id, sent or not.
        self._streams: dict[str, ChatStream] = {}
        #: Refused while the server drained (never started): sent again once reconnected.
        self._requeued: list[ChatStream] = []
        self._held: list[tuple[ChatStream, dict[str, Any], ErrorDetail | ResponseDone]] = []
        self._held_timer: asyncio.TimerHandle | None = None
        self._resends: set[asyncio.Task[None]] = set()
        self._ids = itertools.count(1)
        self._id_prefix = f"py-{secrets.token_hex(3)}-"

    # --- lifecycle ---

    async def __aenter__(self) -> RealtimeClient:
        await self.connect()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    async def connect(self) -> None:
        """Open the socket; `ConnectError` (or `AuthenticationError`) if that fails."""
        if self.state != "idle":
            raise RealtimeClientError(f"connect() on a client that is {self.state}")
        self._set_state("connecting")
        try:
            ws = await self._open()
        except ConnectError as exc:
            self._finish_closed(exc)
            raise
        self._attach(ws, attempt=0)

    async def close(self, *, drain: bool = False, timeout: float = 10.0) -> None:
        """Close the socket (1000). With `drain`, send `session.close` first and wait
        (up to `timeout`) for every request already sent to finish.

        Requests still in flight without `drain` are cancelled by the server and
        raise `RequestInterruptedError`; requests not yet sent raise
        `ConnectionClosedError`.
        """
        if self.state == "closed":
            return
        self._closing = True
        if self._supervisor is not None:
            self._supervisor.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._supervisor
        ws, reader = self._ws, self._reader
        if ws is None or reader is None:
            self._finish_closed(ConnectionClosedError(1000, "", "the client was closed"))
            return
        if drain:
            with contextlib.suppress(ConnectionClosed):
                await ws.send(_dumps({"type": CLOSE_TYPE}))
            await asyncio.wait({reader}, timeout=timeout)
        await ws.close()
        await reader

    async def wait_closed(self, timeout: float | None = None) -> bool:
        """Wait until the client is closed for good; False if `timeout` ran out first."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.state != "closed":
            changed = self._changed
            remaining = None if deadline is None else deadline - time.monotonic()
            if remaining is not None and remaining <= 0:
                return False
            try:
                await asyncio.wait_for(changed.wait(), remaining)
            except asyncio.TimeoutError:
                return False
        return True

    # --- requests ---

    def chat(
        self,
        messages: Sequence[Mapping[str, Any]],
        *,
        model: str | None = None,
        request_id: str | None = None,
        **params: Any,
    ) -> ChatStream:
        """A streamed chat completion: `params` are the request fields of docs/protocol.md
        (temperature, max_tokens, stop, tools, ...). Sent when iteration starts.
        """
        if params.get("stream", True) is not True:
            raise ValueError("chat() always streams; fold the chunks with collect() instead")
        if "type" in params:
            raise ValueError("`type` is an envelope key the client sets itself")
        if request_id is None:
            request_id = f"{self._id_prefix}{next(self._ids)}"
        elif not 0 < len(request_id) <= MAX_REQUEST_ID_CHARS:
            raise ValueError(f"request_id must have 1 to {MAX_REQUEST_ID_CHARS} characters")
        if request_id in self._streams:
            raise ValueError(f"request_id {request_id!r} is already in flight on this client")
        stream = ChatStream(self, request_id, list(messages), model, params)
        self._streams[request_id] = stream
        return stream

    async def cancel(self, request_id: str) -> None:
        """Cancel a request by id (same as `stream.cancel()`); unknown ids are sent anyway."""
        stream = self._streams.get(request_id)
        if stream is not None:
            await stream.cancel()
        else:
            await self._send_cancel(request_id)

    async def models(self) -> list[ModelCard]:
        """The served models, from GET /v1/models next to the socket."""
        try:
            return await asyncio.to_thread(fetch_models, self.url, self.api_key, self.open_timeout)
        except (OSError, ValueError) as exc:
            raise ConnectError(models_url(self.url), describe_connect_error(exc)) from exc

    # --- internals: connection ---

    def _emit(self, event: ClientEvent) -> None:
        if self.on_event is None:
            return
        try:
            self.on_event(event)
        except Exception:
            log.exception("on_event handler failed on %s", event.kind)

    def _set_state(self, state: ConnectionState) -> None:
        self.state = state
        self._wake_waiters()

    def _wake_waiters(self) -> None:
        """Wake everything waiting on a change (the state, or a waiting stream's cancel)."""
        changed, self._changed = self._changed, asyncio.Event()
        changed.set()

    async def _open(self) -> ClientConnection:
        headers = {**self.headers, **auth_headers(self.api_key)}
        try:
            return await connect(
                self.url,
                additional_headers=headers,
                open_timeout=self.open_timeout,
                # The server declines compression by default; it costs latency.
                compression=None,
                max_size=self.max_size,
                user_agent_header=f"realtime-client/{__version__}",
            )
        except InvalidStatus as exc:
            status = exc.response.status_code
            error = _denial_error(exc.response.body)
            message = describe_connect_error(exc) + (f": {error.message}" if error else "")
            cls = AuthenticationError if status == 401 else ConnectError
            raise cls(self.url, message, status=status, error=error) from exc
        except (OSError, asyncio.TimeoutError, InvalidHandshake, InvalidURI, ValueError) as exc:
            raise ConnectError(self.url, describe_connect_error(exc)) from exc

    def _attach(self, ws: ClientConnection, *, attempt: int) -> None:
        self._ws = ws
        self._opened_at = time.monotonic()
        self._set_state("open")
        self._reader = asyncio.create_task(self._read(ws), name="realtime-client-reader")
        self._emit(ClientEvent("open", attempt=attempt))
        requeued, self._requeued = self._requeued, []
        for stream in requeued:
            if stream.state == "pending":
                task = asyncio.create_task(stream.start(), name="realtime-client-resend")
                self._resends.add(task)
                task.add_done_callback(self._resends.discard)

    async def _read(self, ws: ClientConnection) -> None:
        try:
            while True:
                raw = await ws.recv()
                if isinstance(raw, str):
                    self._dispatch(raw)
                else:
                    log.warning("ignored a binary frame: the protocol has none")
        except ConnectionClosed:
            pass
        finally:
            self._on_lost(ws, ws.close_code, ws.close_reason or "")

    def _on_lost(self, ws: ClientConnection, code: int | None, reason: str) -> None:
        if ws is not self._ws:
            return
        self._ws = None
        self._release_held(code, reason, closed=True)
        for stream in [s for s in self._streams.values() if s.state == "sent"]:
            self._deliver(
                stream, _FailItem(None, RequestInterruptedError(stream.request_id, code, reason))
            )
        policy = self.reconnect
        if self._closing or policy is None or code not in policy.retry_on:
            self._finish_closed(ConnectionClosedError(code, reason))
            return
        self._emit(ClientEvent("lost", code=code, reason=reason))
        if time.monotonic() - self._opened_at >= policy.stable_after:
            self._attempt = 0
        self._set_state("reconnecting")
        self._supervisor = asyncio.create_task(
            self._reconnect(policy, code, reason), name="realtime-client-reconnect"
        )

    async def _reconnect(self, policy: ReconnectPolicy, code: int | None, reason: str) -> None:
        while not policy.gives_up(self._attempt):
            delay = policy.delay(self._attempt)
            self._attempt += 1
            self._emit(ClientEvent("reconnecting", attempt=self._attempt, delay=delay))
            await asyncio.sleep(delay)
            try:
                ws = await self._open()
            except AuthenticationError as exc:
                self._finish_closed(exc)
                return
            except ConnectError as exc:
                log.info("reconnect attempt %d failed: %s", self._attempt, exc.message)
                continue
            self._attach(ws, attempt=self._attempt)
            return
        self._finish_closed(
            ConnectionClosedError(
                code, reason, f"connection closed and not restored after {self._attempt} attempts"
            )
        )

    def _finish_closed(self, error: RealtimeClientError) -> None:
        if self.state == "closed":
            return
        self.close_error = error
        # Requests never sent learn that they never will be.
        for stream in [s for s in self._streams.values() if s.state == "pending"]:
            if not stream._start_lock.locked():
                self._deliver(stream, _FailItem(None, error))
        self._set_state("closed")
        code = getattr(error, "code", None)
        self._emit(
            ClientEvent(
                "closed",
                code=code if isinstance(code, int) else None,
                reason=getattr(error, "reason", "") or "",
                error=error,
            )
        )

    async def _wait_open(self, stream: ChatStream | None = None) -> ClientConnection | None:
        """The open socket, waiting through a reconnect; None once `stream` is cancelled."""
        while True:
            if stream is not None and stream.cancel_requested:
                return None
            if self.state == "open" and self._ws is not None:
                return self._ws
            if self.state == "closed":
                raise self.close_error or ConnectionClosedError(None)
            if self.state == "idle":
                raise RealtimeClientError(
                    "not connected: use `async with RealtimeClient(...)` or `await connect()`"
                )
            await self._changed.wait()

    # --- internals: requests ---

    async def _send_request(self, stream: ChatStream) -> None:
        if await self._wait_open(stream) is None:
            return  # cancelled while it waited: `cancel()` ended it
        model = stream.model or self.model
        if model is None:
            cards = await self.models()
            if not cards:
                raise RealtimeClientError("the server lists no models; pass model=")
            model = self.model = cards[0].id
        frame = {
            "type": REQUEST_TYPE,
            "request_id": stream.request_id,
            "model": model,
            "messages": stream.messages,
            **stream.params,
        }
        text = _dumps(frame)
        ws = await self._wait_open(stream)
        if ws is None:  # cancelled while waiting for the socket: never send it
            self._deliver(stream, _DoneItem(None, None))
            return
        # From here on the request counts as sent: if the socket drops now it
        # may have reached the server, so it fails as interrupted, never resent.
        stream.state = "sent"
        stream.sent_at = time.monotonic()
        with contextlib.suppress(ConnectionClosed):  # the reader fails the stream
            await ws.send(text)

    async def _send_cancel(self, request_id: str) -> None:
        ws = self._ws
        if ws is None:
            return  # nothing to stop: the request is interrupted or not sent
        with contextlib.suppress(ConnectionClosed):
            await ws.send(_dumps({"type": CANCEL_TYPE, "request_id": request_id}))

    def _deliver(self, stream: ChatStream, item: _Item) -> None:
        if stream.finished:
            return
        now = time.monotonic()
        if isinstance(item, _ChunkItem):
            if stream.first_token_at is None and _has_output(item.chunk):
                stream.first_token_at = now
        else:
            stream.state = "finished"
            stream.finished_at = now
            self._streams.pop(stream.request_id, None)
            if isinstance(item, _DoneItem):
                stream.done = item.done
            else:
                stream.error = item.error
                if isinstance(item.error, RequestInterruptedError) and item.error.done:
                    stream.done = item.error.done
        stream._queue.put_nowait(item)

    def _dispatch(self, raw: str) -> None:
        try:
            data = json.loads(raw)
        except ValueError:
            log.warning("ignored a frame that is not JSON: %.80r", raw)
            return
        if not isinstance(data, dict):
            log.warning("ignored a frame that is not a JSON object: %.80r", raw)
            return
        request_id = data.get("request_id")
        kind = data.get("type")
        if kind == ERROR_TYPE and request_id is None:
            detail = self._error_detail(data)
            log.warning("server error that ends no request: %s", detail.message)
            self._emit(ClientEvent("server_error", error=detail))
            return
        stream = self._streams.get(request_id) if isinstance(request_id, str) else None
        if stream is None or stream.state != "sent":
            return  # a request this client no longer tracks (e.g. ended already)
        try:
            if kind == ERROR_TYPE:
                detail = self._error_detail(data)
                if detail.code in REFUSED_NOT_STARTED_CODES and self.reconnect is not None:
                    # The server promises it did not start it: wait for the next socket.
                    stream.state = "pending"
                    stream.sent_at = None
                    self._requeued.append(stream)
                elif detail.code in SESSION_ENDING_ERROR_CODES:
                    self._hold(stream, data, detail)
                else:
                    self._deliver(stream, _FailItem(data, api_error(stream.request_id, detail)))
            elif kind == DONE_TYPE:
                done = ResponseDone.model_validate(data)
                if done.status == "cancelled" and not stream.cancel_requested:
                    self._hold(stream, data, done)  # the server is closing the socket
                else:
                    self._deliver(stream, _DoneItem(data, done))
            elif data.get("object") == "chat.completion.chunk":
                self._deliver(stream, _ChunkItem(data, ChatCompletionChunk.model_validate(data)))
            else:
                log.warning("ignored an unknown frame for %r: %.80r", request_id, raw)
        except ValidationError as exc:
            self._deliver(stream, _FailItem(data, ProtocolError(f"unexpected frame: {exc}")))

    @staticmethod
    def _error_detail(data: dict[str, Any]) -> ErrorDetail:
        try:
            return ErrorDetail.model_validate(data.get("error"))
        except ValidationError:
            return ErrorDetail(message="the server sent an error without a message", type="error")

    def _hold(
        self, stream: ChatStream, data: dict[str, Any], parsed: ErrorDetail | ResponseDone
    ) -> None:
        """Keep a terminal frame that announces a close until the Close frame comes."""
        self._held.append((stream, data, parsed))
        if self._held_timer is None:
            self._held_timer = asyncio.get_running_loop().call_later(
                HOLD_FOR_CLOSE_SECONDS, self._release_held, None, "", False
            )

    def _release_held(self, code: int | None, reason: str, closed: bool) -> None:
        if self._held_timer is not None:
            self._held_timer.cancel()
            self._held_timer = None
        held, self._held = self._held, []
        for stream, data, parsed in held:
            item: _Item
            if isinstance(parsed, ErrorDetail):
                error = api_error(
                    stream.request_id,
                    parsed,
                    close_code=code if closed else None,
                    close_reason=reason if closed else None,
                )
                item = _FailItem(data, error)
            elif closed:
                item = _FailItem(
                    data, RequestInterruptedError(stream.request_id, code, reason, done=parsed)
                )
            else:
                item = _DoneItem(data, parsed)
            self._deliver(stream, item)
