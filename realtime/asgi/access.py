"""Access control for every route, before it runs: query credentials, Origin, API key.

A pure ASGI middleware, so a WebSocket is refused with an HTTP response *before*
the upgrade (the ASGI `websocket.http.response` extension, which uvicorn
implements): a browser never gets an open socket it is not allowed to have, and
a client sees a status code (401, 403) instead of a socket that opens and
closes. Order of the checks: a key in the query string (400, never read, on
every path), the Origin (403), the key (401). `/health` and `/ready` are open for
load balancers (no Origin or key check);
`open_paths` is a live set (`app.state.open_paths`), so routes that must load
without a key, such as a static page that then asks the user for one, can be
added to it.
"""

from __future__ import annotations

import logging
from typing import Any

from starlette.types import ASGIApp, Receive, Scope, Send
from starlette.websockets import WebSocket

from realtime.asgi.auth import (
    ApiKeys,
    OriginPolicy,
    header,
    presented_key,
    subprotocol_key,
)
from realtime.asgi.responses import ErrorRenderer, error_response, error_response_for
from realtime.observability.logs import event
from realtime.observability.metrics import Metrics
from realtime.protocol.credentials import has_query_credentials
from realtime.protocol.errors import (
    AuthenticationError,
    CredentialsInQueryError,
    OriginNotAllowedError,
    RealtimeError,
)

#: Named before auth.py moved into asgi/; kept, since log filters select on it.
log = logging.getLogger("realtime.auth")

OPEN_PATHS = frozenset({"/health", "/ready"})


def route_path(scope: Scope) -> str:
    """The path the app routes on: mounted in another app (`root_path` "/llm"), "/llm/health"
    is this app's "/health", which must stay open as it is at the root."""
    path: str = scope["path"]
    root: str = scope.get("root_path", "")
    if root and path.startswith(root + "/"):
        return path[len(root) :]
    return path


class AccessGuard:
    def __init__(
        self,
        app: ASGIApp,
        *,
        keys: ApiKeys,
        origins: OriginPolicy,
        metrics: Metrics | None,
        open_paths: set[str] | None = None,
    ):
        self.app = app
        self.keys = keys
        self.origins = origins
        self.metrics = metrics
        self.open_paths = open_paths if open_paths is not None else set(OPEN_PATHS)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        kind = scope["type"]
        if kind not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        error = self.check(scope)
        if error is None:
            await self.app(scope, receive, send)
            return
        client = scope.get("client")
        event(
            log,
            "access.refused",
            logging.WARNING if error.status == 401 else logging.INFO,
            transport=kind,
            path=scope["path"],
            status=error.status,
            code=error.code,
            client=f"{client[0]}:{client[1]}" if client else None,
        )
        if kind == "websocket":
            if self.metrics is not None:
                self.metrics.ws_handshakes.labels(error.code or "refused").inc()
            await deny_websocket(scope, receive, send, error)
        else:
            render = error_response_for(route_path(scope))
            await refusal(error, render)(scope, receive, send)

    def check(self, scope: Scope) -> RealtimeError | None:
        headers = scope["headers"]
        # On every path, open ones too: the key is in a URL that logs keep either way.
        if has_query_credentials(scope.get("query_string", b"")):
            return CredentialsInQueryError(
                "API keys are not accepted in the query string; send the header "
                "`Authorization: Bearer <key>` (or, from a browser WebSocket, the "
                "subprotocol realtime-key.<key>)"
            )
        if route_path(scope) in self.open_paths:
            return None
        origin, host = header(headers, b"origin"), header(headers, b"host")
        if not self.origins.allows(origin, host, scope.get("scheme", "http")):
            return OriginNotAllowedError(
                "this Origin is not allowed to use the server; see --allowed-origin"
            )
        if not self.keys.enabled:
            return None
        presented = presented_key(headers)
        if presented is None and scope["type"] == "websocket":
            presented = subprotocol_key(scope.get("subprotocols", ()))
        if presented is None:
            return AuthenticationError(
                "You didn't provide an API key. Send `Authorization: Bearer <key>`"
                " (browsers: the WebSocket subprotocol realtime-key.<key> or"
                " openai-insecure-api-key.<key>).",
                code="missing_api_key",
            )
        if not self.keys.matches(presented):
            return AuthenticationError("Incorrect API key provided.")
        return None


def refusal(error: RealtimeError, render: ErrorRenderer = error_response) -> Any:
    response = render(error)
    if error.status == 401:
        response.headers["WWW-Authenticate"] = 'Bearer realm="realtime"'
    if error.retryable and error.status == 503:
        response.headers["Retry-After"] = "1"
    return response


async def deny_websocket(scope: Scope, receive: Receive, send: Send, error: RealtimeError) -> None:
    """Refuse a WebSocket handshake with an HTTP response carrying the OpenAI error body."""
    websocket = WebSocket(scope, receive, send)
    if "websocket.http.response" in scope.get("extensions", {}):
        await websocket.send_denial_response(refusal(error))
    else:  # a server without the denial extension answers a pre-accept close with 403
        await websocket.close()
