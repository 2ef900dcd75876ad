"""What an engine raises about a request, in its own terms.

Engines do not know the wire: they say what went wrong (the request cannot run
here, the engine cannot take requests, generation failed) and which part of the
request is at fault, and the pipeline (`realtime.pipeline.engine_errors`) decides
how a client is told: the status, the error code, the field named.
Messages are written for clients all the same (they are shown), never a traceback.
"""

from __future__ import annotations

import enum


class RequestPart(enum.Enum):
    """The part of an `EngineRequest` an `EngineRequestError` is about."""

    #: the prompt as a whole: empty, or too long for the context
    PROMPT = "prompt"
    #: a prompt token id (outside the vocabulary)
    PROMPT_TOKEN_IDS = "prompt_token_ids"
    #: the sampling parameters
    SAMPLING = "sampling"
    #: the constraint (a schema, a tool set): it failed within its limits mid-answer
    CONSTRAINT = "constraint"


class GenerationError(Exception):
    """Base class: an engine could not generate (all or part of) one request."""

    def __init__(self, message: str):
        super().__init__(message)
        self.message = message


class EngineRequestError(GenerationError):
    """A request this engine will not run (too big for its cache, bad ids...).

    The request's own fault: sending it again fails again; other requests carry on.
    """

    def __init__(
        self,
        message: str,
        *,
        part: RequestPart | None = None,
        exceeds_context: bool = False,
    ):
        super().__init__(message)
        self.part = part
        #: the prompt does not fit the model's context window
        self.exceeds_context = exceeds_context


class EngineUnavailable(GenerationError):
    """The engine cannot take requests now (not started, shutting down, a failed step).

    Not the request's fault: the same request may succeed later or elsewhere."""


class EngineFailure(GenerationError):
    """Generation of this one request failed inside the engine; other requests carry on."""
