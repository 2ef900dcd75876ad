"""The one path from a validated request to engine requests, shared by every API.

Chat and text completions differ in how they make a prompt (a chat template, or
the text and token ids as given) and in how they frame the answer. What lies in
between is here once: the model check, the engine's readiness, the token-id
checks, the token budget (the context and `--max-tokens-cap`, `budget.py`), the
stop conditions and the sampling parameters.
"""

from __future__ import annotations

from collections.abc import Sequence

from realtime.engine.base import Engine, EngineRequest, StopConditions
from realtime.model.info import ModelInfo
from realtime.pipeline.budget import OutputAsk, Overflow, TokenBudget
from realtime.pipeline.sampling import check_token_ids, sampling_params
from realtime.protocol.errors import EngineUnavailableError, ModelNotFoundError
from realtime.protocol.generation_request import GenerationRequest


class EngineRequestBuilder:
    """Checks a request against the served model and turns its prompts into engine requests."""

    def __init__(self, engine: Engine, model_name: str, budget: TokenBudget):
        self.engine = engine
        self.model_name = model_name
        self.budget = budget

    def check_model(self, request: GenerationRequest) -> None:
        if request.model != self.model_name:
            raise ModelNotFoundError(
                f"The model `{request.model}` does not exist. Available: {self.model_name}",
                param=request.paths.model,
            )

    def check_ready(self) -> ModelInfo:
        """The model's description, once the engine can take requests."""
        engine = self.engine
        if not engine.ready:
            raise EngineUnavailableError(f"engine unavailable: {engine.unavailable_reason}")
        return engine.info

    def build(
        self,
        request: GenerationRequest,
        prompts: Sequence[list[int]],
        request_ids: Sequence[str],
        *,
        ask: OutputAsk,
        overflow: Overflow,
        logprobs: int | None,
        session_id: str | None = None,
    ) -> list[EngineRequest]:
        """One engine request per prompt (token ids), or a RealtimeError saying why not."""
        info, stopping = self.engine.info, request.stopping
        stop_token_ids = list(stopping.token_ids)
        check_token_ids(stop_token_ids, info.vocab_size, request.paths.stop_token_ids)
        limits = self.budget.limits(list(map(len, prompts)), info.context_length, ask, overflow)
        sampling = sampling_params(
            request.sampling, info.generation_defaults, info.vocab_size, request.paths
        )
        ignore_eos, min_tokens = stopping.ignore_eos, stopping.min_tokens
        cache_salt = request.cache_salt
        built = []
        for index, prompt in enumerate(prompts):
            stop = StopConditions(
                max_tokens=limits[index],
                stop_token_ids=list(stop_token_ids),
                ignore_eos=ignore_eos,
                min_tokens=min_tokens,
            )
            built.append(
                EngineRequest(
                    request_id=request_ids[index],
                    prompt_token_ids=prompt,
                    sampling=sampling,
                    stop=stop,
                    logprobs=logprobs,
                    cache_salt=cache_salt,
                    session_id=session_id,
                    warm_up=request.warm_up,
                )
            )
        return built
