"""The package's layers, read from every module's imports (ast), so they cannot drift.

    protocol <- model <- constrain <- chat / engine <- testing <- pipeline
        <- store / session <- asgi <- dialects (one unit per protocol) <- config
        <- transports (http, ws) <- consumer_settings <- app

The dialects wing (`realtime/dialects/<name>/`) is one layer whose units are its
packages: `realtime.dialects.chat.x` is the unit `dialects.chat`, so no dialect
imports another (helpers they share would be a unit of their own, below them).

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
    # logs and metrics
    {"observability"},
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
    # stored responses (one async interface; memory, SQLite) and the socket session
    # core (no I/O: commands in, actions out); neither imports the other
    {"store", "session"},
    # what both transports share: the access guard with its API-key and Origin rules,
    # the shutdown phases, the error response. Below the dialects, whose handshake
    # selectors read the key and the subprotocol, and below config, whose --api-key
    # flag checks a key with the guard's own rule.
    {"asgi"},
    # the wire protocols, one package each (codec, dialect, handshake selector); no
    # dialect imports another
    {
        "dialects",
        "dialects.chat",
        "dialects.responses",
        "dialects.realtime_events",
        "dialects.messages",
    },
    # the Python client library (it reads the chat dialect's wire models; nothing of the
    # server imports it)
    {"client"},
    # server settings and the flags that set them
    {"config"},
    # the transports
    {"http", "ws"},
    # the settings handed down: each consumer's typed values, built from the config
    {"consumer_settings"},
    # the ASGI application
    {"app"},
    # accepting connections for uvicorn (every waiting one per wake-up)
    {"accept"},
    # running it: uvicorn with a draining shutdown, the allocator's settings, the front
    # ends' CPU priority; the generated documents
    {"server", "allocator", "process_priority", "docgen"},
    # several front ends on one engine process (--api-servers)
    {"front_ends"},
    # the library API: serve an engine object (create_app, serve)
    {"api"},
    # the command line, and `python -m realtime`
    {"cli"},
    {"__main__"},
]

#: (importer, imported) pairs allowed on one layer: none (a pair no module needs any more
#: fails the test below, so an allowance cannot outlive its reason).
FOR_NOW: set[tuple[str, str]] = set()

#: (importer, imported) pairs ruled out even where the layers would allow them.
FORBIDDEN = {
    # engines speak in their own errors (engine/errors.py); the pipeline maps them
    ("engine", "protocol"),
    # logs and metrics stay below access control and the transports
    ("observability", "asgi"),
    ("observability", "http"),
    ("observability", "ws"),
    # the transports are handed their typed settings (consumer_settings); they never
    # read the config by a flag's name
    ("http", "config"),
    ("ws", "config"),
}

RANK = {unit: rank for rank, units in enumerate(LAYERS) for unit in units}


#: Packages whose subpackages are units of their own, each on the package's layer.
WINGS = {"dialects"}


def unit_of(module: str) -> str:
    """The top-level unit of `realtime.x.y` (`x`), or `realtime` for the package itself;
    inside a wing, its package (`realtime.dialects.chat.dialect`: `dialects.chat`)."""
    parts = module.split(".")
    if len(parts) > 3 and parts[1] in WINGS:
        return f"{parts[1]}.{parts[2]}"
    if len(parts) == 3 and parts[1] in WINGS and parts[2] != "__init__":
        return f"{parts[1]}.{parts[2]}"  # a module of the wing's own: a unit of its own
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
            if imported == importer or (importer, imported) in FOR_NOW:
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


def test_every_allowance_for_now_is_still_used() -> None:
    used = {
        (unit_of(module), unit_of(target))
        for module, source in package_modules()
        for target, _ in imports(runtime_source(source, module), module)
        if target.startswith("realtime.")
    }
    assert FOR_NOW <= used, f"no longer needed, remove from FOR_NOW: {FOR_NOW - used}"


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
        (
            "realtime.dialects.chat.dialect",
            "from realtime.dialects.responses.service import S",
            "same layer",
        ),
        ("realtime.dialects.chat.selector", "from ..responses import selector", "same layer"),
        ("realtime.dialects.realtime_events.x", "from ..responses import service", "same layer"),
        ("realtime.dialects.responses.dialect", "from .service import ResponsesService", None),
        ("realtime.dialects.chat.dialect", "from realtime.session.commands import Submit", None),
        ("realtime.session.core", "from realtime.dialects.chat import dialect", "a layer above"),
        ("realtime.session.core", "from realtime.store import base", "same layer"),
        ("realtime.session.core", "from realtime.config import ServerConfig", "a layer above"),
        ("realtime.store.sqlite", "from realtime.session.record import R", "same layer"),
        ("realtime.dialects.newthing.x", "from realtime.protocol import errors", "has no layer"),
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


# --- the session core, the store and the dialects ----------------------------------


def test_the_session_core_imports_no_dialect_store_or_config() -> None:
    """The core knows commands, actions, records, jobs and the dialect interface; what a
    dialect needs from the server, its factory is given when the app is built."""
    found = [
        f"{module}:{line} imports {target}"
        for module, source in package_modules()
        if unit_of(module) == "session"
        for target, line in imports(source, module)
        if unit_of(target).split(".")[0] in {"dialects", "store", "config", "pipeline"}
    ]
    assert found == []
    assert "realtime.session.core" in dict(package_modules())  # the core is really read


def public_names(source: str) -> set[str]:
    """The names a module defines at its top level (classes, functions, assignments)."""
    names: set[str] = set()
    for node in ast.parse(source).body:
        if isinstance(node, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names.update(t.id for t in node.targets if isinstance(t, ast.Name))
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
    return {name for name in names if not name.startswith("_") and name != "log"}


def test_no_other_package_reuses_a_name_of_the_session_core() -> None:
    """`Reply` or `Action` in a dialect would mean something else than the core's."""
    modules = package_modules()
    core = set().union(*(public_names(src) for mod, src in modules if unit_of(mod) == "session"))
    assert {"Reply", "Action", "Submit", "Job", "RequestRecord"} <= core
    reused = {
        f"{module}: {name}"
        for module, source in modules
        if unit_of(module) != "session"
        for name in public_names(source) & core
    }
    assert reused == set()


