"""Forward passes for the CPU engine: many sequences in one pass, or one at a time.

The scheduler (`backend.py`) decides which sequences get which tokens in a step;
a runner turns that into forward passes and returns one row of next-token logits per
sequence. Two runners share one interface:

- `BatchRunner`: every sequence of the step in ONE forward pass, its KV in a row of a
  `BatchKVCache`. Token chunks of different lengths are left-padded to the longest, so
  the last position of every row is a real token and `logits_to_keep=1` gives each
  row's next-token logits. Each query sees its own row's columns up to its own
  position, through an explicit 4D mask; positions are per row. Used for models whose
  every layer is plain full attention (a sliding-window or recurrent layer would need
  masks or state this runner does not build), after `verify_batching` has shown on
  the loaded weights that a batched pass matches sequences run alone.
- `SoloRunner`: one forward pass per sequence, each with its own `DynamicCache`: the
  reference behaviour, used for every other model and for background work
  (speculative warm-ups), which never shares a pass with client requests.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from typing import Any, Protocol

import torch
from transformers import DynamicCache
from transformers.cache_utils import DynamicLayer

from realtime.engine.cpu.batch_cache import BatchKVCache, KVState, WritePlan

log = logging.getLogger("realtime.engine.cpu")

#: Token id fed at padded positions (any valid id: its outputs are never read).
_PAD_ID = 0


@dataclass(frozen=True, slots=True)
class Feed:
    """Tokens to run for one sequence: `tokens` follow the `start` tokens it already has."""

    key: int
    tokens: list[int]
    start: int


class Runner(Protocol):
    #: True when one forward pass serves every feed of a step
    batched: bool

    def has_room(self) -> bool:
        """Whether another sequence can be attached now."""
        ...

    def attach(self, key: int, prefix: KVState | None, length: int) -> None:
        """Give a sequence its KV, starting from the first `length` tokens of `prefix`."""
        ...

    def forward(self, model: Any, feeds: list[Feed]) -> torch.Tensor:
        """Run the feeds; [len(feeds), vocab] logits of each one's next token."""
        ...

    def export(self, key: int, length: int) -> KVState:
        """The sequence's first `length` tokens of KV, safe to keep after `release`."""
        ...

    def release(self, key: int) -> None: ...

    def clear(self) -> None: ...


class SoloRunner:
    """One forward pass per sequence, each with its own `DynamicCache`."""

    batched = False

    def __init__(self, config: Any):
        self._config = config
        self._caches: dict[int, DynamicCache] = {}

    def has_room(self) -> bool:
        return True

    def attach(self, key: int, prefix: KVState | None, length: int) -> None:
        if prefix is None or length == 0:
            self._caches[key] = DynamicCache(config=self._config)
            return
        # Built from slices; DynamicCache copies them, so the stored entry stays intact.
        self._caches[key] = DynamicCache(
            [(k[..., :length, :], v[..., :length, :]) for k, v in prefix], config=self._config
        )

    def forward(self, model: Any, feeds: list[Feed]) -> torch.Tensor:
        rows = []
        with torch.inference_mode():
            for feed in feeds:
                out = model(
                    input_ids=torch.tensor([feed.tokens], dtype=torch.long),
                    cache=self._caches[feed.key],
                    use_cache=True,
                    logits_to_keep=1,
                )
                rows.append(out.logits[0, -1])
        return torch.stack(rows)

    def export(self, key: int, length: int) -> KVState:
        state = []
        for layer in self._caches[key].layers:
            assert isinstance(layer, DynamicLayer) and layer.keys is not None
            assert layer.values is not None
            state.append((layer.keys[..., :length, :], layer.values[..., :length, :]))
        return tuple(state)

    def release(self, key: int) -> None:
        self._caches.pop(key, None)

    def clear(self) -> None:
        self._caches.clear()


