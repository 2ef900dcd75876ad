"""The handlers that make every HTTP error an OpenAI error response (`asgi/responses.py`)."""

from __future__ import annotations

import functools
import logging
from collections.abc import Awaitable, Callable

from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response

from realtime.asgi.responses import ORJSONResponse, error_response
from realtime.observability.logs import event
from realtime.protocol.errors import InternalError, InvalidRequestError, RealtimeError

log = logging.getLogger("realtime.http")


Endpoint = Callable[[Request], Awaitable[Response]]


def openai_errors(
    endpoint: Endpoint, render: Callable[[RealtimeError], Response] = error_response
) -> Endpoint:
    """Answer every failure of `endpoint` with an OpenAI error body (or the body `render`
    makes: the Messages API's), in the route itself.

    Starlette's catch-all handler runs in ServerErrorMiddleware, which re-raises
    after responding; uvicorn then closes a keep-alive connection the client still
    believes is open. Catching here keeps the connection usable.
    """

    @functools.wraps(endpoint)
    async def guarded(request: Request) -> Response:
        try:
            return await endpoint(request)
        except RealtimeError as exc:
            return render(exc)
        except ClientDisconnect:
            # The client hung up (or its body was refused) before the request was read:
            # nobody to answer, nothing went wrong here.
            event(log, "http.client_gone", logging.DEBUG, path=request.url.path)
            return Response(status_code=499)
        except Exception:
            log.exception("unhandled error on %s %s", request.method, request.url.path)
            return render(InternalError())

    return guarded


async def handle_realtime_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, RealtimeError)
    return error_response(exc)


async def handle_http_exception(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    error = InvalidRequestError(exc.detail or "error", code=_http_code(exc.status_code))
    return ORJSONResponse(error.to_body(), status_code=exc.status_code, headers=exc.headers)


def _http_code(status: int) -> str:
    return {404: "not_found", 405: "method_not_allowed"}.get(status, "http_error")
