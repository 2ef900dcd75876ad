"""From a model's next-token logits to a chosen token (and its logprobs), on torch tensors.

Model engines that compute logits themselves (the CPU engine) share this code, so the
sampling parameters mean the same thing everywhere and are tested once, by hand,
without a model.

The processing order, per step and per sequence:

1. `logit_bias` (OpenAI): the bias is added to the raw logit of each listed token id.
2. Suppression: ids that may not be chosen now (EOS and stop ids before `min_tokens`)
   get -inf.
3. `repetition_penalty` (Hugging Face semantics): every token id seen so far, in the
   prompt or the output, has a positive logit divided by the penalty and a negative one
   multiplied by it.
4. `presence_penalty` and `frequency_penalty` (OpenAI semantics, over the *generated*
   tokens only): `logit[j] -= frequency * count[j] + presence * (count[j] > 0)`.
5. Greedy decoding stops here and takes the argmax (temperature below `GREEDY_BELOW`,
   which also keeps tiny temperatures from overflowing the division).
6. `temperature`: logits are divided by it.
7. Truncation, in Hugging Face's order: `top_k` (ties with the k-th value are kept),
   `top_p` (the smallest set of most likely tokens whose probability reaches p),
   `min_p` (drop tokens less likely than `min_p` times the most likely one).
8. The token is drawn from the softmax with the sequence's own `torch.Generator`.

Which distribution logprobs report: the *processed* one, the log-softmax of the logits
the token was actually chosen from - after every step above that ran. A sampled
token's logprob is therefore the real log-probability of drawing it, and tokens that
truncation removed are never listed among the top alternatives (the top list can be
shorter than asked). Greedy decoding has no temperature and no truncation, so its
logprobs are the log-softmax after bias, suppression and penalties; with neutral
parameters that is exactly the model's own distribution. (vLLM reports the raw model
distribution by default; we chose the processed one so the numbers explain the
choices made, and so neutral settings still give the raw model numbers.)

Seeds: each sequence draws from its own generator, seeded from `seed` (or randomly
when there is none), and consumes exactly one draw per sampled token, so its sequence
of draws never depends on what else is running. The same seed gives the same tokens
as long as the logits are the same; the CPU engine batches concurrent requests into
one forward pass, where a row's logits can differ from a lone run's in the last float
bits, which changes a token only when a draw falls within that difference of a
boundary between two tokens (see docs/architecture.md).

Batches: `sample_batch` takes one row of logits per sequence. Rows that decode plainly
greedily (no bias, penalties, suppression or logprobs) share one `argmax` over the
batch; every other row goes through its own sampler, one by one.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass

import torch

from realtime.engine.base import SamplingParams
from realtime.model.generation import TokenLogprob

#: Temperatures below this decode greedily (0 is the documented way to ask for it).
GREEDY_BELOW = 1e-5

_NEG_INF = float("-inf")


@dataclass(frozen=True, slots=True)
class Sampled:
    """One chosen token; `logprob` is set when the sequence asked for logprobs."""

    token_id: int
    logprob: TokenLogprob | None = None


# --- the steps, as pure functions over [..., vocab] tensors (inputs are never modified) ---


def apply_logit_bias(logits: torch.Tensor, ids: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    """Add `bias[i]` to the logit of token `ids[i]`."""
    out = logits.clone()
    out[..., ids] += bias.to(out.dtype)
    return out


def suppress(logits: torch.Tensor, token_ids: Collection[int]) -> torch.Tensor:
    """Make `token_ids` impossible to choose (-inf); ids outside the vocabulary are ignored."""
    vocab = logits.shape[-1]
    ids = [t for t in token_ids if 0 <= t < vocab]
    if not ids:
        return logits
    out = logits.clone()
    out[..., ids] = _NEG_INF
    return out


def apply_repetition_penalty(
    logits: torch.Tensor, seen: torch.Tensor, penalty: float
) -> torch.Tensor:
    """HF's rule for every token in the boolean mask `seen`: x/p if x > 0, else x*p."""
    penalized = torch.where(logits > 0, logits / penalty, logits * penalty)
    return torch.where(seen, penalized, logits)


