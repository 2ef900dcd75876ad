"""Engines by name: the four built in, installed plug-ins, and `module.path:factory`.

Built-in engines are imported lazily, so a missing optional dependency (CUDA,
torch) only matters to the engine that needs it.

An engine from outside the package is named one of two ways:

- `package.module:factory`: the factory is imported and called;
- a name an installed distribution registers in the `realtime.engines`
  entry-point group (`bigram = "realtime_bigram:BigramEngine"` in its
  pyproject's `[project.entry-points."realtime.engines"]`).

A factory is anything callable that returns an engine, called with keyword
arguments only: `model_dir` (str, when `--model` is given), `model_name` (when
`--model-name` is given), `chat_template` (when `--chat-template` is given), and
one keyword per `--engine-option KEY=VALUE`. An engine class whose constructor
takes those keywords is its own factory. Each failure (the module cannot be
imported, the name is missing, the factory raises, or returns something that is
not an engine) is an `EngineLoadError` whose message is one line.
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Callable
from dataclasses import dataclass
from importlib import metadata
from typing import Any

from realtime.engine.base import Engine

#: What builds an engine: called with keyword arguments only (see the module docstring).
EngineFactory = Callable[..., Engine]

#: The entry-point group through which an installed distribution adds an engine name.
ENTRY_POINT_GROUP = "realtime.engines"


class EngineLoadError(ValueError):
    """An engine could not be found or built; the message is one line for the CLI."""


def _echo(**options: Any) -> Engine:
    from realtime.engine.echo import EchoEngine

    return EchoEngine(**options)


def _cpu(**options: Any) -> Engine:
    # cpu.py imports torch; without it the ImportError says how to install it.
    from realtime.engine.cpu.engine import CpuEngine

    return CpuEngine(**options)


def _exllamav2(**options: Any) -> Engine:
    # Importing it needs neither CUDA nor exllamav2: start() checks both and says what is missing.
    from realtime.engine.exllamav2.engine import ExLlamaV2Engine

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

#: Where each built-in engine's class lives: `--engine realtime.engine.echo:EchoEngine`
#: is the built-in `echo` itself (same flags, same checks), not a plug-in.
_BUILTIN_PATHS: dict[str, str] = {
    "realtime.engine.echo:EchoEngine": "echo",
    "realtime.engine.cpu:CpuEngine": "cpu",
    "realtime.engine.exllamav2:ExLlamaV2Engine": "exllamav2",
    "realtime.engine.scripted:ScriptedEngine": "scripted",
}


@dataclass(frozen=True, slots=True)
class EngineSource:
    """Where an engine spec led: its canonical name and the factory that builds it."""

    #: A built-in name, an entry-point name, or the `module:factory` spec itself.
    name: str
    factory: Callable[..., Engine]
    #: True for the four built-in engines (however they were named).
    builtin: bool


def builtin_engine_names() -> list[str]:
    return sorted(_FACTORIES)


def plugin_engines() -> dict[str, list[metadata.EntryPoint]]:
    """Installed `realtime.engines` entry points by name (a built-in name is never one)."""
    found: dict[str, list[metadata.EntryPoint]] = {}
    for entry in metadata.entry_points(group=ENTRY_POINT_GROUP):
        if entry.name not in _FACTORIES:
            found.setdefault(entry.name, []).append(entry)
    return found


def engine_names() -> list[str]:
    """The built-in engines and the installed plug-ins, sorted."""
    return sorted({*_FACTORIES, *plugin_engines()})


def resolve_engine(spec: str) -> EngineSource:
    """The engine `spec` names: a built-in name, a plug-in name, or `module.path:factory`.

    Imports the plug-in's module (not the built-ins', which load when built).
    Raises EngineLoadError with a one-line reason.
    """
    if spec in _FACTORIES:
        return EngineSource(spec, _FACTORIES[spec], builtin=True)
    if spec in _BUILTIN_PATHS:
        name = _BUILTIN_PATHS[spec]
        return EngineSource(name, _FACTORIES[name], builtin=True)
    if ":" in spec:
        return EngineSource(spec, _import_factory(spec), builtin=False)
    plugins = plugin_engines().get(spec)
    if not plugins:
        raise EngineLoadError(
            f"no such engine; choose one of: {', '.join(engine_names())}, auto,"
            " or name a factory as package.module:factory"
        )
    if len(plugins) > 1:
        values = ", ".join(sorted(entry.value for entry in plugins))
        raise EngineLoadError(
            f"installed more than once ({values}); name the one you mean as package.module:factory"
        )
    entry = plugins[0]
    try:
        factory = entry.load()
    except Exception as exc:
        raise EngineLoadError(f"cannot load {entry.value}: {_one_line(exc)}") from None
    if not callable(factory):
        raise EngineLoadError(f"{entry.value} is not callable")
    return EngineSource(spec, factory, builtin=False)


def _import_factory(spec: str) -> Callable[..., Engine]:
    module_name, _, attribute = spec.partition(":")
    if not module_name or not attribute:
        raise EngineLoadError("expected package.module:factory")
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:
        raise EngineLoadError(f"cannot import {module_name!r}: {_one_line(exc)}") from None
    target: Any = module
    for part in attribute.split("."):
        try:
            target = getattr(target, part)
        except AttributeError:
            raise EngineLoadError(f"module {module_name!r} has no {attribute!r}") from None
    if not callable(target):
        raise EngineLoadError(f"{spec} is a {type(target).__name__}, not callable")
    return target  # type: ignore[no-any-return]


def build_engine(source: EngineSource, **options: Any) -> Engine:
    """Call `source`'s factory with `options` and check that it made an engine.

    Raises EngineLoadError (one line) for anything the factory raises other than
    ValueError and ImportError, whose messages are already meant for people (the
    built-in engines raise those), and for a result that is not an engine.
    """
    try:
        engine = source.factory(**options)
    except (ValueError, ImportError):
        raise
    except Exception as exc:
        raise EngineLoadError(f"the factory raised {_one_line(exc)}") from None
    problem = not_an_engine(engine)
    if problem is not None:
        raise EngineLoadError(f"the factory returned {problem}")
    return engine


def create_engine(name: str, **options: Any) -> Engine:
    """Build the engine `name` (built-in, plug-in or `module:factory`) with `options`."""
    return build_engine(resolve_engine(name), **options)


_ENGINE_MEMBERS = ("info", "ready", "unavailable_reason", "generate", "start", "close")


def not_an_engine(value: object) -> str | None:
    """Why `value` is not an engine (what it is, what it lacks), or None when it is one."""
    if inspect.isawaitable(value):
        if inspect.iscoroutine(value):
            value.close()  # never awaited: say so once, not as a RuntimeWarning later
        return "an awaitable, not an engine: the factory must build the engine synchronously"
    missing = [member for member in _ENGINE_MEMBERS if not hasattr(value, member)]
    if missing:
        return f"a {type(value).__name__}, not an engine (it lacks {', '.join(missing)})"
    for method in ("start", "close"):
        if not inspect.iscoroutinefunction(getattr(value, method)):
            return f"a {type(value).__name__} whose {method}() is not `async def`"
    if not callable(getattr(value, "generate", None)):
        return f"a {type(value).__name__} whose generate is not callable"
    assert isinstance(value, Engine)
    return None


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
