"""The engine contract: token ids in, token ids (and logprobs) out, async and cancellable.

An engine knows nothing about OpenAI, JSON or sockets: it imports neither the
wire models (`realtime.protocol`) nor the chat logic. It describes its model with
`realtime.model` (`ModelInfo`: the tokenizer and chat template the pipeline uses)
and raises its own errors (`engine/errors.py`), which the pipeline maps to client
errors. The pipeline renders and tokenizes the prompt, the engine generates, and
the pipeline detokenizes, matches stop strings and builds chunks with the chat
logic. Cancellation is closing the iterator returned by `generate` (or cancelling
the task iterating it): an engine must stop its work for that request when that
happens, promptly and measurably.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from realtime.engine.errors import RequestPart
from realtime.model.generation import FinishReason, TokenLogprob
from realtime.model.info import ModelInfo

if TYPE_CHECKING:  # the grammar engine loads only where constraints are used
    from realtime.constrain.matcher import CompiledConstraint
    from realtime.constrain.tokenizer import TokenizerBinding


@dataclass(slots=True)
class SamplingParams:
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    min_p: float = 0.0
    seed: int | None = None
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    repetition_penalty: float = 1.0
    logit_bias: dict[int, float] = field(default_factory=dict)


@dataclass(slots=True)
class StopConditions:
    max_tokens: int | None = None
    stop_token_ids: list[int] = field(default_factory=list)
    ignore_eos: bool = False
    min_tokens: int = 0


#: `EngineRequest.priority` values. Lower runs first (vLLM's convention); engines that
#: schedule by priority (`schedules_background`) run BACKGROUND work only while no
#: NORMAL work is waiting, so a speculative warm-up never holds up a client's request.
NORMAL_PRIORITY = 0
BACKGROUND_PRIORITY = 1


@dataclass(slots=True)
class EngineRequest:
    request_id: str
    prompt_token_ids: list[int]
    sampling: SamplingParams = field(default_factory=SamplingParams)
    stop: StopConditions = field(default_factory=StopConditions)
    #: None: no logprobs; k >= 0: the sampled token's logprob plus the top k.
    logprobs: int | None = None
    cache_salt: str | None = None
    #: The conversation (a WebSocket session) the request belongs to: a cache hint, and
    #: with `cache_salt` the isolation key for prefix reuse (see the engine's docs).
    session_id: str | None = None
    priority: int = NORMAL_PRIORITY
    #: What sampling must follow (a grammar, or banned ids), compiled by the pipeline
    #: for this engine's `grammar_binding`; each sequence starts its own matcher from
    #: it. Only a `ConstrainingEngine` is ever given one.
    constraint: CompiledConstraint | None = None
    #: A client's warm-up (the Responses API's `generate: false`): only the prompt's
    #: prefill matters; the one token it asks for is dropped. An engine without a
    #: cache may answer it with no token at all (the scripted engine does).
    warm_up: bool = False


@dataclass(slots=True)
class EngineOutput:
    """One step of generation: new token ids, and the finish reason on the last step."""

    token_ids: list[int]
    logprobs: list[TokenLogprob] | None = None
    finish_reason: FinishReason | None = None
    #: Set once (on the first output) by engines that reuse a cached prompt prefix.
    cached_tokens: int | None = None
    #: Engine-side detail for FinishReason.ERROR; shown to the client.
    error: str | None = None
    #: The part of the request at fault for FinishReason.ERROR, when it is the request's
    #: (`RequestPart.CONSTRAINT`: its grammar hit a limit); None: the engine's fault.
    error_part: RequestPart | None = None
    #: True when the last id in `token_ids` is the EOS / stop token that ended the
    #: request: it counts as generated but its text is never shown (as in vLLM).
    stopped_on_token: bool = False


@runtime_checkable
class SessionAwareEngine(Protocol):
    """Engines that keep per-session state (cache hints) and want to hear when it may go."""

    def end_session(self, session_id: str) -> None:
        """The session is over: its cache entries lose their protection (or are dropped)."""
        ...


@runtime_checkable
class ConstrainingEngine(Protocol):
    """Engines that enforce `EngineRequest.constraint` while they sample (cpu, exllamav2).

    They bind the model's tokenizer to the grammar engine when they load it; the
    pipeline compiles each request's constraint against that binding.
    """

    @property
    def grammar_binding(self) -> TokenizerBinding | None:
        """The model's vocabulary as the grammar engine sees it, once loaded; None
        before that, or when the tokenizer could not be bound (see
        `grammar_unavailable_reason`)."""
        ...

    @property
    def grammar_unavailable_reason(self) -> str | None:
        """Why `grammar_binding` is None, for the client's error; None when it is set."""
        ...


def schedules_background(engine: object) -> bool:
    """Whether `engine` defers BACKGROUND_PRIORITY requests behind normal ones.

    Only such engines get speculative warm-ups: on an engine that schedules every
    request alike, a warm-up could make a client's next request wait.
    """
    return getattr(engine, "schedules_background", False) is True


@runtime_checkable
class Engine(Protocol):
    """What every engine provides. Implementations: `registry.py` names and builds them."""

    @property
    def info(self) -> ModelInfo: ...

    @property
    def ready(self) -> bool:
        """True once the engine can take requests (weights loaded, not crashed)."""
        ...

    @property
    def unavailable_reason(self) -> str | None:
        """Why the engine cannot take requests, for clients and logs; None when ready."""
        ...

    def generate(self, request: EngineRequest) -> AsyncGenerator[EngineOutput, None]:
        """Stream the outputs for one request; close the iterator to cancel it.

        A request that cannot run or fails raises an `engine.errors.GenerationError`."""
        ...

    async def start(self) -> None:
        """Load weights / start worker threads. Called once before serving."""
        ...

    async def close(self) -> None:
        """Release everything; in-flight iterators end."""
        ...
