"""What the pipeline yields to every API: per engine step a `Step`, at the end a `Finish`.

A step carries the parsed output of that step (`realtime.protocol.output`'s
events), the tokens behind it and their logprobs; the finish says why the answer
ended and what it used. Each API's dialect renders them in its own wire shapes:
chat chunks (`DeltaGenerator`), Responses and Realtime events (one item
lifecycle), Anthropic's content blocks. They are plain objects, built once per
engine step, so the per-token path stays as lean as building the chunk itself.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from realtime.model.generation import FinishReason
from realtime.protocol.output import OutputEvent


@dataclass(slots=True)
class Step:
    """One engine step's output, as the answer grows.

    `events` is the parsed output of the step; None when no parser runs, and then
    `text` (the step's visible text) is all answer content: the common case costs
    no event objects. `logprobs` are the step's tokens' logprobs in OpenAI's shape
    (None unless asked for). `cached_tokens` is set on the first step: how much of
    the prompt the engine reused from its cache."""

    token_ids: list[int]
    text: str
    events: list[OutputEvent] | None
    logprobs: list[dict[str, Any]] | None = None
    cached_tokens: int | None = None


@dataclass(slots=True)
class Usage:
    """Tokens of one answer: the prompt (and how much of it came from the cache) and
    every token the engine generated, stop strings included."""

    prompt_tokens: int
    completion_tokens: int = 0
    cached_tokens: int = 0

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    def as_dict(self) -> dict[str, Any]:
        """In the chat API's spelling, which the access log and the metrics read."""
        return {
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "total_tokens": self.prompt_tokens + self.completion_tokens,
            "prompt_tokens_details": {"cached_tokens": self.cached_tokens},
        }


@dataclass(frozen=True, slots=True)
class Finish:
    """The answer ended: why, and what it used. An `ERROR` finish is followed by the
    error itself, raised by the pipeline's iterator."""

    reason: FinishReason
    usage: Usage
    #: A finish carries no output: read like a `Step`'s, so a consumer that looks at
    #: either (the latency timer, once per token) needs no type test.
    text: ClassVar[str] = ""
    events: ClassVar[None] = None


#: What the pipeline's `events()` yields: steps, then exactly one finish.
PipelineEvent = Step | Finish
