"""The allocator's settings: applied to this process through mallopt and handed to the
processes it starts through glibc's variables, unless the operator chose their own."""

from __future__ import annotations

import pytest

from realtime.allocator import DEFAULT_KEEP_MIB, MMAP_THRESHOLD, keep_freed_memory
from realtime.config.settings import ServerConfig


class Recorder:
    def __init__(self, answer: int = 1) -> None:
        self.calls: list[tuple[int, int]] = []
        self.answer = answer

    def __call__(self, parameter: int, value: int) -> int:
        self.calls.append((parameter, value))
        return self.answer


def test_keeps_freed_memory_here_and_in_child_processes() -> None:
    environ: dict[str, str] = {}
    mallopt = Recorder()
    assert keep_freed_memory(64, environ=environ, mallopt=mallopt)
    assert mallopt.calls == [(-1, 64 << 20), (-3, MMAP_THRESHOLD)]  # M_TRIM_, M_MMAP_
    assert environ == {
        "MALLOC_TRIM_THRESHOLD_": str(64 << 20),
        "MALLOC_MMAP_THRESHOLD_": str(MMAP_THRESHOLD),
    }


@pytest.mark.parametrize(
    "variable", ["MALLOC_TRIM_THRESHOLD_", "MALLOC_ARENA_MAX_", "GLIBC_TUNABLES"]
)
def test_the_operators_own_settings_win(variable: str) -> None:
    environ = {variable: "1"}
    mallopt = Recorder()
    changed = keep_freed_memory(64, environ=environ, mallopt=mallopt)
    if variable == "MALLOC_ARENA_MAX_":  # not one of the settings this makes
        assert changed and mallopt.calls
    else:
        assert not changed and mallopt.calls == [] and environ == {variable: "1"}


def test_zero_or_a_refusing_allocator_changes_nothing() -> None:
    environ: dict[str, str] = {}
    assert not keep_freed_memory(0, environ=environ, mallopt=Recorder())
    assert not keep_freed_memory(64, environ=environ, mallopt=Recorder(answer=0))
    assert environ == {}


def test_the_flags_default_is_the_modules() -> None:
    assert ServerConfig().allocator_keep_mib == DEFAULT_KEEP_MIB
