"""The request body limits, enforced in the app for servers other than `realtime serve`'s.

`realtime serve` refuses an oversize or stalled body in its uvicorn protocol
(`realtime.http.protocol`), before the app sees the request. An app built by
`realtime.create_app` may run under any ASGI server, or mounted in another app,
where nothing does that; this middleware does it there: a declared
Content-Length over the limit is 413 before any of the body is read, a body that
grows past it is 413 as soon as it does, and a body that stalls for the timeout is
408. The body is read here, at most the limit, and handed to the app unchanged.
"""

from __future__ import annotations

import asyncio

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from realtime.asgi.access import route_path
from realtime.asgi.responses import error_response_for
from realtime.protocol.errors import InvalidRequestError, RequestTimeoutError, RequestTooLargeError


class BodyLimit:
    def __init__(self, app: ASGIApp, *, max_body_bytes: int, body_timeout: float) -> None:
        self.app = app
        self.max_body_bytes = max_body_bytes
        self.body_timeout = body_timeout

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        limit = self.max_body_bytes
        error_response = error_response_for(route_path(scope))
        length = _content_length(scope["headers"])
        if length == -1:
            await error_response(InvalidRequestError("invalid Content-Length"))(
                scope, receive, send
            )
            return
        if length is not None and length > limit:
            declared = RequestTooLargeError(
                f"the request body is {length} bytes; the limit is {limit} bytes (--max-body-bytes)"
            )
            await error_response(declared)(scope, receive, send)
            return
        chunks: list[bytes] = []
        size = 0
        while True:
            try:
                message = await asyncio.wait_for(receive(), self.body_timeout or None)
            except asyncio.TimeoutError:
                stalled = RequestTimeoutError(
                    f"the request body stalled for {self.body_timeout:g} s (--body-timeout)"
                )
                await error_response(stalled)(scope, receive, send)
                return
            if message["type"] != "http.request":  # the client left: let the app see it
                await self.app(scope, _replay([message], receive), send)
                return
            body = message.get("body", b"")
            size += len(body)
            if size > limit:
                error = RequestTooLargeError(
                    f"the request body is larger than {limit} bytes (--max-body-bytes)"
                )
                await error_response(error)(scope, receive, send)
                return
            chunks.append(body)
            if not message.get("more_body", False):
                break
        whole: Message = {"type": "http.request", "body": b"".join(chunks), "more_body": False}
        await self.app(scope, _replay([whole], receive), send)


def _content_length(headers: list[tuple[bytes, bytes]]) -> int | None:
    """The declared body length; None without one, -1 when it is not a number."""
    for name, value in headers:
        if name.lower() == b"content-length":
            text = value.strip()
            return int(text) if text.isdigit() else -1
    return None


def _replay(messages: list[Message], receive: Receive) -> Receive:
    """`receive` that first returns `messages`, then the server's own (disconnects)."""
    pending = list(messages)

    async def replayed() -> Message:
        if pending:
            return pending.pop(0)
        return await receive()

    return replayed
