"""Applying an allowed-token mask to logits, before any other sampling step.

Pure functions over torch tensors, for one sequence (`[vocab]`) or a batch
(`[batch, vocab]`). The mask goes first: the disallowed logits become -inf, so
bias, penalties, temperature and truncation only ever see allowed tokens, and
the logprobs a sampler reports are those of the constrained distribution.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence

import numpy as np
import numpy.typing as npt
import torch

_NEG_INF = float("-inf")
_SHIFTS = torch.arange(32, dtype=torch.int64)


def unpack_bitmask(bits: torch.Tensor, width: int) -> torch.Tensor:
    """llguidance's int32 bitmask (`[..., words]`, bit i of word w is id 32*w + i)
    as a bool tensor `[..., width]`; ids past the mask's end are not allowed.

    numpy's `unpackbits` does it in one call (about 8 us for a small vocabulary,
    14 us for 128k ids, where the same in torch ops costs 30 and 160 us): the
    words are little-endian, so bit i of byte b is id 8*b + i.
    """
    words = bits.shape[-1]
    rows = unpack_rows(bits.reshape(-1, words).contiguous().numpy(), width)
    return rows.reshape(*bits.shape[:-1], width)


def unpack_rows(bits: npt.NDArray[np.int32], width: int) -> torch.Tensor:
    """`unpack_bitmask` for a 2-D numpy array of words (`[rows, words]`): `[rows, width]`."""
    count = min(width, 32 * bits.shape[-1])
    flat = np.unpackbits(bits.view(np.uint8), axis=-1, bitorder="little", count=count)
    allowed = torch.from_numpy(flat.view(np.bool_))
    if count == width:
        return allowed
    pad = torch.zeros((bits.shape[0], width - count), dtype=torch.bool)
    return torch.cat([allowed, pad], dim=-1)


def pack_bitmask(allowed: torch.Tensor, words: int) -> torch.Tensor:
    """The inverse of `unpack_bitmask` for one row: `[width]` bool -> `[words]` int32."""
    width = allowed.shape[-1]
    if width > 32 * words:
        raise ValueError(f"{width} ids do not fit in {words} words")
    padded = torch.zeros(32 * words, dtype=torch.int64)
    padded[:width] = allowed.to(torch.int64)
    packed = (padded.view(words, 32) << _SHIFTS).sum(-1)
    return (packed - (packed >= 2**31).to(torch.int64) * 2**32).to(torch.int32)


def apply_allowed(logits: torch.Tensor, allowed: torch.Tensor) -> torch.Tensor:
    """`logits` ([vocab] or [batch, vocab]) with every id not in `allowed` at -inf.

    `allowed` is a bool tensor of the same shape (a `[vocab]` mask also applies
    to every row); a shorter last dimension disallows the ids past its end.
    The input is not modified.
    """
    width = logits.shape[-1]
    if allowed.shape[-1] != width:
        allowed = _fit(allowed, width)
    return logits.masked_fill(~allowed, _NEG_INF)


def apply_allowed_rows(logits: torch.Tensor, masks: Sequence[torch.Tensor | None]) -> torch.Tensor:
    """Batch form: row r masked by `masks[r]`, rows whose mask is None left as they are."""
    if logits.dim() != 2 or logits.shape[0] != len(masks):
        raise ValueError(
            f"expected logits of shape [{len(masks)}, vocab], got {tuple(logits.shape)}"
        )
    rows = [r for r, m in enumerate(masks) if m is not None]
    if not rows:
        return logits
    width = logits.shape[-1]
    allowed = torch.ones(logits.shape, dtype=torch.bool)
    for r in rows:
        mask = masks[r]
        assert mask is not None
        allowed[r] = mask if mask.shape[-1] == width else _fit(mask, width)
    return logits.masked_fill(~allowed, _NEG_INF)


def usable_bans(allowed: torch.Tensor, banned: Collection[int]) -> Collection[int]:
    """`banned` (EOS before `min_tokens`), unless banning it would leave no token.

    A finished structured answer allows only EOS; `min_tokens` cannot make it
    longer, so the grammar wins and the ban is dropped for that step.
    """
    if not banned:
        return banned
    remaining = allowed.clone()
    ids = [t for t in banned if 0 <= t < remaining.shape[-1]]
    remaining[ids] = False
    return banned if bool(remaining.any()) else ()


def _fit(mask: torch.Tensor, width: int) -> torch.Tensor:
    have = mask.shape[-1]
    if have > width:
        return mask[..., :width]
    pad = torch.zeros((*mask.shape[:-1], width - have), dtype=torch.bool)
    return torch.cat([mask, pad], dim=-1)
