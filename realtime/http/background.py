"""Background responses over HTTP (`background: true`; the runs are
`realtime.http.background_runs`):

    POST /v1/responses {"background": true}            the Response at `queued`, at once
    POST /v1/responses {"background": true, "stream": true}
                                                       its events; the run goes on if the
                                                       client goes away
    GET  /v1/responses/{id}?stream=true[&starting_after=N]
                                                       its events after N, then the live
                                                       ones, until its last
    POST /v1/responses/{id}/cancel                     `cancelled` (the engine stops)

A stream of a background response reads the run's event log and never drives
the run: a client that hangs up ends only its own stream.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from realtime.asgi.responses import ORJSONResponse
from realtime.dialects.responses.errors import StartingAfterError
from realtime.dialects.responses.request import ResponsesRequest
from realtime.http.background_runs import BackgroundRun, BackgroundRuns
from realtime.http.cache_scope import CacheScope
from realtime.http.serving import Outcome, begin, respond
from realtime.http.sse import SseFraming, encode_named_event
from realtime.protocol.errors import InvalidRequestError, RealtimeError


def runs_of(request: Request) -> BackgroundRuns:
    runs: BackgroundRuns = request.app.state.background
    return runs


def _framing(log_last: Any) -> SseFraming:
    """The Responses framing, with an `error` event (a follower that fell behind what the
    log keeps, or the shutdown) numbered as the run's last event: it never takes a number
    from the run itself."""

    def error(exc: RealtimeError) -> bytes:
        body = exc.to_body()["error"]
        event = {
            "type": "error",
            "code": body["code"],
            "message": body["message"],
            "param": body["param"],
            "sequence_number": log_last(),
        }
        return encode_named_event(event)

    return SseFraming(encode=encode_named_event, done=None, error=error)


async def create_background(
    request: Request,
    parsed: ResponsesRequest,
    outcome: Outcome,
    scope: CacheScope,
    owner: str | None,
    size: int,
) -> Response:
    """`size`: the body's bytes (a large prompt is prepared off the loop)."""
    runs = runs_of(request)
    try:
        run = await runs.create(
            parsed,
            owner=owner,
            session_id=scope.session_id,
            cache_salt=scope.cache_salt,
            size=size,
        )
    except RealtimeError as exc:
        outcome.finish("error", error=exc)
        raise
    outcome.response_id = run.id
    if not parsed.stream:
        outcome.finish("completed")
        return ORJSONResponse(run.queued)
    return await _stream(request, outcome, run, runs.follow(run, None))


async def resume(
    request: Request, response: dict[str, Any], owner: str | None, after: int | None
) -> Response:
    """`GET /v1/responses/{id}?stream=true`: a background response's events after `after`."""
    outcome = begin(request)
    runs = runs_of(request)
    try:
        if not response.get("background"):
            raise InvalidRequestError(
                f"stream: response '{response['id']}' was not created with background=true;"
                " only a background response's events can be streamed again (retrieve it"
                " without stream)",
                param="stream",
            )
        events = runs.resume(response, owner, after)
        run = runs.find(response["id"], owner)
        assert run is not None  # `resume` found it
    except RealtimeError as exc:
        outcome.finish("error", error=exc)
        raise
    outcome.response_id = run.id
    return await _stream(request, outcome, run, events)


async def _stream(
    request: Request,
    outcome: Outcome,
    run: BackgroundRun,
    events: AsyncGenerator[dict[str, Any], None],
) -> Response:
    return await respond(
        request,
        outcome,
        True,
        stream=lambda: events,
        complete=_not_called,
        framing=_framing(lambda: run.log.last),
    )


async def _not_called() -> dict[str, Any]:  # pragma: no cover - these always stream
    raise AssertionError("a background stream is never one JSON body")


def stream_query(query: dict[str, str]) -> tuple[bool, int | None]:
    """`stream` and `starting_after` of `GET /v1/responses/{id}`, checked."""
    raw = query.get("stream")
    if raw not in (None, "true", "false"):
        raise InvalidRequestError(
            f"Invalid value for 'stream': {raw!r}; expected true or false",
            param="stream",
            code="invalid_value",
        )
    stream = raw == "true"
    text = query.get("starting_after")
    if text is None:
        return stream, None
    if not stream:
        raise InvalidRequestError(
            "starting_after is only allowed when stream is true", param="starting_after"
        )
    try:
        after = int(text)
    except ValueError:
        after = -1
    if after < 0 or not text.isdigit():
        raise StartingAfterError(
            f"Invalid value for 'starting_after': {text!r}; expected a sequence number"
            " (an integer >= 0)"
        )
    return stream, after
