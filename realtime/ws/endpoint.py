"""The ASGI entry of a socket route: capacity, the dialect, accept, run a session, the hub.

API keys and the Origin were checked before this runs (`realtime.asgi.access`).
Here the connection limit is enforced, still before the upgrade (HTTP 503 with
`Retry-After`), and the socket's dialect is picked from the handshake: each
route is `session_endpoint(selector, ...)`, and the first selector that claims
the handshake (by its subprotocol, a query parameter...) names the dialect and the
subprotocol to accept. The selectors are the dialects' (`realtime.dialects`),
registered with their routes in `realtime.app.SOCKET_PROTOCOLS`.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable

from starlette.websockets import WebSocket

from realtime.asgi.access import deny_websocket
from realtime.observability.logs import event
from realtime.observability.metrics import Metrics, close_code_label
from realtime.protocol.close_codes import CloseCode, truncate_reason
from realtime.protocol.errors import InvalidRequestError, TooManyConnectionsError
from realtime.protocol.states import SOCKET, SocketEvent, SocketState
from realtime.session.dialect import DialectChoice, DialectSelector
from realtime.ws.hub import SessionHub
from realtime.ws.session import RealtimeSession

log = logging.getLogger("realtime.ws")


def session_endpoint(*selectors: DialectSelector) -> Callable[[WebSocket], Awaitable[None]]:
    """A socket route's endpoint: the first selector that claims a handshake picks its
    dialect; a handshake none claims is refused with 400 before the upgrade."""

    async def endpoint(websocket: WebSocket) -> None:
        for select in selectors:
            choice = select(websocket.scope)
            if choice is not None:
                await _serve(websocket, choice)
                return
        error = InvalidRequestError(
            "this handshake asks for no protocol this endpoint speaks", code="invalid_handshake"
        )
        await deny_websocket(websocket.scope, websocket.receive, websocket.send, error)

    return endpoint


async def _serve(websocket: WebSocket, choice: DialectChoice) -> None:
    state = websocket.app.state
    hub: SessionHub = state.hub
    metrics: Metrics = state.metrics
    conn_id = hub.new_connection_id()
    client = websocket.client
    peer = f"{client.host}:{client.port}" if client else None
    if not hub.try_reserve():
        error = TooManyConnectionsError(
            f"the server has {hub.max_connections} open sockets, its limit; retry later"
        )
        metrics.ws_handshakes.labels(error.code or "refused").inc()
        event(log, "ws.refused", logging.WARNING, conn_id=conn_id, status=503, code=error.code)
        SOCKET.next(SocketState.CONNECTING.value, SocketEvent.REFUSE.value)
        await deny_websocket(websocket.scope, websocket.receive, websocket.send, error)
        return
    try:
        subprotocol = choice.subprotocol
        await websocket.accept(subprotocol=subprotocol)
        metrics.ws_handshakes.labels("accepted").inc()
        reason = None
        code = int(CloseCode.GOING_AWAY)
        if not hub.accepting:
            reason = "server shutting down"
        elif not state.pipeline.engine.ready:
            engine = state.pipeline.engine
            code = int(CloseCode.INTERNAL_ERROR)
            reason = truncate_reason(f"engine unavailable: {engine.unavailable_reason}")
        if reason is not None:
            SOCKET.next(SocketState.CONNECTING.value, SocketEvent.ACCEPT_AND_CLOSE.value)
            await websocket.close(code, reason)
            metrics.ws_closes.labels(close_code_label(code)).inc()
            event(log, "ws.close", conn_id=conn_id, peer=peer, code=code, reason=reason)
            return
        SOCKET.next(SocketState.CONNECTING.value, SocketEvent.ACCEPT.value)
        session = RealtimeSession(
            websocket,
            state.pipeline,
            state.socket_settings,
            metrics=metrics,
            conn_id=conn_id,
            dialect=choice.dialect,
        )
        hub.add(session)
    finally:
        hub.release()
    opened = time.perf_counter()
    event(
        log,
        "ws.open",
        conn_id=conn_id,
        peer=peer,
        subprotocol=subprotocol,
        session_id=session.session_id,
    )
    try:
        await session.run()
    finally:
        hub.discard(session)
        code = session.close_code if session.close_code is not None else 1006
        metrics.ws_closes.labels(close_code_label(code)).inc()
        event(
            log,
            "ws.close",
            conn_id=conn_id,
            peer=peer,
            code=code,
            requests=session.requests_answered,
            duration_ms=round((time.perf_counter() - opened) * 1000, 3),
        )
