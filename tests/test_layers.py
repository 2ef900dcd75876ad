"""The package's layers, read from every module's imports (ast), so they cannot drift.

    protocol <- model <- constrain <- chat / engine <- testing <- pipeline <- session
        <- transports (http, ws) <- app

A module may import its own package and any layer below its own, never one above
and never a neighbour on the same layer (so `chat/` and `engine/` do not import
each other). Imports inside functions count too: a lazy import is still a
dependency. A few pairs are ruled out on top of that (`FORBIDDEN`). A new
top-level module or package must be given a layer here before the test passes.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Iterator
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "realtime"

#: Bottom first. Units on one layer do not import each other.
LAYERS: list[set[str]] = [
    # wire models and rules; the version
    {"realtime", "protocol"},
    # logs and metrics, the client library
    {"observability", "client"},
    # what every layer knows about the model: ModelInfo, tokenizer, template, outputs
    {"model"},
    # the grammar engine (llguidance): schemas as grammars, token masks, per-sequence
    # matchers. Below chat and engine: engines enforce constraints while they sample,
    # and chat's tool parsers write their markup as grammars (chat/tools/grammar.py)
    {"constrain"},
    # text and token logic; token-level engines (with the install hints they give)
    {"chat", "engine"},
    # the test doubles (the fake exllamav2, the tiny test model's writer) and the engine
    # conformance kit: above engine, which they drive (and whose install hint they give)
    {"testing"},
    # the neutral request in, typed output out: drives an engine through the chat logic
    {"pipeline"},
    # the wire protocols: each API's request -> the neutral request, typed output -> its frames
    {"dialects"},
    # the Responses API over the chat pipeline, for both transports; its store
    {"responses"},
    # the socket session core (no I/O) and its dialects: frames <-> commands, actions
    {"session"},
    # the Realtime event dialect: its session, conversation and events (no I/O)
    {"realtime_events"},
    # what both transports share: the access guard with its API-key and Origin rules,
    # the shutdown phases, the error response. Below config, whose --api-key flag
    # checks a key with the guard's own rule.
    {"asgi"},
    # server settings and the flags that set them
    {"config"},
    # the transports
    {"http", "ws"},
    # the ASGI application
    {"app"},
    # running it: uvicorn with a draining shutdown; the generated documents
    {"server", "docgen"},
    # several front ends on one engine process (--api-servers)
    {"front_ends"},
    # the library API: serve an engine object (create_app, serve)
    {"api"},
    # the command line, and `python -m realtime`
    {"cli"},
    {"__main__"},
]

#: (importer, imported) pairs ruled out even where the layers would allow them.
FORBIDDEN = {
    # engines speak in their own errors (engine/errors.py); the pipeline maps them
    ("engine", "protocol"),
    # logs and metrics stay below access control and the transports
    ("observability", "asgi"),
    ("observability", "http"),
    ("observability", "ws"),
}

RANK = {unit: rank for rank, units in enumerate(LAYERS) for unit in units}


def unit_of(module: str) -> str:
    """The top-level unit of `realtime.x.y` (`x`), or `realtime` for the package itself."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[1] != "__init__" else parts[0]


def module_name(path: Path) -> str:
    """`realtime.chat.delta`; a package's own module keeps its `__init__`."""
    return ".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts)


def imports(source: str, module: str) -> Iterator[tuple[str, int]]:
    """Every module `source` imports, anywhere in it, with the line."""
    package = module.rsplit(".", 1)[0]
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, node.lineno
        elif isinstance(node, ast.ImportFrom):
            name = node.module or ""
            if node.level:  # relative: resolve against the importing package
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                name = ".".join([*base, name] if name else base)
            yield name, node.lineno


#: The package's own module re-exports the public API lazily (PEP 562): it imports
#: nothing of ours at run time, and its `if TYPE_CHECKING:` imports are for type
#: checkers only, so they are not dependencies.
FACADE = "realtime.__init__"


