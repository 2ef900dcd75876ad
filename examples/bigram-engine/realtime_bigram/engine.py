"""BigramEngine: a character bigram model, the smallest real engine for realtime.

It counts which character follows which in realtime's bundled text (each
paragraph ends with the end-of-text token) and generates by sampling the next
character from the counts that follow the last one. It shows everything an
engine owes the server, and nothing else:

- `info`: a `ModelInfo` with the tokenizer and a chat template, read before `start()`;
- `generate()`: an async generator of `EngineOutput`, one token per step, that
  honours max_tokens, stop token ids, EOS (`ignore_eos`, `min_tokens`), logprobs
  and the sampling parameters; it awaits between steps, so closing it (the
  server's cancel) stops the request before its next token;
- its own errors: `EngineRequestError` for a request it cannot run;
- `tokens_generated`, the counter the conformance kit measures cancels with.

Served with `realtime serve --engine bigram` once installed (the entry point in
pyproject.toml), or `--engine realtime_bigram:BigramEngine` from a checkout.
"""

from __future__ import annotations

import asyncio
import itertools
import math
import random
from collections.abc import AsyncGenerator
from importlib import resources

from realtime import (
    ChatTemplate,
    EngineOutput,
    EngineRequest,
    EngineRequestError,
    FinishReason,
    ModelInfo,
    TokenLogprob,
)
from realtime_bigram.tokenizer import CharTokenizer

#: Renders the conversation as `role: text` lines and opens the assistant's turn.
TEMPLATE = (
    "{%- for m in messages -%}"
    "{{- m.role }}: {{ m.content if m.content is string else '' }}\n"
    "{%- endfor -%}"
    "{%- if add_generation_prompt %}assistant: {% endif -%}"
)


def bundled_text() -> str:
    """The text realtime ships for its tiny test model."""
    return resources.files("realtime.testing").joinpath("tiny_model_corpus.txt").read_text("utf-8")


class BigramEngine:
    """A character bigram model. Keywords are the factory's: `realtime serve` passes
    `model_name` (--model-name) and any `--engine-option KEY=VALUE`; `model_dir` is
    accepted and ignored (the model is trained from `corpus`, default the bundled text)."""

    def __init__(
        self,
        *,
        model_name: str = "bigram",
        corpus: str | None = None,
        context_length: int = 4096,
        model_dir: str | None = None,
        chat_template: str | None = None,
    ):
        if context_length < 2:
            raise ValueError(f"context_length must be at least 2, got {context_length}")
        text = bundled_text() if corpus is None else corpus
        self.tokenizer = CharTokenizer(text)
        size = self.tokenizer.vocab_size
        end = self.tokenizer.end_id
        counts = [[0] * size for _ in range(size)]
        for paragraph in text.split("\n\n"):
            ids = [end, *self.tokenizer.encode(paragraph.strip()), end]
            for here, after in itertools.pairwise(ids):
                counts[here][after] += 1
        #: log P(next | this), -inf where never seen; a row never seen falls back to END
        self.logprobs = [_log_normalize(row, end) for row in counts]
        self._info = ModelInfo(
            name=model_name,
            context_length=context_length,
            tokenizer=self.tokenizer,
            chat_template=ChatTemplate(chat_template or TEMPLATE),
            owned_by="realtime-bigram",
            vocab_size=size,
        )
        self.tokens_generated = 0
        self._running = False
        self._stopped = False

    @property
    def info(self) -> ModelInfo:
        return self._info

    @property
    def ready(self) -> bool:
        return self._running

    @property
    def unavailable_reason(self) -> str | None:
        if self._running:
            return None
        return "the bigram engine has stopped" if self._stopped else "the engine has not started"

    async def start(self) -> None:
        self._running = True

    async def close(self) -> None:
        self._running = False
        self._stopped = True

    async def generate(self, request: EngineRequest) -> AsyncGenerator[EngineOutput, None]:
        prompt = request.prompt_token_ids
        size = self.tokenizer.vocab_size
        if len(prompt) >= self._info.context_length:
            raise EngineRequestError(
                f"the prompt is {len(prompt)} tokens; the context is {self._info.context_length}"
            )
        if any(not 0 <= t < size for t in prompt):
            raise EngineRequestError(f"prompt token ids must be in 0..{size - 1}")
        sampling, stop = request.sampling, request.stop
        rng = random.Random(sampling.seed)
        end = self.tokenizer.end_id
        ending = set(stop.stop_token_ids) | (set() if stop.ignore_eos else {end})
        last = prompt[-1] if prompt else end
        n = 0
        while True:
            await asyncio.sleep(0)  # one step: other requests run, and a cancel lands here
            n += 1
            scores = list(self.logprobs[last])
            for token, bias in sampling.logit_bias.items():
                if 0 <= token < size:
                    scores[token] += bias
            if n <= stop.min_tokens:
                for token in ending:
                    scores[token] = -math.inf
            token = _sample(scores, sampling.temperature, sampling.top_k, rng)
            self.tokens_generated += 1
            on_token = token in ending
            reason: FinishReason | None = None
            if on_token:
                reason = FinishReason.EOS if token == end else FinishReason.STOP
            elif stop.max_tokens is not None and n >= stop.max_tokens:
                reason = FinishReason.LENGTH
            elif len(prompt) + n >= self._info.context_length:
                reason = FinishReason.LENGTH
            logprobs = None
            if request.logprobs is not None:
                row = self.logprobs[last]
                top = sorted(
                    ((t, lp) for t, lp in enumerate(row) if lp > -math.inf),
                    key=lambda pair: -pair[1],
                )[: request.logprobs]
                chosen = row[token] if row[token] > -math.inf else -1e4
                logprobs = [TokenLogprob(token, chosen, top)]
            yield EngineOutput([token], logprobs, reason, stopped_on_token=on_token)
            if reason is not None:
                return
            last = token


def _log_normalize(row: list[int], fallback: int) -> list[float]:
    total = sum(row)
    if not total:
        return [0.0 if i == fallback else -math.inf for i in range(len(row))]
    return [math.log(c / total) if c else -math.inf for c in row]


def _sample(scores: list[float], temperature: float, top_k: int, rng: random.Random) -> int:
    """Greedy at temperature 0 (ties: the lowest id), else softmax over the top_k."""
    if temperature <= 0:
        return max(range(len(scores)), key=lambda i: (scores[i], -i))
    ranked = sorted(range(len(scores)), key=lambda i: -scores[i])
    if top_k > 0:
        ranked = ranked[:top_k]
    best = scores[ranked[0]]
    weights = [math.exp((scores[i] - best) / temperature) for i in ranked]
    return rng.choices(ranked, weights)[0]
