"""One WebSocket-mode response, from its `response.create` to its last frame, socket-free.

What a socket adds to a response is small, and all of it is here: the socket's
own store for its `store: false` responses (`SocketResponses.local`, which
continuations on this socket may reference and which dies with it), the caller's
owner and cache session, the lane's `stream_id` on every event, and an error
event instead of an HTTP status when the request cannot start. The events are
`ResponsesService.events`, the same generator SSE frames.

The transport runs `frames()` for one response at a time per lane, sends what it
yields in order, and closes it early to cancel (closing it closes the pipeline's
stream and with it the engine's request).
"""

from __future__ import annotations

from collections.abc import AsyncGenerator
from contextlib import aclosing
from dataclasses import dataclass, field
from typing import Any

from realtime.protocol.errors import RealtimeError
from realtime.responses.service import PreparedResponse, ResponsesService
from realtime.responses.socket_codec import Create, ResponsesSocketCodec
from realtime.responses.store import MemoryResponseStore


@dataclass
class SocketResponses:
    """One socket's Responses state: its codec, its `store: false` responses, its caller."""

    service: ResponsesService
    codec: ResponsesSocketCodec
    local: MemoryResponseStore
    #: the caller's owner fingerprint (None on an open server)
    owner: str | None
    #: the socket's cache session (its prefix-cache entries are its own)
    session_id: str | None
    #: responses of this socket that were prepared and have not ended (id -> lane)
    running: dict[str, str | None] = field(default_factory=dict)

    async def frames(
        self, command: Create, *, prepared_out: list[PreparedResponse] | None = None
    ) -> AsyncGenerator[dict[str, Any], None]:
        """The response's frames, its terminal event (or one error event) last.

        `prepared_out` receives the prepared response (usage, ids) for the caller's
        metrics and logs."""
        stream_id = command.stream_id
        try:
            prepared = await self.service.prepare(
                command.event,
                stream=True,
                owner=self.owner,
                local=self.local,
                session_id=self.session_id,
            )
        except RealtimeError as exc:
            yield self.codec.error(exc, stream_id)
            return
        if prepared_out is not None:
            prepared_out.append(prepared)
        self.codec.started(prepared.id, stream_id)
        self.running[prepared.id] = stream_id
        render = self.codec.render
        try:
            async with aclosing(self.service.events(prepared)) as events:
                async for event in events:
                    yield render(event, stream_id)
        finally:
            self.running.pop(prepared.id, None)

    async def aclose(self) -> None:
        """The socket is gone: its `store: false` responses go with it."""
        await self.local.close()