def runtime_source(source: str, module: str) -> str:
    """`source` without its `if TYPE_CHECKING:` blocks when `module` is the facade."""
    if module != FACADE:
        return source
    tree = ast.parse(source)
    tree.body = [
        node
        for node in tree.body
        if not (isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING")
    ]
    return ast.unparse(tree)


def violations(modules: Iterable[tuple[str, str]]) -> list[str]:
    """Each import that breaks the layers, as `module:line imports target (why)`."""
    found = []
    for module, source in modules:
        importer = unit_of(module)
        for target, line in imports(runtime_source(source, module), module):
            if target != "realtime" and not target.startswith("realtime."):
                continue
            imported = unit_of(target)
            if imported == importer:
                continue
            where = f"{module}:{line} imports {target}"
            if (importer, imported) in FORBIDDEN:
                found.append(f"{where} (forbidden: {importer} -> {imported})")
            elif importer not in RANK or imported not in RANK:
                unknown = importer if importer not in RANK else imported
                found.append(f"{where} ({unknown!r} has no layer in tests/test_layers.py)")
            elif RANK[imported] >= RANK[importer]:
                side = "the same layer" if RANK[imported] == RANK[importer] else "a layer above"
                found.append(f"{where} ({imported} is on {side})")
    return found


def package_modules() -> list[tuple[str, str]]:
    return [
        (module_name(path), path.read_text(encoding="utf-8"))
        for path in sorted(PACKAGE.rglob("*.py"))
    ]


def test_every_import_respects_the_layers() -> None:
    assert violations(package_modules()) == []


def test_every_top_level_module_and_package_has_a_layer() -> None:
    units = {unit_of(module) for module, _ in package_modules()}
    assert units - set(RANK) == set()
    assert set(RANK) - units == set(), "a layer names a unit that no longer exists"


def test_the_modules_are_really_read() -> None:
    found = dict(package_modules())
    assert len(found) > 100 and "realtime.pipeline.__init__" in found
    chat = {target for target, _ in imports(found["realtime.pipeline.chat"], "")}
    assert {"realtime.engine.base", "realtime.chat.delta", "realtime.protocol.errors"} <= chat


@pytest.mark.parametrize(
    ("module", "source", "expected"),
    [
        ("realtime.chat.delta", "from realtime.engine.base import EngineOutput", "same layer"),
        ("realtime.engine.echo", "import realtime.chat.stops", "same layer"),
        ("realtime.engine.cpu", "from realtime.protocol.errors import X", "forbidden"),
        ("realtime.model.info", "from realtime.pipeline import ChatPipeline", "a layer above"),
        ("realtime.ws.endpoint", "from realtime.http.guard import deny", "same layer"),
        ("realtime.observability.logs", "from realtime.asgi.auth import f", "forbidden"),
        (
            "realtime.engine.cpu",
            "def load():\n    from realtime.chat.model_dir import load\n",
            "same layer",
        ),
        ("realtime.chat.tools.base", "from ..delta import DeltaGenerator", None),
        ("realtime.chat.tools.base", "from ...engine import base", "same layer"),
        ("realtime.chat.__init__", "from .delta import DeltaGenerator", None),
        ("realtime.chat.__init__", "from ..engine import base", "same layer"),
        ("realtime.__init__", "from realtime.pipeline import ChatPipeline", "a layer above"),
        ("realtime.newthing", "from realtime.protocol import errors", "has no layer"),
        ("realtime.http.models", "from realtime.pipeline import ChatPipeline", None),
    ],
)
def test_the_checker_catches_what_it_must(module: str, source: str, expected: str | None) -> None:
    found = violations([(module, source)])
    if expected is None:
        assert found == []
    else:
        assert len(found) == 1 and expected in found[0], found


def test_the_facade_imports_nothing_of_ours_at_run_time() -> None:
    source = (PACKAGE / "__init__.py").read_text(encoding="utf-8")
    targets = {target for target, _ in imports(runtime_source(source, FACADE), FACADE)}
    assert not {t for t in targets if t == "realtime" or t.startswith("realtime.")}
    typed = {target for target, _ in imports(source, FACADE)}
    assert "realtime.api" in typed  # the TYPE_CHECKING block is really there, and skipped
