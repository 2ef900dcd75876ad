"""uvicorn's httptools protocol with limits on the request head, the body and their timing.

uvicorn on httptools reads request headers of any size and count, waits forever
for headers that trickle in (slowloris), and buffers a body of any size for the
app. This subclass enforces `HttpLimits` on the connection, before the app runs
or the body is buffered, the way nginx's `large_client_header_buffers`,
`client_header_timeout`, `client_max_body_size` and `client_body_timeout` do:

- head bytes are counted as they arrive: the parser is fed only up to the
  budget, so an oversized head is never held (431);
- header lines are counted by the parser's callback (431);
- a head not complete within `header_timeout` of its first byte (or of the
  connection, for a client that sends nothing) is answered 408 (or closed);
- a `Content-Length` above `max_body_bytes` is refused when the headers end,
  before the app starts (413); a chunked body is counted as it is parsed and
  refused as soon as it passes the limit: the app then sees a disconnect;
- a body that stalls for `body_timeout` while the server waits for it is 408.

A refusal is an OpenAI error body with `connection: close`. After it the server
shuts its sending side and reads and drops whatever the client still sends,
for at most `LINGER_SECONDS` (a "lingering close", as nginx does), so a client
still uploading reads the answer instead of a reset. The app never sees a
refused request, so a 32 MiB body costs the server only the reads it drops.

A request pipelined behind another request's body is counted from the next
read, so its head may pass `max_header_bytes` by at most one read's worth.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any, ClassVar, NoReturn

import httptools
from uvicorn.config import Config
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
from uvicorn.server import ServerState

from realtime.asgi.responses import error_body_for
from realtime.http.request_limits import (
    HttpLimits,
    InvalidContentLength,
    declared_body_length,
    has_body,
    refusal_bytes,
)
from realtime.observability.logs import event
from realtime.protocol.errors import (
    InvalidRequestError,
    RealtimeError,
    RequestHeadersTooLargeError,
    RequestTimeoutError,
    RequestTooLargeError,
)

log = logging.getLogger("realtime.http")

#: How long a refused connection keeps reading (and dropping) what its client sends.
LINGER_SECONDS = 5.0


class _Refused(Exception):
    """Raised from a parser callback to stop parsing; the refusal is in `_refusal`."""


class LimitedHttpToolsProtocol(HttpToolsProtocol):
    limits: ClassVar[HttpLimits] = HttpLimits()
    #: Called once per refusal (for metrics); set by `with_limits`. A tuple, so the
    #: callables stay plain functions instead of becoming methods.
    refusal_hooks: ClassVar[tuple[Callable[[RealtimeError], None], ...]] = ()

    @classmethod
    def with_limits(
        cls,
        limits: HttpLimits,
        on_refusal: Callable[[RealtimeError], None] | None = None,
    ) -> type[LimitedHttpToolsProtocol]:
        """A protocol class for uvicorn's `http=` setting, bound to these limits."""
        attributes: dict[str, Any] = {"limits": limits}
        if on_refusal is not None:
            attributes["refusal_hooks"] = (on_refusal,)
        return type(cls.__name__, (cls,), attributes)

    def __init__(
        self,
        config: Config,
        server_state: ServerState,
        app_state: dict[str, Any],
        _loop: asyncio.AbstractEventLoop | None = None,
    ) -> None:
        super().__init__(config, server_state, app_state, _loop)
        #: Between requests or inside a request's head (not its body).
        self._in_head = True
        self._head_bytes = 0
        #: The parser has begun a request whose head is not complete.
        self._head_begun = False
        self._header_count = 0
        self._body_bytes = 0
        self._head_timer: asyncio.TimerHandle | None = None
        self._body_timer: asyncio.TimerHandle | None = None
        self._body_deadline = 0.0
        #: (error, during the current request's body) set by a callback that stops parsing.
        self._refusal: tuple[RealtimeError, bool] | None = None
        #: A refusal was sent: input is read and dropped until the connection closes.
        self._lingering = False
        self._linger_timer: asyncio.TimerHandle | None = None

    # --- connection ---

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm_head_timer()  # a client that connects and sends nothing is closed too

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel_timers()
        if self._linger_timer is not None:
            self._linger_timer.cancel()
            self._linger_timer = None
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self._lingering:
            return  # after a refusal: dropped
        self._unset_keepalive_if_required()
        while data:
            if not self._in_head:
                if not self._feed(data):
                    return
                break
            budget = max(self.limits.max_header_bytes - self._head_bytes, 0)
            piece, data = (data[:budget], data[budget:]) if len(data) > budget else (data, b"")
            self._head_bytes += len(piece)
            if piece and not self._feed(piece):
                return
            if self._in_head and data:
                limit = self.limits.max_header_bytes
                self._refuse(
                    RequestHeadersTooLargeError(
                        f"the request line and headers are larger than {limit} bytes"
                        " (--max-header-bytes)"
                    ),
                    during_body=False,
                )
                return
        if self._in_head and (self._head_begun or self._head_bytes):
            self._arm_head_timer()  # a head has begun (perhaps after a body in this read)

    def _feed(self, data: bytes) -> bool:
        """Parse `data`; False when the connection is done with HTTP (refused, upgraded)."""
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserCallbackError:
            refusal, self._refusal = self._refusal, None
            if refusal is None:  # one of uvicorn's own callbacks failed (a bad URL)
                invalid = InvalidRequestError("invalid HTTP request", code="invalid_http_request")
                refusal = (invalid, not self._in_head)
            self._refuse(refusal[0], during_body=refusal[1])
            return False
        except httptools.HttpParserError as exc:
            # llhttp's reasons are fixed strings ("Invalid header value char"), never input.
            error = InvalidRequestError(f"invalid HTTP request: {exc}", code="invalid_http_request")
            self._refuse(error, during_body=not self._in_head)
            return False
        except httptools.HttpParserUpgrade:
            if self._should_upgrade():
                self.handle_websocket_upgrade()
            else:
                self._unsupported_upgrade_warning()
            return False
        return not self._lingering and not self.transport.is_closing()

    # --- parser callbacks ---

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._head_begun = True
        self._header_count = 0
        self._body_bytes = 0

    def on_header(self, name: bytes, value: bytes) -> None:
        self._header_count += 1
        if self._header_count > self.limits.max_header_count:
            limit = self.limits.max_header_count
            self._stop(
                RequestHeadersTooLargeError(
                    f"the request has more than {limit} header lines (--max-headers)"
                ),
                during_body=False,
            )
        super().on_header(name, value)

    def on_headers_complete(self) -> None:
        self._in_head = False
        self._head_begun = False
        self._cancel_head_timer()
        try:
            length = declared_body_length(self.headers)
        except InvalidContentLength:
            error: RealtimeError = InvalidRequestError(
                "invalid Content-Length", code="invalid_http_request"
            )
            self._stop(error, during_body=False)
        limit = self.limits.max_body_bytes
        if length is not None and length > limit:
            error = RequestTooLargeError(
                f"the request body is {length} bytes; the limit is {limit} bytes (--max-body-bytes)"
            )
            self._stop(error, during_body=False)
        super().on_headers_complete()
        if has_body(self.headers, length) and not self.parser.should_upgrade():
            self._arm_body_timer()

    def on_body(self, body: bytes) -> None:
        self._body_bytes += len(body)
        limit = self.limits.max_body_bytes
        if self._body_bytes > limit:
            self._stop(
                RequestTooLargeError(
                    f"the request body is larger than {limit} bytes (--max-body-bytes)"
                ),
                during_body=True,
            )
        self._body_deadline = self.loop.time() + self.limits.body_timeout
        super().on_body(body)

    def on_message_complete(self) -> None:
        self._in_head = True
        self._head_bytes = 0
        self._cancel_body_timer()
        super().on_message_complete()

    def _stop(self, error: RealtimeError, *, during_body: bool) -> NoReturn:
        self._refusal = (error, during_body)
        raise _Refused

    # --- timers ---

    def _arm_head_timer(self) -> None:
        if self.limits.header_timeout > 0 and self._head_timer is None:
            self._head_timer = self.loop.call_later(
                self.limits.header_timeout, self._head_timed_out
            )

    def _cancel_head_timer(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _head_timed_out(self) -> None:
        self._head_timer = None
        if not self._in_head or self._lingering or self.transport.is_closing():
            return
        if self._head_bytes == 0 and not self._head_begun:
            # Nothing of a request arrived. Idle between requests is uvicorn's keep-alive
            # timeout; this is a connection that never sent a byte: close it quietly.
            if self.cycle is None:
                self.transport.close()
            return
        timeout = self.limits.header_timeout
        self._refuse(
            RequestTimeoutError(
                f"the request headers did not arrive within {timeout:g} s (--header-timeout)"
            ),
            during_body=False,
        )

    def _arm_body_timer(self) -> None:
        if self.limits.body_timeout <= 0:
            return
        self._body_deadline = self.loop.time() + self.limits.body_timeout
        if self._body_timer is None:
            self._body_timer = self.loop.call_later(
                self.limits.body_timeout, self._body_timer_fired
            )

    def _cancel_body_timer(self) -> None:
        if self._body_timer is not None:
            self._body_timer.cancel()
            self._body_timer = None

    def _body_timer_fired(self) -> None:
        self._body_timer = None
        if self._in_head or self._lingering or self.transport.is_closing():
            return
        now = self.loop.time()
        if now < self._body_deadline or self.flow.read_paused:
            # Bytes arrived since, or the server itself is not reading (the app has not
            # taken the body yet): not the client's stall.
            delay = max(self._body_deadline - now, 0.1)
            self._body_timer = self.loop.call_later(delay, self._body_timer_fired)
            return
        timeout = self.limits.body_timeout
        self._refuse(
            RequestTimeoutError(f"the request body stalled for {timeout:g} s (--body-timeout)"),
            during_body=True,
        )

    def _cancel_timers(self) -> None:
        self._cancel_head_timer()
        self._cancel_body_timer()

    # --- refusing ---

    def _refuse(self, error: RealtimeError, *, during_body: bool) -> None:
        """Answer `error` and close, without disturbing a response already under way."""
        self._cancel_timers()
        client = f"{self.client[0]}:{self.client[1]}" if self.client else None
        event(log, "http.refused", status=error.status, code=error.code, client=client)
        for hook in self.refusal_hooks:
            hook(error)
        cycle = self.cycle
        if cycle is not None and not cycle.response_complete:
            if not during_body or cycle.response_started:
                # Another response is being written on this connection (a pipelined
                # request, or the app answered before reading its body): finish it, close.
                cycle.keep_alive = False
                self._lingering = True
                self.flow.resume_reading()
                return
            # The app is reading this body: it now sees a disconnect, its answer is dropped.
            cycle.disconnected = True
            cycle.message_event.set()
        if cycle is None or not cycle.response_complete or not during_body:
            path = bytes(getattr(self, "url", b"")).decode("latin-1")
            self.transport.write(
                refusal_bytes(error, self.server_state.default_headers, error_body_for(path))
            )
        self._linger()

    def _linger(self) -> None:
        self._lingering = True
        self.flow.resume_reading()
        if self.transport.can_write_eof():
            self.transport.write_eof()
        self._linger_timer = self.loop.call_later(LINGER_SECONDS, self.transport.close)
