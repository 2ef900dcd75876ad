"""The OpenAI Responses API, transport-free: what HTTP and the socket dialect share.

    request.py       the `responses.create` body, strict (items.py, tools.py)
    conversation.py  items -> chat messages (a continuation's whole conversation)
    objects.py       the Response object as created
    events.py        chat chunks -> Responses events with sequence_number
    store.py         the store interface, its record, the in-memory store
    sqlite_store.py  the embedded SQLite store (`--response-store DIR`)
    service.py       prepare / events / complete over the chat pipeline, plan and
                     history_now for the socket (no awaiting), and the
                     stored-response operations (retrieve, input items, delete)
    socket_codec.py  WebSocket mode's frames: client events in, lanes, error events
                     (the dialect itself is realtime/session/responses_frames.py)

Generation is the chat pipeline's (`ChatPipeline.prepare` and `stream`): a
Responses request becomes a chat request and its chunks become Responses
events, so both APIs run the same templates, parsers, budget and engines.
"""

from realtime.responses.errors import (
    NotCancellableError,
    PreviousResponseNotFoundError,
    ResponseNotFoundError,
)
from realtime.responses.events import ResponseEvents, socket_error_event
from realtime.responses.request import (
    ResponseCreateEvent,
    ResponsesRequest,
    parse_responses_request,
)
from realtime.responses.service import PreparedResponse, ResponsesService
from realtime.responses.store import MemoryResponseStore, ResponseStore, StoredResponse

__all__ = [
    "MemoryResponseStore",
    "NotCancellableError",
    "PreparedResponse",
    "PreviousResponseNotFoundError",
    "ResponseCreateEvent",
    "ResponseEvents",
    "ResponseNotFoundError",
    "ResponseStore",
    "ResponsesRequest",
    "ResponsesService",
    "StoredResponse",
    "parse_responses_request",
    "socket_error_event",
]
