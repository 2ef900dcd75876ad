"""A grammar constraint as an exllamav2 filter (the `ExLlamaV2Filter` API of exllamav2 0.3.2).

exllamav2's dynamic generator calls a job's filters itself; this class has the
methods and attributes it uses, with the semantics of
`exllamav2/generator/filters/base.py`. It does not subclass `ExLlamaV2Filter`:
importing exllamav2 needs CUDA, and nothing in the generator checks the type.

How 0.3.2 drives a filter (file:line in the exllamav2 0.3.2 wheel):

* `generator/dynamic.py:1867-1872` (`receive_logits`): before a job's first
  sampled token, `background_drop()` then `begin("")`.
* `generator/sampler.py:436-444`: when every filter of the job says
  `can_mask_logits()`, `get_next(mask=True)` must return True (a prepared
  mask), then `mask_logits(logits[0][0])` gives the logits to sample from
  (excluded ids at -inf). The `end_filter` flag is never set on this path, so
  the answer ends when the mask allows only EOS and the job's stop tokens
  include EOS.
* `generator/sampler.py:450-492`: otherwise `get_next()` returns
  `(pass_tokens, end_tokens)` from `next()`; a single passing token that is
  in `end_tokens` ends the job with `eos_reason` `"end_filter"`.
* `generator/dynamic.py:1918-1935` (`receive_sample`): `feed(next_token)` with
  the sampled token (a `(1, 1)` tensor); then, for filters that
  `use_background_worker()`, the job queues `(filter, can_mask_logits)`, and
  `dynamic.py:1211-1220` calls `background_prepare_logit_mask(pool)` (or
  `background_next(pool)`) once the next forward pass is scheduled, so the
  mask is computed on a worker thread while the GPU runs.
"""

from __future__ import annotations

from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import torch

from realtime.constrain.logits import apply_allowed
from realtime.constrain.matcher import CompiledConstraint, SequenceConstraint

_NEG_INF = float("-inf")


class GrammarFilter:
    """One job's constraint, as exllamav2 0.3.2's dynamic generator expects a filter."""

    #: base.py: "For compatibility" - `next()` may return a list of passing ids.
    allow_return_type_list: bool = True

    def __init__(
        self,
        constraint: CompiledConstraint,
        *,
        model: Any = None,
        tokenizer: Any = None,
    ) -> None:
        # The attributes ExLlamaV2Filter.__init__ sets (base.py).
        self.model = model
        self.tokenizer = tokenizer
        self.sequence_str = ""
        self.background_result: Future[Any] | None = None
        self._constraint = constraint
        self._eos = constraint.binding.eos_token_ids
        self._matcher: SequenceConstraint = constraint.start()
        self._fed: list[int] = []
        self._mask: torch.Tensor | None = None

    # --- state ---

    @property
    def error(self) -> str | None:
        """Why the constraint failed (a token it did not allow was fed); the engine
        ends the job with an error when this is set."""
        return self._matcher.error

    @property
    def done(self) -> bool:
        return self._matcher.done

    @property
    def tokens_fed(self) -> int:
        return len(self._fed)

    # --- ExLlamaV2Filter ---

    def clone(self, c: GrammarFilter | None = None) -> GrammarFilter:
        """A filter in the same state (its own matcher, replayed)."""
        copy = GrammarFilter(self._constraint, model=self.model, tokenizer=self.tokenizer)
        for token in self._fed:
            copy.feed(token)
        return copy

    def begin(self, prefix_str: str = "") -> None:
        """Start (or restart) the answer: a fresh matcher, nothing fed."""
        if self._fed:
            self._matcher = self._constraint.start()
            self._fed = []
        self._mask = None
        self.sequence_str = prefix_str

    def feed(self, token: Any) -> None:
        """The sampled token (an int or exllamav2's `(1, 1)` tensor)."""
        token_id = int(token.item()) if isinstance(token, torch.Tensor) else int(token)
        self._fed.append(token_id)
        self._mask = None
        self._matcher.advance(token_id)

    def next(self) -> tuple[list[int], set[int]]:
        """`(pass_tokens, end_tokens)`: the allowed ids, and the EOS ids among them."""
        allowed = self._allowed()
        ids = torch.nonzero(allowed).flatten().tolist()
        return ids, {t for t in ids if t in self._eos}

    def use_background_worker(self) -> bool:
        return True

    def can_mask_logits(self) -> bool:
        return True

    def prepare_logit_mask(self) -> bool:
        self._mask = self._allowed()
        return True

    def mask_logits(self, logits: torch.Tensor) -> torch.Tensor:
        """Set every excluded logit to -inf, in place, and return the tensor."""
        mask = self._mask if self._mask is not None else self._allowed()
        if logits.shape[-1] != mask.shape[-1] or logits.dim() != 1:
            masked = apply_allowed(logits, mask)
            logits.copy_(masked)
            return logits
        return logits.masked_fill_(~mask, _NEG_INF)

    def background_next(self, pool: ThreadPoolExecutor) -> None:
        assert self.background_result is None
        self.background_result = pool.submit(self.next)

    def background_prepare_logit_mask(self, pool: ThreadPoolExecutor) -> None:
        assert self.background_result is None
        self.background_result = pool.submit(self.prepare_logit_mask)

    def background_drop(self) -> None:
        if self.background_result is not None:
            self.background_result.result()
            self.background_result = None

    def get_next(self, mask: bool = False) -> Any:
        if self.background_result is None:
            return self.prepare_logit_mask() if mask else self.next()
        result = self.background_result.result()
        self.background_result = None
        return result

    # --- helpers ---

    def _allowed(self) -> torch.Tensor:
        if self._matcher.error is not None:
            # A token the grammar did not allow was fed (a blocked or forced token):
            # end the answer; the engine reports `error`.
            only_eos = torch.zeros(self._constraint.binding.width, dtype=torch.bool)
            only_eos[sorted(self._eos)] = True
            return only_eos
        return self._matcher.allowed()