def sync_twins(source: str) -> list[str]:
    """Methods of a class that do without awaiting what one of its async methods does:
    `x_now`/`x_sync` beside `x`, or any `*_now`."""
    twins = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.ClassDef):
            continue
        methods = [n for n in node.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
        awaited = {m.name for m in methods if isinstance(m, ast.AsyncFunctionDef)}
        for method in methods:
            if isinstance(method, ast.AsyncFunctionDef):
                continue
            stem = method.name.removesuffix("_now").removesuffix("_sync")
            if method.name.endswith(("_now", "_sync")) or (stem != method.name and stem in awaited):
                twins.append(f"{node.name}.{method.name}")
    return twins


def test_the_response_store_has_one_async_interface() -> None:
    """No `*_now` twin of an awaited operation: a store behind the network fits."""
    modules = [(mod, src) for mod, src in package_modules() if unit_of(mod) == "store"]
    assert {"realtime.store.base", "realtime.store.sqlite"} <= {mod for mod, _ in modules}
    assert [twin for _, source in modules for twin in sync_twins(source)] == []
    interface = next(src for mod, src in modules if mod == "realtime.store.base")
    protocol = next(
        node
        for node in ast.parse(interface).body
        if isinstance(node, ast.ClassDef) and node.name == "ResponseStore"
    )
    operations = {
        n.name: isinstance(n, ast.AsyncFunctionDef)
        for n in protocol.body
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
    }
    # `owner` only fingerprints a key (no record is read); every record operation awaits
    assert operations == {
        "owner": False,
        "put": True,
        "get": True,
        "chain": True,
        "delete": True,
        "unfinished": True,
        "close": True,
        # conversations (`realtime.store.conversations`)
        "create_conversation": True,
        "get_conversation": True,
        "update_conversation": True,
        "delete_conversation": True,
        "append_items": True,
        "conversation_items": True,
        "list_items": True,
        "get_item": True,
        "delete_item": True,
    }


def test_the_twin_check_catches_a_twin() -> None:
    source = (
        "class S:\n"
        "    async def put(self): ...\n"
        "    def put_now(self): ...\n"
        "    def owner(self): ...\n"
        "    async def chain(self): ...\n"
        "    def chain_sync(self): ...\n"
        "    def peek_now(self): ...\n"
    )
    assert sync_twins(source) == ["S.put_now", "S.chain_sync", "S.peek_now"]


#: The one conversion from conversation items to chat-template messages.
CONVERSION = "realtime.chat.conversation"


def message_builders(source: str) -> list[str]:
    """What in `source` builds chat-template messages: a function named `*_messages`, or a
    dict display of a message answering a tool call (`role` and `tool_call_id`)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name.endswith(
            "messages"
        ):
            found.append(f"def {node.name}")
        elif isinstance(node, ast.Dict):
            keys = {k.value for k in node.keys if isinstance(k, ast.Constant)}
            if {"role", "tool_call_id"} <= keys:
                found.append(f"a tool message at line {node.lineno}")
    return found


def test_no_function_converting_items_to_template_messages_is_defined_twice() -> None:
    """Every API renders its conversation through `template_messages`, so the same
    conversation is one prompt whichever API carried it (the template's own adapter,
    `model/template.prepare_messages`, and the client library's history are not
    conversions of items)."""
    exempt = {CONVERSION, "realtime.model.template", "realtime.client.repl"}
    found = [
        f"{module}: {builder}"
        for module, source in package_modules()
        if module not in exempt
        for builder in message_builders(source)
    ]
    assert found == []
    conversion = dict(package_modules())[CONVERSION]
    assert message_builders(conversion)[0] == "def template_messages"  # really read


# --- settings: read by name only where they are turned into typed values -------------

#: Where the config is read by a field's name: the config itself, the builders of the
#: typed values each part is given, and what sits above them (the app, the CLI...).
SETTINGS_READERS = RANK["consumer_settings"]


def settings_reads(source: str) -> Iterator[tuple[str, int]]:
    """`getattr(<settings>, ...)`, `<x>.state.config`: a setting read by name at run time."""
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            if node.func.id == "getattr" and node.args:
                target = ast.unparse(node.args[0]).lower()
                if "config" in target or "settings" in target:
                    yield ast.unparse(node), node.lineno
        elif isinstance(node, ast.Attribute) and node.attr == "config":
            if ast.unparse(node.value).endswith("state"):
                yield ast.unparse(node), node.lineno


def test_nothing_below_the_app_reads_the_settings_by_name() -> None:
    """Below the builders, every part takes typed values (`SocketSettings`,
    `HttpSettings`, `CoreLimits`, `InputLimits`...), never the config itself."""
    found = [
        f"{module}:{line} {expression}"
        for module, source in package_modules()
        if unit_of(module) != "config" and RANK.get(unit_of(module), 99) < SETTINGS_READERS
        for expression, line in settings_reads(source)
    ]
    assert found == []


@pytest.mark.parametrize(
    "source",
    [
        "def f(config):\n    return getattr(config, 'max_frame_bytes')\n",
        "def f(request):\n    return request.app.state.config.api_keys\n",
        "def f(settings, name):\n    return getattr(settings, name, None)\n",
    ],
)
def test_the_settings_check_catches_a_read(source: str) -> None:
    assert list(settings_reads(source))
