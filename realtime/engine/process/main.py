"""The engine process: `python -m realtime.engine.process.main SPEC_JSON SOCKET_PATH`.

Started by `launcher.EngineProcess`. It builds the engine named in the spec,
loads the model on its main thread, listens on the Unix socket, and writes one
JSON line to stdout: what the front ends need to know about the engine (`Handshake`),
or `{"error": ...}` when it could not start. Then it serves until its parent goes
(stdin closes) or SIGTERM; SIGINT and SIGHUP, which a terminal sends to the whole
process group, are the server's to act on. Logs go to stderr, which it shares with the
server.

`REALTIME_ENGINE_PRELOAD` (comma-separated `package.module:function`s) adds preload
hooks to the spec's, for a harness that runs the real command line over a stand-in
(the GPU proof's dry run installs the fake exllamav2 with it).
"""

from __future__ import annotations

import gc
import importlib
import json
import logging
import os
import signal
import socket
import sys
from dataclasses import asdict, dataclass
from types import FrameType
from typing import Any

log = logging.getLogger("realtime.engine.process")

#: Preload hooks the engine process runs besides its spec's (see the module docs).
PRELOAD_VARIABLE = "REALTIME_ENGINE_PRELOAD"


@dataclass(frozen=True)
class Handshake:
    """What the engine process tells its front ends once the model is loaded."""

    pid: int
    engine_class: str
    context_length: int
    vocab_size: int | None
    #: the grammar engine's mask width (the model's logits), or None without grammar support
    logits_width: int | None
    grammar_unavailable_reason: str | None
    schedules_background: bool
    session_aware: bool
    constraining: bool
    #: the engine's outputs may be merged when a reader lags (the cpu engine's choice)
    merge_backlog: bool
    output_limit: int
    #: the backend leaves a lagging request out of its steps (else the outputs fold)
    pausable: bool


class NotSteppable(Exception):
    """The engine is not built on `ThreadedEngineCore`, so it cannot run here."""


def steppable_core(engine: Any) -> Any:
    """The engine's `ThreadedEngineCore` (its `core`), or NotSteppable saying why not."""
    from realtime.engine.threaded import ThreadedEngineCore

    core = getattr(engine, "core", None)
    if not isinstance(core, ThreadedEngineCore):
        raise NotSteppable(
            f"{type(engine).__name__} cannot run in a process of its own: it is not built on"
            " ThreadedEngineCore (serve it with --engine-process off)"
        )
    return core


def _preload(hooks: tuple[str, ...]) -> None:
    for hook in hooks:
        module, _, name = hook.partition(":")
        target: Any = importlib.import_module(module)
        for part in name.split("."):
            target = getattr(target, part)
        target()


#: Allocations between young-generation collections, as the server's (`realtime.server`).
GC_GEN0_THRESHOLD = 10_000


def tune_gc() -> None:
    """Freeze what is loaded (torch, transformers, the model) and collect the young
    generation less often, as `realtime serve` does in its own process: a forward pass
    of transformers' modules allocates many Python objects, and with Python's defaults
    the collections they trigger keep scanning every object the imports made."""
    gc.collect()
    gc.freeze()
    _, gen1, gen2 = gc.get_threshold()
    gc.set_threshold(GC_GEN0_THRESHOLD, gen1, gen2)


def _write(line: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(line) + "\n")
    sys.stdout.flush()


def run(spec_json: str, path: str) -> int:
    from realtime.engine.process.core_server import EngineCoreServer
    from realtime.engine.process.spec import EngineSpec
    from realtime.engine.registry import create_engine
    from realtime.engine.threaded import PausableBackend

    spec = EngineSpec.from_json(spec_json)
    logging.basicConfig(
        level=spec.log_level.upper(),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    try:
        extra = os.environ.get(PRELOAD_VARIABLE, "")
        _preload(spec.preload + tuple(hook for hook in extra.split(",") if hook))
        engine = create_engine(spec.engine, **spec.options)
        core = steppable_core(engine)
        backend = core.backend_factory()
    except Exception as exc:
        text = " ".join(str(exc).split()) or type(exc).__name__
        _write({"error": text})
        return 2
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(128)
    listener.setblocking(False)
    server = EngineCoreServer(engine, backend, listener, stats=core.stats, parent_fd=0)
    binding = getattr(engine, "grammar_binding", None)
    info = engine.info
    handshake = Handshake(
        pid=os.getpid(),
        engine_class=type(engine).__name__,
        context_length=info.context_length,
        vocab_size=info.vocab_size,
        logits_width=None if binding is None else int(binding.width),
        grammar_unavailable_reason=getattr(engine, "grammar_unavailable_reason", None),
        schedules_background=getattr(engine, "schedules_background", False) is True,
        session_aware=callable(getattr(engine, "end_session", None)),
        constraining=hasattr(engine, "grammar_binding"),
        merge_backlog=core.merge_backlog,
        output_limit=core.output_limit,
        pausable=isinstance(backend, PausableBackend),
    )

    def stop(signum: int, frame: FrameType | None) -> None:
        server.stop()

    server.handshake = asdict(handshake)
    tune_gc()
    signal.signal(signal.SIGTERM, stop)
    # Ctrl-C and a closing terminal signal the whole process group: the server drains
    # first and then stops this process (or its stdin closes); stopping now would fail
    # the very requests the server is letting finish.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    _write({"ready": asdict(handshake)})
    log.info("engine process %d: serving %s", os.getpid(), handshake.engine_class)
    try:
        server.serve()
    finally:
        backend.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(run(sys.argv[1], sys.argv[2]))
