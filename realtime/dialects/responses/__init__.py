"""The OpenAI Responses API, transport-free: what HTTP and the socket dialect share.

    request.py       the `responses.create` body, strict (items.py, tools.py)
    conversation.py  items -> chat messages (a continuation's whole conversation)
    objects.py       the Response object as created
    events.py        chat chunks -> Responses events with sequence_number
    service.py       the one run both transports use (begin, build_prompt, events,
                     complete) over the chat pipeline, and the stored-response
                     operations (retrieve, input items, delete)
    conversations.py the Conversations API, and a response's conversation (its
                     items read as the context, the response's items appended)
    socket_codec.py  WebSocket mode's frames: client events in, lanes, error events
    socket_job.py    a WebSocket-mode response as a session job (the run, framed)
    dialect.py       WebSocket mode's dialect of the session core
    selector.py      claims every /v1/responses handshake

Stored responses are `realtime.store`'s (the interface, memory, SQLite).

Generation is the chat pipeline's (`ChatPipeline.prepare` and `stream`): a
Responses request becomes a chat request and its chunks become Responses
events, so both APIs run the same templates, parsers, budget and engines.
"""

from realtime.dialects.responses.errors import (
    NotCancellableError,
    PreviousResponseNotFoundError,
    ResponseNotFoundError,
)
from realtime.dialects.responses.events import ResponseEvents, socket_error_event
from realtime.dialects.responses.request import (
    ResponseCreateEvent,
    ResponsesRequest,
    parse_responses_request,
)
from realtime.dialects.responses.service import PreparedResponse, ResponsesService

__all__ = [
    "NotCancellableError",
    "PreparedResponse",
    "PreviousResponseNotFoundError",
    "ResponseCreateEvent",
    "ResponseEvents",
    "ResponseNotFoundError",
    "ResponsesRequest",
    "ResponsesService",
    "parse_responses_request",
    "socket_error_event",
]
