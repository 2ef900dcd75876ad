"""The mask helpers: bitmask packing, applying a mask to one row or a batch, min_tokens bans."""

from __future__ import annotations

import torch

from realtime.constrain.logits import (
    apply_allowed,
    apply_allowed_rows,
    pack_bitmask,
    unpack_bitmask,
    usable_bans,
)

NEG_INF = float("-inf")


def _mask(width: int, allowed: list[int]) -> torch.Tensor:
    mask = torch.zeros(width, dtype=torch.bool)
    mask[allowed] = True
    return mask


def test_pack_and_unpack_are_inverse_including_the_sign_bit() -> None:
    allowed = _mask(70, [0, 5, 31, 32, 63, 69])
    bits = pack_bitmask(allowed, 3)
    assert bits.dtype == torch.int32 and bits.shape == (3,)
    assert int(bits[0]) == (1 | 1 << 5) - 2**31  # bit 31 set: negative in int32
    assert torch.equal(unpack_bitmask(bits, 70), allowed)


def test_unpack_cuts_or_pads_to_the_logits_width() -> None:
    bits = torch.tensor([-1], dtype=torch.int32)  # ids 0..31 allowed
    assert unpack_bitmask(bits, 10).tolist() == [True] * 10
    wide = unpack_bitmask(bits, 40)
    assert wide[:32].all() and not wide[32:].any()


def test_apply_allowed_sets_every_other_logit_to_minus_infinity() -> None:
    logits = torch.arange(6, dtype=torch.float32)
    out = apply_allowed(logits, _mask(6, [1, 4]))
    assert out.tolist() == [NEG_INF, 1.0, NEG_INF, NEG_INF, 4.0, NEG_INF]
    assert logits.tolist() == [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]  # input untouched


def test_a_shorter_mask_disallows_the_ids_past_its_end() -> None:
    out = apply_allowed(torch.zeros(5), torch.tensor([True, True, True]))
    assert out.tolist() == [0.0, 0.0, 0.0, NEG_INF, NEG_INF]


def test_a_row_mask_applies_to_every_row_of_a_batch() -> None:
    out = apply_allowed(torch.zeros(2, 3), _mask(3, [2]))
    assert out.tolist() == [[NEG_INF, NEG_INF, 0.0]] * 2


def test_batch_rows_without_a_mask_are_left_alone() -> None:
    logits = torch.ones(3, 4)
    out = apply_allowed_rows(logits, [_mask(4, [0]), None, _mask(4, [3])])
    assert out[0].tolist() == [1.0, NEG_INF, NEG_INF, NEG_INF]
    assert out[1].tolist() == [1.0] * 4
    assert out[2].tolist() == [NEG_INF, NEG_INF, NEG_INF, 1.0]
    assert apply_allowed_rows(logits, [None, None, None]) is logits


def test_batch_shape_must_match_the_masks() -> None:
    try:
        apply_allowed_rows(torch.ones(2, 4), [None])
    except ValueError as exc:
        assert "[1, vocab]" in str(exc)
    else:
        raise AssertionError("a shape mismatch must raise")


def test_min_tokens_bans_stay_unless_they_would_leave_nothing() -> None:
    assert usable_bans(_mask(5, [1, 2]), [2]) == [2]
    assert usable_bans(_mask(5, [2]), [2]) == ()  # only EOS is allowed: the grammar wins
    assert usable_bans(_mask(5, [2]), []) == []