def apply_presence_frequency(
    logits: torch.Tensor, counts: torch.Tensor, presence: float, frequency: float
) -> torch.Tensor:
    """OpenAI's rule, `counts` being how often each token was generated so far."""
    return logits - frequency * counts - presence * (counts > 0).to(logits.dtype)


def apply_temperature(logits: torch.Tensor, temperature: float) -> torch.Tensor:
    return logits / temperature


def top_k_filter(logits: torch.Tensor, k: int) -> torch.Tensor:
    """Keep the k largest logits (and anything tied with the k-th).

    k <= 0 keeps everything: 0 is our default and -1 is how vLLM clients say "off".
    """
    if k <= 0 or k >= logits.shape[-1]:
        return logits
    kth = torch.topk(logits, k, dim=-1).values[..., -1:]
    return logits.masked_fill(logits < kth, _NEG_INF)


def top_p_filter(logits: torch.Tensor, p: float) -> torch.Tensor:
    """Keep the smallest set of most likely tokens whose total probability reaches `p`.

    A token is dropped when the tokens ranked before it already hold `p`, so the most
    likely token always stays.
    """
    if p >= 1.0:
        return logits
    sorted_logits, order = torch.sort(logits, dim=-1, descending=True)
    probs = torch.softmax(sorted_logits, dim=-1)
    mass_before = torch.cumsum(probs, dim=-1) - probs
    drop_sorted = mass_before >= p
    drop_sorted[..., 0] = False
    drop = torch.zeros_like(drop_sorted).scatter(-1, order, drop_sorted)
    return logits.masked_fill(drop, _NEG_INF)


def min_p_filter(logits: torch.Tensor, min_p: float) -> torch.Tensor:
    """Drop tokens whose probability is below `min_p` times the top token's."""
    if min_p <= 0.0:
        return logits
    probs = torch.softmax(logits, dim=-1)
    floor = min_p * probs.max(dim=-1, keepdim=True).values
    return logits.masked_fill(probs < floor, _NEG_INF)


def top_logprobs(logprobs: torch.Tensor, k: int) -> list[tuple[int, float]]:
    """The k most likely (id, logprob) of a 1-D log-distribution, impossible ones left out."""
    if k <= 0:
        return []
    values, ids = torch.topk(logprobs, min(k, logprobs.shape[-1]))
    return [
        (int(i), float(v))
        for i, v in zip(ids.tolist(), values.tolist(), strict=True)
        if v != _NEG_INF
    ]


# --- per-sequence state ---


