"""realtime.server.tune_gc: a higher young threshold and frozen startup objects, or nothing."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from realtime.server import tune_gc


@pytest.fixture
def restore_gc() -> Iterator[None]:
    threshold = gc.get_threshold()
    yield
    gc.unfreeze()
    gc.set_threshold(*threshold)


@pytest.mark.usefixtures("restore_gc")
def test_raises_the_young_threshold_keeps_the_older_ratios_and_freezes() -> None:
    gc.set_threshold(700, 10, 10)
    startup_object: list[list[int]] = [[]]  # a container the collector tracks
    assert any(o is startup_object for o in gc.get_objects())
    tune_gc(12_345)
    assert gc.get_threshold() == (12_345, 10, 10)
    assert gc.get_freeze_count() > 0
    # Still alive, but in the permanent generation: no collection scans it again.
    assert not any(o is startup_object for o in gc.get_objects())


@pytest.mark.usefixtures("restore_gc")
def test_zero_leaves_python_alone() -> None:
    gc.set_threshold(700, 10, 10)
    frozen = gc.get_freeze_count()
    tune_gc(0)
    assert gc.get_threshold() == (700, 10, 10)
    assert gc.get_freeze_count() == frozen
