"""Engine errors -> client errors: the one place that decides how a client hears of them.

Engines raise `realtime.engine.errors` (the request cannot run, the engine cannot
take requests, generation failed); a client gets an OpenAI error: a 400 naming
the field at fault, a 503 (1011 on a socket) or a 500 `engine_error`. The grammar
engine's `ConstraintError` (a schema or tool choice that cannot be enforced) is a
400 naming the field it came from.
"""

from __future__ import annotations

from realtime.constrain.errors import RESPONSE_FORMAT, TOOL_CHOICE, TOOLS, ConstraintError
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
from realtime.protocol.generation_request import CHAT_PATHS, FieldPaths


def _param(part: RequestPart | None, paths: FieldPaths) -> str | None:
    """The request field a client is pointed to for a part of an engine request."""
    if part is RequestPart.PROMPT:
        return paths.input
    if part is RequestPart.PROMPT_TOKEN_IDS:
        return paths.token_ids
    return None


def client_error(error: GenerationError, paths: FieldPaths = CHAT_PATHS) -> RealtimeError:
    """The client-facing error for what an engine raised (its message is kept), naming
    the field the client sent (`paths`)."""
    if isinstance(error, EngineRequestError):
        return InvalidRequestError(
            error.message,
            param=_param(error.part, paths),
            code="context_length_exceeded" if error.exceeds_context else None,
        )
    if isinstance(error, EngineUnavailable):
        return EngineUnavailableError(error.message)
    return EngineError(error.message)


def constraint_error(error: ConstraintError) -> InvalidRequestError:
    """A schema or tool choice the grammar engine refused: the request's own fault."""
    return InvalidRequestError(error.message, param=error.param)


def constraint_field(param: str, paths: FieldPaths = CHAT_PATHS) -> str:
    """The client's name (`text.format`, `tools`...) for the field a constraint came from."""
    named = {RESPONSE_FORMAT: paths.format, TOOLS: paths.tools, TOOL_CHOICE: paths.tool_choice}
    return named.get(param, param)


def failed_generation(
    error: str | None,
    part: RequestPart | None,
    constraint_param: str | None,
    paths: FieldPaths = CHAT_PATHS,
) -> RealtimeError:
    """The client-facing error for a generation that ended with an ERROR finish.

    A grammar that hit one of its limits mid-answer (`RequestPart.CONSTRAINT`) is the
    request's fault: an `invalid_request_error` naming the field its constraint came
    from (a 400 when no answer was sent yet); anything else is the engine's."""
    message = error or "the engine failed while generating"
    if part is RequestPart.CONSTRAINT:
        param = constraint_field(constraint_param, paths) if constraint_param else None
        return InvalidRequestError(message, param=param)
    return EngineError(message)
