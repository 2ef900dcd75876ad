"""Client JSON, parsed once and checked for nesting before anything else reads it.

Why a depth limit: request fields that take free-form JSON (message extra keys,
tool `parameters`, `chat_template_kwargs`, `response_format`, `metadata`,
tool-call `arguments` sent back as JSON text) reach code that recurses on them:
validation, the chat template's sandbox, `tojson`, copies of the template input.
Nested a few hundred levels deep they exhausted Python's recursion limit and
became an internal error (and, on a socket, close 1011 for every request on it).
So the transports refuse JSON deeper than `--max-json-depth` with a 400 / an
`error` frame, before the request is validated, and nothing after that check can
meet deeper input.

The check walks the parsed value level by level without recursion. orjson itself
stops at 1024 levels; that refusal gets the same error.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import orjson

from realtime.protocol.errors import InvalidRequestError

#: Levels of arrays and objects, the request object itself being level 1.
DEFAULT_MAX_JSON_DEPTH = 64
#: The highest `--max-json-depth` allowed: code after the check (copies of the template
#: input) recurses about twice per level and must stay clear of Python's limit of 1000.
MAX_JSON_DEPTH_CEILING = 256
#: Path elements named in `param` for input that is too deep (enough to find the field).
_PARAM_ELEMENTS = 4


class JsonTooDeepError(InvalidRequestError):
    """JSON nested deeper than `--max-json-depth` levels."""

    default_code = "json_too_deep"


def parse_json(raw: bytes | str, max_depth: int) -> Any:
    """Decode `raw`; raise orjson.JSONDecodeError when it is not JSON at all.

    A document deeper than orjson's own limit raises JsonTooDeepError without a
    `param` (nothing was decoded to name one). Depth within that limit is not
    checked here: see `check_depth`, which callers run once they have read what
    they need to answer (a socket frame's `request_id`).
    """
    try:
        with _gc_paused():
            return orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        if _is_depth_error(exc):
            raise too_deep(max_depth, ()) from None
        raise


def check_depth(value: Any, max_depth: int) -> None:
    """Raise JsonTooDeepError, naming where, if `value` nests deeper than `max_depth`."""
    level = [value] if type(value) is dict or type(value) is list else []
    depth = 1
    while level:
        if depth > max_depth:
            raise too_deep(max_depth, _deep_path(value, max_depth))
        below: list[Any] = []
        for node in level:
            items = node.values() if type(node) is dict else node
            below += [item for item in items if type(item) is dict or type(item) is list]
        level = below
        depth += 1


def load_json(raw: bytes | str, max_depth: int) -> Any:
    """`parse_json` and `check_depth` together, for callers that need nothing in between."""
    value = parse_json(raw, max_depth)
    check_depth(value, max_depth)
    return value


def too_deep(max_depth: int, path: tuple[str | int, ...]) -> JsonTooDeepError:
    param = ".".join(str(element) for element in path[:_PARAM_ELEMENTS]) or None
    where = f"{param}: " if param else ""
    return JsonTooDeepError(
        f"{where}JSON nested deeper than {max_depth} levels (this server's --max-json-depth)",
        param=param,
    )


def _deep_path(value: Any, max_depth: int) -> tuple[str | int, ...]:
    """The first keys and indexes on the way to a container below `max_depth` levels."""
    stack: list[tuple[Any, int, tuple[str | int, ...]]] = [(value, 1, ())]
    while stack:
        node, depth, path = stack.pop()
        if depth > max_depth:
            return path
        pairs = node.items() if type(node) is dict else enumerate(node)
        for key, item in pairs:
            if type(item) is dict or type(item) is list:
                below = (*path, key) if len(path) < _PARAM_ELEMENTS else path
                stack.append((item, depth + 1, below))
    return ()


def _is_depth_error(exc: orjson.JSONDecodeError) -> bool:
    # orjson 3.10 says "depth limit exceeded"; older releases "Recursion limit reached".
    message = str(exc)
    return message.startswith(("depth limit exceeded", "Recursion limit reached"))


@contextmanager
def _gc_paused() -> Iterator[None]:
    """No cyclic garbage collection while orjson builds the document.

    Decoding allocates one container per array and object; on a large body the
    collections that those allocations trigger cost several times the decoding
    itself, and a freshly decoded document holds no cycles to collect.
    """
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()
