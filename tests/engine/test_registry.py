"""Engines by name: built-ins, `package.module:factory`, and the `realtime.engines` entry points."""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import pytest

from realtime.engine.echo import EchoEngine
from realtime.engine.registry import (
    EngineLoadError,
    build_engine,
    create_engine,
    engine_names,
    not_an_engine,
    resolve_engine,
)

PLUGIN = textwrap.dedent(
    """
    from realtime.engine.echo import EchoEngine

    def make(**options):
        return EchoEngine(model_name=options.pop("model_name", "plug"), **options)

    def boom(**options):
        raise RuntimeError("no GPU\\nhere")

    def refuse(**options):
        raise ValueError("the plug engine needs --model DIR")

    def nothing(**options):
        return {"not": "an engine"}

    async def later(**options):
        return EchoEngine()

    class SyncStart(EchoEngine):
        def start(self):
            return None

    class Factories:
        nested = staticmethod(make)

    NUMBER = 3
    """
)


@pytest.fixture
def plugin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """A module `plug_engines` on sys.path (and forgotten afterwards)."""
    (tmp_path / "plug_engines.py").write_text(PLUGIN)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "plug_engines", raising=False)
    return "plug_engines"


def dist_info(root: Path, name: str, entries: dict[str, str]) -> None:
    """An installed distribution as pip leaves it: METADATA and entry_points.txt."""
    info = root / f"{name.replace('-', '_')}-1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n")
    lines = "".join(f"{key} = {value}\n" for key, value in entries.items())
    (info / "entry_points.txt").write_text(f"[realtime.engines]\n{lines}")


# --- built-ins ---


def test_builtin_names_and_their_module_paths_are_the_builtins() -> None:
    assert engine_names() == ["cpu", "echo", "exllamav2", "scripted"]
    for spec in ("echo", "realtime.engine.echo:EchoEngine"):
        source = resolve_engine(spec)
        assert (source.name, source.builtin) == ("echo", True)
    assert resolve_engine("realtime.engine.scripted:ScriptedEngine").name == "scripted"
    assert resolve_engine("realtime.engine.cpu:CpuEngine").name == "cpu"


def test_create_engine_keeps_its_keyword_options() -> None:
    engine = create_engine("echo", model_name="e", delay=0.5)
    assert isinstance(engine, EchoEngine) and engine.info.name == "e" and engine.delay == 0.5
    with pytest.raises(ValueError, match="needs a script"):
        create_engine("scripted")


# --- package.module:factory ---


def test_a_factory_by_module_path(plugin: str) -> None:
    source = resolve_engine(f"{plugin}:make")
    assert (source.name, source.builtin) == ("plug_engines:make", False)
    engine = build_engine(source, model_name="mine", delay=0.25)
    assert isinstance(engine, EchoEngine) and engine.info.name == "mine"
    assert resolve_engine(f"{plugin}:Factories.nested").factory is source.factory
    assert isinstance(create_engine(f"{plugin}:SyncStart.__base__"), EchoEngine)


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("no_such_module:make", "cannot import 'no_such_module': ModuleNotFoundError: No module"),
        ("plug_engines:missing", "module 'plug_engines' has no 'missing'"),
        ("plug_engines:NUMBER", "plug_engines:NUMBER is a int, not callable"),
        (":make", "expected package.module:factory"),
        ("plug_engines:", "expected package.module:factory"),
        ("nope", "no such engine; choose one of: cpu, echo, exllamav2, scripted, auto"),
    ],
)
def test_a_spec_that_leads_nowhere_is_one_line(plugin: str, spec: str, message: str) -> None:
    with pytest.raises(EngineLoadError) as error:
        resolve_engine(spec)
    assert message in str(error.value) and "\n" not in str(error.value)


def test_a_module_that_fails_on_import_is_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "broken_plug.py").write_text("raise RuntimeError('missing\\nCUDA')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(
        EngineLoadError, match=r"^cannot import 'broken_plug': RuntimeError: missing CUDA$"
    ):
        resolve_engine("broken_plug:make")


@pytest.mark.parametrize(
    ("factory", "message"),
    [
        ("boom", "the factory raised RuntimeError: no GPU here"),
        ("nothing", "the factory returned a dict, not an engine (it lacks info, ready,"),
        ("later", "the factory returned an awaitable, not an engine"),
        ("SyncStart", "the factory returned a SyncStart whose start() is not `async def`"),
    ],
)
def test_a_factory_that_fails_is_one_line(plugin: str, factory: str, message: str) -> None:
    with pytest.raises(EngineLoadError) as error:
        create_engine(f"{plugin}:{factory}")
    assert message in str(error.value) and "\n" not in str(error.value)


def test_a_factory_value_error_keeps_its_message(plugin: str) -> None:
    with pytest.raises(ValueError, match=r"^the plug engine needs --model DIR$"):
        create_engine(f"{plugin}:refuse")


def test_not_an_engine_accepts_our_engines() -> None:
    assert not_an_engine(EchoEngine()) is None
    assert (
        not_an_engine(None) == "a NoneType, not an engine (it lacks info, ready,"
        " unavailable_reason, generate, start, close)"
    )


# --- the realtime.engines entry points ---


def test_an_installed_plugin_adds_an_engine_name(
    plugin: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    site = tmp_path / "site"
    dist_info(site, "plug", {"plug": f"{plugin}:make", "echo": f"{plugin}:boom"})
    monkeypatch.syspath_prepend(str(site))
    assert engine_names() == ["cpu", "echo", "exllamav2", "plug", "scripted"]
    source = resolve_engine("plug")
    assert (source.name, source.builtin) == ("plug", False)
    assert build_engine(source).info.name == "plug"
    assert resolve_engine("echo").builtin  # a plug-in cannot take a built-in's name


def test_a_name_two_plugins_claim_is_refused(
    plugin: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    dist_info(tmp_path / "a", "plug-a", {"plug": f"{plugin}:make"})
    dist_info(tmp_path / "b", "plug-b", {"plug": f"{plugin}:nothing"})
    monkeypatch.syspath_prepend(str(tmp_path / "a"))
    monkeypatch.syspath_prepend(str(tmp_path / "b"))
    with pytest.raises(EngineLoadError, match=r"installed more than once \(plug_engines:make,"):
        resolve_engine("plug")


def test_a_plugin_that_cannot_load_is_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    dist_info(tmp_path, "gone", {"gone": "gone_module:make"})
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(
        EngineLoadError, match=r"^cannot load gone_module:make: ModuleNotFoundError"
    ):
        resolve_engine("gone")
