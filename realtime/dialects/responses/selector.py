"""/v1/responses over a WebSocket: the Responses API's WebSocket mode, on the session core.

The route's endpoint is the same `session_endpoint` as /v1/realtime's, so the
handshake is checked the same way (API key and Origin by the access guard, the
connection limit, the engine's readiness) and the session is the same glue; only
the dialect differs (`realtime.dialects.responses.dialect`). The caller's key
decides which stored responses it may continue: the selector hands its owner
fingerprint to the dialect, as the HTTP routes use it.
"""

from __future__ import annotations

from collections.abc import MutableMapping
from typing import Any

from realtime.asgi.auth import SUBPROTOCOL, bearer_token, subprotocol_key
from realtime.dialects.responses.dialect import ResponsesDialect, SocketLimits
from realtime.dialects.responses.service import ResponsesService
from realtime.session.dialect import DialectChoice, DialectSelector


def responses_mode(
    service: ResponsesService, limits: SocketLimits, *, keyed: bool
) -> DialectSelector:
    """WebSocket mode on `service`: claims every handshake to /v1/responses. `keyed`: the
    server has API keys, so what a caller stores is its key's."""

    def select(scope: MutableMapping[str, Any]) -> DialectChoice:
        offered = scope.get("subprotocols") or ()
        owner = None
        if keyed:
            key = bearer_token(scope["headers"]) or subprotocol_key(offered)
            owner = service.owner(key)
        return DialectChoice(
            ResponsesDialect.factory(service, owner, limits),
            SUBPROTOCOL if SUBPROTOCOL in offered else None,
        )

    return select
