"""The CPU engine's KV cache for a running batch: one row of preallocated tensors per sequence.

A transformers `Cache` whose layers keep, per model layer, one key and one value tensor
of shape [rows, kv_heads, capacity, head_dim]. Each sequence in the batch owns a row;
its tokens sit at columns 0..length-1 of that row whatever the other rows hold, so
sequences of any lengths share a forward pass without re-padding when one joins or
leaves. A forward pass writes each new token's key and value in place, at its own
(row, position), and attends over the rows it serves cut at the longest of them; the
caller's attention mask hides every column beyond a row's own length. Nothing is copied
per step: a decode step's rows are normally a contiguous range (rows are kept dense),
which is a view.

Why not the alternatives (measured on the benchmark model, docs/benchmarks/batching.md):
a batched `DynamicCache` concatenates the whole batch's KV on every step (`torch.cat`
per layer) and must be re-padded whenever a sequence joins or leaves; a `StaticCache`
writes every row at one shared position, which needs left-aligned rows and the same
re-padding; transformers' paged cache for continuous batching packs every sequence
into one row and attends with a block-diagonal mask, which on the CPU's SDPA costs
(batch size) x more attention work per step than per-row attention.

The last column of every row is scratch: padding tokens of a left-padded prefill batch
write there, never into a live column. Buffers start small and double (rows up to the
batch limit, columns up to the context length); `clear` frees them when the batch is
empty.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from transformers.cache_utils import Cache, CacheLayerMixin

#: Per-layer (keys, values), each [1, kv_heads, tokens, head_dim]: one sequence's KV.
KVState = tuple[tuple[torch.Tensor, torch.Tensor], ...]

_FIRST_ROWS = 4
_FIRST_COLUMNS = 256


@dataclass(frozen=True, slots=True)
class WritePlan:
    """Where the next forward pass writes and what it reads."""

    #: [n, 1] row of each batch entry (broadcast against `columns`)
    rows: torch.Tensor
    #: [n, q] column each query token's key and value go to (scratch for padding)
    columns: torch.Tensor
    #: the rows read: a contiguous range (a view) or an index (a gather)
    read: slice | torch.Tensor
    #: columns read: the longest row's length after this pass
    span: int
    #: the one column every row writes (rows read as a range, one token each), if so
    column: int | None = None


class BatchLayer(CacheLayerMixin):  # type: ignore[no-untyped-call]
    """One model layer's slice of a `BatchKVCache`; transformers calls `update` on it."""

    is_sliding = False
    is_compileable = False
    is_croppable = False

    def __init__(self, cache: BatchKVCache, index: int):
        super().__init__()  # type: ignore[no-untyped-call]
        self._cache = cache
        self._index = index
        self.is_initialized = True

    def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        return None

    def update(
        self, key_states: torch.Tensor, value_states: torch.Tensor, *args: Any, **kwargs: Any
    ) -> tuple[torch.Tensor, torch.Tensor]:
        return self._cache.write(self._index, key_states, value_states)

    def get_mask_sizes(self, query_length: int) -> tuple[int, int]:
        plan = self._cache.plan
        return (plan.span if plan is not None else query_length), 0

    def get_seq_length(self) -> int:
        # Only read when a model derives positions or a mask itself; the runner always
        # passes both, so the cache length never drives anything.
        return 0

    def get_max_length(self) -> int:
        return -1


