"""Engine errors -> client errors: the one place that decides how a client hears of them.

Engines raise `realtime.engine.errors` (the request cannot run, the engine cannot
take requests, generation failed); a client gets an OpenAI error: a 400 naming
the field at fault, a 503 (1011 on a socket) or a 500 `engine_error`. The grammar
engine's `ConstraintError` (a schema or tool choice that cannot be enforced) is a
400 naming the field it came from.
"""

from __future__ import annotations

from realtime.constrain.errors import ConstraintError
from realtime.engine.errors import (
    EngineRequestError,
    EngineUnavailable,
    GenerationError,
    RequestPart,
)
from realtime.protocol.errors import (
    EngineError,
    EngineUnavailableError,
    InvalidRequestError,
    RealtimeError,
)

#: The request field a client is pointed to for each part of an engine request.
#: The prompt is named as the chat API spells it, on both APIs.
_PARAMS: dict[RequestPart, str | None] = {
    RequestPart.PROMPT: "messages",
    RequestPart.PROMPT_TOKEN_IDS: "nvext.token_data",
    RequestPart.SAMPLING: None,
}


def client_error(error: GenerationError) -> RealtimeError:
    """The client-facing error for what an engine raised (its message is kept)."""
    if isinstance(error, EngineRequestError):
        return InvalidRequestError(
            error.message,
            param=_PARAMS[error.part] if error.part is not None else None,
            code="context_length_exceeded" if error.exceeds_context else None,
        )
    if isinstance(error, EngineUnavailable):
        return EngineUnavailableError(error.message)
    return EngineError(error.message)


def constraint_error(error: ConstraintError) -> InvalidRequestError:
    """A schema or tool choice the grammar engine refused: the request's own fault."""
    return InvalidRequestError(error.message, param=error.param)
