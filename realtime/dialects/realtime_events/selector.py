"""/v1/realtime's Realtime events: a handshake with `?model=` speaks them.

The rule (docs/protocol.md, "Which dialect a socket speaks"): a `model` query
parameter, with any value, selects the OpenAI Realtime API's event protocol;
that is what `client.realtime.connect(model=...)` sends. None of our chat-frame
clients puts a query on the URL, so they keep their dialect (the route's chat
frames selector comes after this one).

A browser client (the `openai` SDK's `OpenAIRealtimeWebSocket`) offers the
subprotocol `realtime`, and its key as `openai-insecure-api-key.<key>` (read by the
access guard): `realtime` is selected when offered, since a browser fails a handshake
that selects none of the subprotocols it sent; the key is never echoed.
"""

from __future__ import annotations

from collections.abc import MutableMapping
from typing import Any
from urllib.parse import parse_qs

from realtime.asgi.auth import SUBPROTOCOL
from realtime.dialects.realtime_events.dialect import RealtimeEventDialect
from realtime.dialects.realtime_events.limits import EventLimits
from realtime.pipeline import ChatPipeline
from realtime.session.dialect import DialectChoice, DialectSelector

#: Characters of the query string read to find `model` (the header limits bound it too).
_MAX_QUERY_CHARS = 8192


def realtime_events(pipeline: ChatPipeline, limits: EventLimits) -> DialectSelector:
    """The Realtime event dialect on `pipeline`, for a handshake whose URL carries `model`."""

    def select(scope: MutableMapping[str, Any]) -> DialectChoice | None:
        raw = scope.get("query_string", b"")[:_MAX_QUERY_CHARS]
        models = parse_qs(raw.decode("latin-1"), keep_blank_values=True).get("model")
        if models is None:
            return None
        offered = scope.get("subprotocols") or ()
        return DialectChoice(
            RealtimeEventDialect.factory(pipeline, models[0], limits),
            SUBPROTOCOL if SUBPROTOCOL in offered else None,
        )

    return select