class SequenceSampler:
    """Sampling state of one sequence: its parameters, generator and token counts.

    `sample` chooses the next token and records it, so the penalties see it on the
    next step. The engine passes the ids that may not be chosen yet (min_tokens)
    as `banned`.
    """

    def __init__(
        self,
        params: SamplingParams,
        *,
        vocab_size: int,
        prompt_token_ids: Sequence[int] = (),
        logprobs: int | None = None,
    ):
        validate_sampling(params, vocab_size)
        self.params = params
        self.vocab_size = vocab_size
        self.logprobs = logprobs
        self.greedy = params.temperature < GREEDY_BELOW
        self.generator = torch.Generator()
        if params.seed is None:
            self.generator.seed()  # a fresh random seed per sequence
        else:
            self.generator.manual_seed(params.seed % 2**64)
        self._bias: tuple[torch.Tensor, torch.Tensor] | None = None
        if params.logit_bias:
            ids = list(params.logit_bias)
            self._bias = (
                torch.tensor(ids, dtype=torch.long),
                torch.tensor([params.logit_bias[i] for i in ids], dtype=torch.float32),
            )
        self._seen: torch.Tensor | None = None
        if params.repetition_penalty != 1.0:
            self._seen = torch.zeros(vocab_size, dtype=torch.bool)
            prompt = [t for t in prompt_token_ids if 0 <= t < vocab_size]
            self._seen[prompt] = True
        self._counts: torch.Tensor | None = None
        if params.presence_penalty or params.frequency_penalty:
            self._counts = torch.zeros(vocab_size, dtype=torch.float32)

    @property
    def plain_greedy(self) -> bool:
        """Greedy with nothing to process or report: the argmax of the raw logits."""
        return (
            self.greedy
            and self._bias is None
            and self._seen is None
            and self._counts is None
            and self.logprobs is None
        )

    def record(self, token_id: int) -> None:
        """Count a generated token for the penalties (`sample` does this itself)."""
        if not 0 <= token_id < self.vocab_size:
            return
        if self._seen is not None:
            self._seen[token_id] = True
        if self._counts is not None:
            self._counts[token_id] += 1

    def process(self, logits: torch.Tensor, *, banned: Collection[int] = ()) -> torch.Tensor:
        """The logits the next token is drawn from (1-D float32; removed tokens are -inf)."""
        p = self.params
        x = logits.to(torch.float32)
        if self._bias is not None:
            x = apply_logit_bias(x, *self._bias)
        if banned:
            x = suppress(x, banned)
        if self._seen is not None:
            x = apply_repetition_penalty(x, self._seen, p.repetition_penalty)
        if self._counts is not None:
            x = apply_presence_frequency(x, self._counts, p.presence_penalty, p.frequency_penalty)
        if self.greedy:
            return x
        if p.temperature != 1.0:
            x = apply_temperature(x, p.temperature)
        x = top_k_filter(x, p.top_k)
        x = top_p_filter(x, p.top_p)
        return min_p_filter(x, p.min_p)

    def sample(self, logits: torch.Tensor, *, banned: Collection[int] = ()) -> Sampled:
        """Choose the next token from 1-D `logits`, record it, and report its logprobs."""
        processed = self.process(logits, banned=banned)
        if self.greedy:
            token_id = int(torch.argmax(processed))
            log_dist = torch.log_softmax(processed, dim=-1) if self.logprobs is not None else None
        else:
            log_dist = torch.log_softmax(processed, dim=-1)
            draw = torch.multinomial(log_dist.exp(), 1, generator=self.generator)
            token_id = int(draw)
        self.record(token_id)
        if log_dist is None or self.logprobs is None:
            return Sampled(token_id)
        entry = TokenLogprob(
            token_id, float(log_dist[token_id]), top_logprobs(log_dist, self.logprobs)
        )
        return Sampled(token_id, entry)


def sample_batch(
    samplers: Sequence[SequenceSampler],
    logits: torch.Tensor,
    banned: Sequence[Collection[int]] | None = None,
) -> list[Sampled]:
    """One token per row of `logits` ([batch, vocab]), each row with its own sampler.

    Every sequence has its own parameters and generator, and a row's result never
    depends on which other rows share the batch: plain greedy rows (`plain_greedy`,
    nothing banned) take the row's argmax, computed for the whole batch at once; every
    other row is processed by its own sampler.
    """
    if logits.dim() != 2 or logits.shape[0] != len(samplers):
        raise ValueError(f"expected logits of shape [{len(samplers)}, vocab], got {logits.shape}")
    argmax: list[int] | None = None
    chosen: list[Sampled] = []
    for row, sampler in enumerate(samplers):
        row_banned = banned[row] if banned is not None else ()
        if sampler.plain_greedy and not row_banned:
            if argmax is None:
                argmax = logits.argmax(dim=-1).tolist()
            chosen.append(Sampled(argmax[row]))
        else:
            chosen.append(sampler.sample(logits[row], banned=row_banned))
    return chosen


def validate_sampling(params: SamplingParams, vocab_size: int) -> None:
    """Raise ValueError for values the maths cannot honour.

    The request layer checks the OpenAI fields' ranges; this also covers the extension
    fields it passes through (nvext min_p, ...) and token ids only the model can judge.
    """
    if params.temperature < 0:
        raise ValueError(f"temperature must be >= 0, got {params.temperature}")
    if not 0.0 < params.top_p <= 1.0:
        raise ValueError(f"top_p must be in (0, 1], got {params.top_p}")
    if not 0.0 <= params.min_p <= 1.0:
        raise ValueError(f"min_p must be in [0, 1], got {params.min_p}")
    if params.repetition_penalty <= 0:
        raise ValueError(f"repetition_penalty must be > 0, got {params.repetition_penalty}")
    bad = sorted(t for t in params.logit_bias if not 0 <= t < vocab_size)
    if bad:
        raise ValueError(
            f"logit_bias names token id {bad[0]}, outside the vocabulary (0..{vocab_size - 1})"
        )