class BatchKVCache(Cache):
    """Rows of KV for the sequences of a running batch (see the module docs)."""

    def __init__(
        self,
        *,
        num_layers: int,
        kv_heads: int,
        head_dim: int,
        dtype: torch.dtype,
        max_rows: int,
        max_columns: int,
    ):
        self._own_layers = [BatchLayer(self, i) for i in range(num_layers)]
        super().__init__(layers=list(self._own_layers))
        self._shape = (kv_heads, head_dim)
        self._dtype = dtype
        self.max_rows = max_rows
        #: the context length plus the scratch column
        self.max_columns = max_columns + 1
        self.keys: list[torch.Tensor] = []
        self.values: list[torch.Tensor] = []
        self.plan: WritePlan | None = None

    # --- size ---

    @property
    def rows(self) -> int:
        return self.keys[0].shape[0] if self.keys else 0

    @property
    def capacity(self) -> int:
        """Columns a row can hold, the scratch column excluded."""
        return self.keys[0].shape[2] - 1 if self.keys else 0

    @property
    def scratch(self) -> int:
        return self.capacity

    def reserve(self, rows: int, columns: int) -> None:
        """Make room for `rows` rows of `columns` live columns each (doubling)."""
        if rows > self.max_rows or columns + 1 > self.max_columns:
            raise ValueError(
                f"the batch cache holds {self.max_rows} rows of {self.max_columns - 1} columns"
            )
        if rows <= self.rows and columns <= self.capacity:
            return
        new_rows = max(self.rows, _FIRST_ROWS)
        while new_rows < rows:
            new_rows *= 2
        new_columns = max(self.capacity + 1, _FIRST_COLUMNS)
        while new_columns < columns + 1:
            new_columns *= 2
        new_rows = min(new_rows, self.max_rows)
        new_columns = min(new_columns, self.max_columns)
        heads, dim = self._shape
        old_rows, old_columns = self.rows, self.capacity
        for tensors in (self.keys, self.values):
            grown = []
            for layer in range(len(self._own_layers)):
                # zeros, not empty: masked columns are multiplied by a zero weight, and
                # garbage bits could be NaN (0 * NaN is NaN).
                fresh = torch.zeros(new_rows, heads, new_columns, dim, dtype=self._dtype)
                if tensors:
                    fresh[:old_rows, :, :old_columns] = tensors[layer][:, :, :old_columns]
                grown.append(fresh)
            tensors[:] = grown

    def clear(self) -> None:
        """Free every buffer (the batch is empty)."""
        self.keys.clear()
        self.values.clear()
        self.plan = None

    # --- a forward pass ---

    def write(
        self, layer: int, key_states: torch.Tensor, value_states: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Store a forward pass's new keys and values ([n, heads, q, dim]); return what
        attention reads ([n, heads, span, dim])."""
        plan = self.plan
        assert plan is not None, "plan the forward pass before running it"
        keys, values = self.keys[layer], self.values[layer]
        read = plan.read
        if plan.column is not None and isinstance(read, slice):
            # The common decode pass: every row at the same position, plain slices.
            keys[read, :, plan.column] = key_states[:, :, 0]
            values[read, :, plan.column] = value_states[:, :, 0]
        elif plan.columns.shape[1] == 1:
            rows, columns = plan.rows[:, 0], plan.columns[:, 0]
            keys[rows, :, columns] = key_states[:, :, 0]
            values[rows, :, columns] = value_states[:, :, 0]
        else:
            keys[plan.rows, :, plan.columns] = key_states.transpose(1, 2)
            values[plan.rows, :, plan.columns] = value_states.transpose(1, 2)
        if isinstance(plan.read, slice):
            return keys[plan.read, :, : plan.span], values[plan.read, :, : plan.span]
        return (
            keys[:, :, : plan.span].index_select(0, plan.read),
            values[:, :, : plan.span].index_select(0, plan.read),
        )

    # --- rows ---

    def load(self, row: int, state: KVState, length: int) -> None:
        """Put the first `length` tokens of a stored state into `row`."""
        for layer, (k, v) in enumerate(state):
            self.keys[layer][row, :, :length] = k[0, :, :length]
            self.values[layer][row, :, :length] = v[0, :, :length]

    def export(self, row: int, length: int) -> KVState:
        """A copy of `row`'s first `length` tokens (the row will be reused)."""
        return tuple(
            (k[row : row + 1, :, :length].clone(), v[row : row + 1, :, :length].clone())
            for k, v in zip(self.keys, self.values, strict=True)
        )

    def move(self, source: int, target: int, length: int) -> None:
        """Copy `source`'s first `length` tokens into `target` (to keep rows dense)."""
        for tensors in (self.keys, self.values):
            for t in tensors:
                t[target, :, :length] = t[source, :, :length]
