"""/v1/responses over a WebSocket: the Responses API's WebSocket mode, on the session core.

The route's endpoint is `session_endpoint` with one selector, so the handshake is
/v1/realtime's (API key and Origin checked by the access guard, the connection
limit, the engine's readiness) and the session is the same glue; only the
dialect differs (`realtime.dialects.responses.dialect`). The caller's key decides
which stored responses it may continue: the selector hands its owner
fingerprint to the dialect, as the HTTP routes use it.
"""

from __future__ import annotations

from collections.abc import MutableMapping
from typing import Any

from realtime.asgi.auth import SUBPROTOCOL, bearer_token, subprotocol_key
from realtime.dialects.responses.dialect import ResponsesDialect
from realtime.dialects.responses.service import ResponsesService
from realtime.session.dialect import DialectChoice


def responses_mode(scope: MutableMapping[str, Any]) -> DialectChoice:
    """WebSocket mode claims every handshake to /v1/responses."""
    state = scope["app"].state
    service: ResponsesService = state.responses
    owner = None
    if state.config.api_keys:
        key = bearer_token(scope["headers"]) or subprotocol_key(scope.get("subprotocols") or ())
        owner = service.owner(key)
    offered = scope.get("subprotocols") or ()
    return DialectChoice(
        ResponsesDialect.factory(service, owner), SUBPROTOCOL if SUBPROTOCOL in offered else None
    )
