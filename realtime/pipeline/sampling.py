"""Request fields -> the engine's SamplingParams, and token-id checks: shared by every API.

Every API's sampling fields arrive as one `Sampling` (its dialect already chose
between a field and its `nvext` twin), so one function turns them into engine
parameters: the request's value first, then the model's own generation defaults,
then OpenAI's.
"""

from __future__ import annotations

from typing import Any

from realtime.engine.base import SamplingParams
from realtime.model.info import GenerationDefaults
from realtime.protocol.errors import InvalidRequestError
from realtime.protocol.generation_request import FieldPaths, Sampling


def check_token_ids(ids: list[int], vocab_size: int | None, param: str) -> None:
    """Refuse ids outside the vocabulary before a stream commits (on a GPU they crash)."""
    if vocab_size is None:
        return
    bad = next((i for i in ids if i >= vocab_size), None)
    if bad is not None:
        raise InvalidRequestError(
            f"token id {bad} is outside the model's vocabulary of {vocab_size}", param=param
        )


def sampling_params(
    request: Sampling, defaults: GenerationDefaults, vocab_size: int | None, paths: FieldPaths
) -> SamplingParams:
    logit_bias: dict[int, float] = {}
    for key, value in (request.logit_bias or {}).items():
        try:
            logit_bias[int(key)] = value
        except ValueError:
            raise InvalidRequestError(
                f"logit_bias keys must be token ids, got {key!r}", param=paths.logit_bias
            ) from None
    check_token_ids(list(logit_bias), vocab_size, paths.logit_bias)

    def pick(*values: Any) -> Any:
        return next(v for v in values if v is not None)

    return SamplingParams(
        temperature=pick(request.temperature, defaults.temperature, 1.0),
        top_p=pick(request.top_p, defaults.top_p, 1.0),
        # 0 or vLLM's -1 disable top-k.
        top_k=max(0, pick(request.top_k, defaults.top_k, 0)),
        min_p=pick(request.min_p, defaults.min_p, 0.0),
        seed=request.seed,
        presence_penalty=request.presence_penalty or 0.0,
        frequency_penalty=request.frequency_penalty or 0.0,
        repetition_penalty=pick(request.repetition_penalty, defaults.repetition_penalty, 1.0),
        logit_bias=logit_bias,
    )
