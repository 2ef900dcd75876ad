"""The session core and the dialects are pure logic: no module of `realtime.session` or
`realtime.dialects` imports an I/O library (the glue, `realtime.ws`, does the I/O)."""

from __future__ import annotations

from tests.test_layers import PACKAGE, imports, module_name

#: Event loops, ASGI and WebSocket libraries: what the glue (`realtime.ws`) uses.
IO_LIBRARIES = {"asyncio", "starlette", "websockets", "uvicorn", "uvloop", "anyio", "socket"}


def session_modules() -> list[tuple[str, str]]:
    return [
        (module_name(path), path.read_text(encoding="utf-8"))
        for package in ("session", "dialects")
        for path in sorted((PACKAGE / package).rglob("*.py"))
    ]


def test_no_session_module_imports_an_io_library() -> None:
    found = [
        f"{module}:{line} imports {target}"
        for module, source in session_modules()
        for target, line in imports(source, module)
        if target.split(".")[0] in IO_LIBRARIES
    ]
    assert found == []


def test_the_check_reads_the_real_modules() -> None:
    modules = dict(session_modules())
    assert {"realtime.session.core", "realtime.dialects.chat.dialect"} <= set(modules)
    targets = {target for target, _ in imports(modules["realtime.session.core"], "")}
    assert "realtime.protocol.states" in targets  # the imports are really read
    # and the check would catch an I/O import:
    bad = list(imports("import asyncio\nfrom starlette.websockets import WebSocket\n", "x.y"))
    assert [t.split(".")[0] in IO_LIBRARIES for t, _ in bad] == [True, True]