class BatchRunner:
    """Every feed of a step in one forward pass over a `BatchKVCache` (module docs)."""

    batched = True

    def __init__(self, config: Any, *, dtype: torch.dtype, max_rows: int, max_length: int):
        text = config.get_text_config() if hasattr(config, "get_text_config") else config
        heads = text.num_attention_heads
        head_dim = getattr(text, "head_dim", None) or text.hidden_size // heads
        self.cache = BatchKVCache(
            num_layers=text.num_hidden_layers,
            kv_heads=getattr(text, "num_key_value_heads", None) or heads,
            head_dim=head_dim,
            dtype=dtype,
            max_rows=max_rows,
            max_columns=max_length,
        )
        self._dtype = dtype
        #: row of each sequence, and each row's sequence and length; rows stay dense
        self._row: dict[int, int] = {}
        self._keys: list[int] = []
        self._length: dict[int, int] = {}
        self._columns = torch.arange(max_length + 1)

    def has_room(self) -> bool:
        return len(self._keys) < self.cache.max_rows

    def attach(self, key: int, prefix: KVState | None, length: int) -> None:
        row = len(self._keys)
        self.cache.reserve(row + 1, max(length, 1))
        self._row[key] = row
        self._keys.append(key)
        self._length[key] = length
        if prefix is not None and length:
            self.cache.load(row, prefix, length)

    def forward(self, model: Any, feeds: list[Feed]) -> torch.Tensor:
        row_of = self._row
        rows = [row_of[feed.key] for feed in feeds]
        order: list[int] | None = None
        if rows != sorted(rows):
            # In row order, a decode pass over a dense batch reads a view, not a gather.
            order = sorted(range(len(feeds)), key=rows.__getitem__)
            feeds = [feeds[i] for i in order]
            rows = [rows[i] for i in order]
        logits = self._forward(model, feeds, rows)
        length = self._length
        for feed in feeds:
            length[feed.key] = feed.start + len(feed.tokens)
        if order is None:
            return logits
        back = torch.empty(len(order), dtype=torch.long)
        back[torch.tensor(order)] = torch.arange(len(order))
        return logits.index_select(0, back)

    def _forward(self, model: Any, feeds: list[Feed], rows: list[int]) -> torch.Tensor:
        width = span = 0
        for feed in feeds:
            fed = len(feed.tokens)
            if fed > width:
                width = fed
            if feed.start + fed > span:
                span = feed.start + fed
        self.cache.reserve(len(self._keys), span)
        if width == 1:  # a decode pass: no padding; ids and positions in one tensor
            both = torch.tensor([[feed.tokens[0], feed.start] for feed in feeds], dtype=torch.long)
            ids: list[list[int]] | torch.Tensor = both[:, :1]
            position_ids = both[:, 1:]
            columns = position_ids
        else:
            padded: list[list[int]] = []
            positions: list[list[int]] = []
            for feed in feeds:
                pad = width - len(feed.tokens)
                padded.append([_PAD_ID] * pad + feed.tokens)
                positions.append([0] * pad + list(range(feed.start, feed.start + len(feed.tokens))))
            position_ids = torch.tensor(positions, dtype=torch.long)
            pads = torch.tensor([width - len(feed.tokens) for feed in feeds])
            real = torch.arange(width).unsqueeze(0) >= pads.unsqueeze(1)
            # Padding goes to the scratch column; real tokens to their own positions.
            columns = torch.where(real, position_ids, self.cache.scratch)
            ids = padded
        # A query sees its row's columns up to its own position; padding sees column 0
        # only (an all-masked row would make NaNs). Additive (0 or -inf), which attention
        # uses as it is; a boolean mask would be converted in every layer.
        hidden = self._columns[:span].view(1, 1, 1, span) > position_ids[:, None, :, None]
        mask = torch.zeros(hidden.shape, dtype=self._dtype).masked_fill_(hidden, -math.inf)
        first = rows[0]
        contiguous = rows == list(range(first, first + len(rows)))
        read: slice | torch.Tensor = (
            slice(first, first + len(rows)) if contiguous else torch.tensor(rows)
        )
        column = span - 1 if width == 1 and all(f.start == span - 1 for f in feeds) else None
        self.cache.plan = WritePlan(
            torch.tensor(rows).unsqueeze(1), columns, read, span, column if contiguous else None
        )
        try:
            with torch.inference_mode():
                out = model(
                    input_ids=ids if isinstance(ids, torch.Tensor) else torch.tensor(ids),
                    attention_mask=mask,
                    position_ids=position_ids,
                    cache=self.cache,
                    use_cache=True,
                    logits_to_keep=1,
                )
        finally:
            self.cache.plan = None
        logits: torch.Tensor = out.logits[:, -1]
        return logits

    def export(self, key: int, length: int) -> KVState:
        return self.cache.export(self._row[key], length)

    def release(self, key: int) -> None:
        """Free the sequence's row; the last row moves into it, so rows stay dense."""
        row = self._row.pop(key, None)
        if row is None:
            return
        self._length.pop(key, None)
        last = self._keys.pop()
        if last != key:
            self.cache.move(self._row[last], row, self._length[last])
            self._row[last] = row
            self._keys[row] = last
        if not self._keys:
            self.cache.clear()

    def clear(self) -> None:
        self._row.clear()
        self._keys.clear()
        self._length.clear()
        self.cache.clear()


def verify_batching(model: Any, runner: BatchRunner, solo: SoloRunner, vocab: int) -> bool:
    """Whether batched passes match passes run alone on this model (tolerance 1e-3).

    Two sequences of different lengths, prefilled together and then decoded together,
    against each alone. A model whose attention does not honour per-row positions and
    explicit masks (or raises on them) fails, and the engine runs one sequence per pass.
    """
    prompts = [[(7 * i + 3) % vocab for i in range(11)], [(5 * i + 1) % vocab for i in range(5)]]
    try:
        for key in range(len(prompts)):
            runner.attach(key, None, 0)
            solo.attach(key, None, 0)
        batched = runner.forward(model, [Feed(k, p, 0) for k, p in enumerate(prompts)])
        alone = torch.cat([solo.forward(model, [Feed(k, p, 0)]) for k, p in enumerate(prompts)])
        follow = [Feed(k, [2], len(p)) for k, p in enumerate(prompts)]
        batched_next = runner.forward(model, follow)
        alone_next = torch.cat([solo.forward(model, [feed]) for feed in follow])
        close = torch.allclose(batched.float(), alone.float(), atol=1e-3, rtol=1e-3) and (
            torch.allclose(batched_next.float(), alone_next.float(), atol=1e-3, rtol=1e-3)
        )
    except Exception:
        log.exception("batched forward passes failed on this model; running one at a time")
        close = False
    finally:
        runner.clear()
        solo.clear()
    if not close:
        log.warning("batched forward passes differ from single ones on this model; batching is off")
    return close
