"""What the engine process is asked to build: an engine by name, its options, and hooks.

Everything here is plain JSON, because it crosses to a fresh interpreter on its
command line: the engine's name as the registry knows it (a built-in, a plug-in, or
`package.module:factory`), the keyword arguments its factory takes, and `preload`,
`package.module:function`s the child calls before it builds the engine (tests use
one to install the fake exllamav2).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any

#: Built-in engines that run in a process of their own unless `--engine-process off`.
PROCESS_BY_DEFAULT = frozenset({"cpu", "exllamav2"})
#: Built-in engines that never do: they have no model to take off the event loop.
SINGLE_PROCESS_ONLY = frozenset({"echo", "scripted"})


def runs_in_process(engine: str, setting: str) -> bool:
    """Whether `--engine-process SETTING` puts `engine` (a resolved engine name) in a
    process of its own; ValueError for a combination that cannot be."""
    if setting not in ("auto", "on", "off"):
        raise ValueError(f"--engine-process is auto, on or off, not {setting!r}")
    if engine in SINGLE_PROCESS_ONLY:
        if setting == "on":
            raise ValueError(
                f"--engine-process on: the {engine} engine runs in the server's process"
                " (it has no model to move off the event loop)"
            )
        return False
    if setting == "auto":
        return engine in PROCESS_BY_DEFAULT
    return setting == "on"


@dataclass(frozen=True)
class EngineSpec:
    engine: str
    options: dict[str, Any] = field(default_factory=dict)
    preload: tuple[str, ...] = ()
    log_level: str = "info"

    @property
    def model_dir(self) -> str | None:
        value = self.options.get("model_dir")
        return None if value is None else str(value)

    def to_json(self) -> str:
        values = asdict(self)
        values["preload"] = list(self.preload)
        return json.dumps(values, default=_plain)

    @classmethod
    def from_json(cls, text: str) -> EngineSpec:
        values = json.loads(text)
        values["preload"] = tuple(values.get("preload", ()))
        return cls(**values)


def _plain(value: object) -> object:
    if isinstance(value, tuple | frozenset | set):
        return list(value)
    return str(value)  # a Path
