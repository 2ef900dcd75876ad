"""Engine outputs -> visible text, one step at a time: the loop every response shape shares.

Chat completions and text completions differ only in how they frame text; the
part in between is the same and lives here once: incremental detokenization
(special tokens hidden unless asked for, the stop token's text never shown), stop
strings with hold-back (ignored until `min_tokens`), the finish reason, and the
engine iterator's closing - leaving this generator early closes the engine's
iterator, which is how a cancel or a client disconnect reaches the engine - and
what the engine raises, turned into the client's error (`engine_errors.py`).
"""

from __future__ import annotations

from collections.abc import AsyncGenerator
from contextlib import aclosing
from dataclasses import dataclass

from realtime.chat.stops import StopMatcher
from realtime.engine.base import Engine, EngineRequest
from realtime.engine.errors import GenerationError, RequestPart
from realtime.model.generation import FinishReason, TokenLogprob
from realtime.model.tokenizer import Tokenizer
from realtime.observability.vllm_metrics import VllmMetrics
from realtime.pipeline.engine_errors import client_error
from realtime.protocol.errors import EngineError
from realtime.protocol.generation_request import CHAT_PATHS, FieldPaths


@dataclass(slots=True)
class TextStep:
    """What one engine step added: its tokens, the text now safe to show, the finish."""

    token_ids: list[int]
    text: str
    logprobs: list[TokenLogprob] | None
    finish: FinishReason | None
    cached_tokens: int | None
    #: Engine-side detail when `finish` is ERROR.
    error: str | None = None
    #: The part of the request at fault when `finish` is ERROR (None: the engine's fault).
    error_part: RequestPart | None = None


async def text_steps(
    engine: Engine,
    request: EngineRequest,
    tokenizer: Tokenizer,
    stops: StopMatcher,
    *,
    skip_special_tokens: bool = True,
    paths: FieldPaths = CHAT_PATHS,
    meter: VllmMetrics | None = None,
) -> AsyncGenerator[TextStep, None]:
    """Steps until (and including) the one with a finish reason.

    Raises a RealtimeError for what the engine raised (naming the client's fields,
    `paths`), and EngineError when the engine's stream ends without finishing.
    `meter` records the request for vLLM's metrics (observability/vllm_metrics.py).
    """
    decoder = tokenizer.decode_stream(skip_special_tokens=skip_special_tokens)
    min_tokens = request.stop.min_tokens
    generated = 0
    record = None
    if meter is not None:
        record = meter.start(len(request.prompt_token_ids), request.stop.max_tokens)
    try:
        async with aclosing(engine.generate(request)) as outputs:
            async for out in outputs:
                count = len(out.token_ids)
                generated += count
                if record is not None:
                    record.output(count, out.cached_tokens)
                shown = out.token_ids[:-1] if out.stopped_on_token else out.token_ids
                text = ""
                for token_id in shown:
                    piece = decoder.step(token_id)
                    if piece:
                        text += piece
                # As for EOS, stop strings cannot end an answer shorter than min_tokens.
                emit = stops.feed(text, check=generated > min_tokens)
                finish: FinishReason | None = None
                if stops.matched is not None:
                    finish = FinishReason.STOP
                elif out.finish_reason is not None:
                    finish = out.finish_reason
                    held = getattr(decoder, "finish", None)
                    if held is not None:
                        emit += stops.feed(held(), check=generated > min_tokens)
                    if stops.matched is not None:
                        finish = FinishReason.STOP
                    emit += stops.flush()
                if finish is not None and record is not None:
                    # Before the yield: the consumer may stop iterating there.
                    record.finish(finish.value, generated)
                yield TextStep(
                    out.token_ids,
                    emit,
                    out.logprobs,
                    finish,
                    out.cached_tokens,
                    out.error,
                    out.error_part,
                )
                if finish is not None:
                    return  # leaving the block closes the engine's iterator
    except GenerationError as exc:
        raise client_error(exc, paths) from exc
    finally:
        if record is not None:
            record.close()
    raise EngineError("the engine stream ended without a finish reason")
