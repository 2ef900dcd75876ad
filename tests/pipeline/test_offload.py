"""The switch interval while a server runs: set for the loop's sake, restored after."""

from __future__ import annotations

import sys
from collections.abc import Iterator

import pytest

from realtime.pipeline.offload import LOOP_SWITCH_INTERVAL, loop_first_switching
from tests.conftest import RunningServer


@pytest.fixture
def default_interval() -> Iterator[float]:
    before = sys.getswitchinterval()
    sys.setswitchinterval(0.005)
    try:
        yield 0.005
    finally:
        sys.setswitchinterval(before)


def test_nested_blocks_set_it_once_and_the_last_restores_it(default_interval: float) -> None:
    with loop_first_switching():
        assert sys.getswitchinterval() == pytest.approx(LOOP_SWITCH_INTERVAL)
        with loop_first_switching():
            assert sys.getswitchinterval() == pytest.approx(LOOP_SWITCH_INTERVAL)
        assert sys.getswitchinterval() == pytest.approx(LOOP_SWITCH_INTERVAL)
    assert sys.getswitchinterval() == pytest.approx(default_interval)


def test_it_is_restored_when_the_block_raises(default_interval: float) -> None:
    with pytest.raises(RuntimeError), loop_first_switching():
        raise RuntimeError("the server failed")
    assert sys.getswitchinterval() == pytest.approx(default_interval)


def test_a_running_server_has_the_short_interval(server: RunningServer) -> None:
    assert sys.getswitchinterval() == pytest.approx(LOOP_SWITCH_INTERVAL)
