"""Engines by name, imported lazily so a missing optional dependency (CUDA, torch)
only matters to the engine that needs it."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from realtime.engine.base import Engine


def _echo(**options: Any) -> Engine:
    from realtime.engine.echo import EchoEngine

    return EchoEngine(**options)


def _cpu(**options: Any) -> Engine:
    # cpu.py imports torch; without it the ImportError says how to install it.
    from realtime.engine.cpu import CpuEngine

    return CpuEngine(**options)


def _exllamav2(**options: Any) -> Engine:
    # Importing it needs neither CUDA nor exllamav2: start() checks both and says what is missing.
    from realtime.engine.exllamav2 import ExLlamaV2Engine

    return ExLlamaV2Engine(**options)


def _scripted(**options: Any) -> Engine:
    # Replays a JSON script (demos, tests); needs no model and no torch.
    from realtime.engine.scripted import ScriptedEngine

    if options.get("script") is None:
        raise ValueError("the scripted engine needs a script: --script FILE (a JSON list)")
    return ScriptedEngine(**options)


_FACTORIES: dict[str, Callable[..., Engine]] = {
    "echo": _echo,
    "cpu": _cpu,
    "exllamav2": _exllamav2,
    "scripted": _scripted,
}


def engine_names() -> list[str]:
    return sorted(_FACTORIES)


def create_engine(name: str, **options: Any) -> Engine:
    try:
        factory = _FACTORIES[name]
    except KeyError:
        raise ValueError(
            f"unknown engine {name!r}; choose one of: {', '.join(engine_names())}"
        ) from None
    return factory(**options)
