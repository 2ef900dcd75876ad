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

Why a value count: everything after decoding (validation, copies of the template
input, the template) costs time per JSON value on the event loop; a body of 8 MiB
can hold four million of them. `--max-json-values` refuses more before that work.
Decoding itself is bounded by the body and frame size limits (about 25-50 ns per
value, with the garbage collector paused).

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
#: Array items and object members in one body or frame, the body itself counting one.
#: 2**17: a 128Ki-token prompt still fits as `nvext.token_data`.
DEFAULT_MAX_JSON_VALUES = 131_072
#: The highest `--max-json-depth` allowed: code after the check (copies of the template
#: input) recurses about twice per level and must stay clear of Python's limit of 1000.
MAX_JSON_DEPTH_CEILING = 256
#: Path elements named in `param` for input that is too deep (enough to find the field).
_PARAM_ELEMENTS = 4


class JsonTooDeepError(InvalidRequestError):
    """JSON nested deeper than `--max-json-depth` levels."""

    default_code = "json_too_deep"


class TooManyJsonValuesError(InvalidRequestError):
    """More JSON values than `--max-json-values` in one body or frame."""

    default_code = "too_many_json_values"


def parse_json(raw: bytes | str, max_depth: int) -> Any:
    """Decode `raw`; raise orjson.JSONDecodeError when it is not JSON at all.

    A document deeper than orjson's own limit raises JsonTooDeepError without a
    `param` (nothing was decoded to name one). Depth within that limit is not
    checked here: see `check_shape`, which callers run once they have read what
    they need to answer (a socket frame's `request_id`).
    """
    try:
        with _gc_paused():
            return orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        if _is_depth_error(exc):
            raise too_deep(max_depth, ()) from None
        raise


def check_shape(value: Any, max_depth: int, max_values: int | None = None) -> None:
    """Raise if `value` nests deeper than `max_depth` (JsonTooDeepError, naming where)
    or holds more than `max_values` values (TooManyJsonValuesError, naming the
    top-level field holding most)."""
    level = [value] if type(value) is dict or type(value) is list else []
    depth = 1
    values = 1
    while level:
        if depth > max_depth:
            raise too_deep(max_depth, _deep_path(value, max_depth))
        below: list[Any] = []
        for node in level:
            items = node.values() if type(node) is dict else node
            values += len(items)
            # Most arrays hold only scalars: telling so in C (map, set) costs a fifth of
            # a Python loop over their items.
            kinds = set(map(type, items))
            if dict in kinds or list in kinds:
                below += [item for item in items if type(item) is dict or type(item) is list]
        if max_values is not None and values > max_values:
            raise _too_many(value, max_values)
        level = below
        depth += 1


def load_json(raw: bytes | str, max_depth: int, max_values: int | None = None) -> Any:
    """`parse_json` and `check_shape` together, for callers that need nothing in between."""
    value = parse_json(raw, max_depth)
    check_shape(value, max_depth, max_values)
    return value


def too_deep(max_depth: int, path: tuple[str | int, ...]) -> JsonTooDeepError:
    param = ".".join(str(element) for element in path[:_PARAM_ELEMENTS]) or None
    where = f"{param}: " if param else ""
    return JsonTooDeepError(
        f"{where}JSON nested deeper than {max_depth} levels (this server's --max-json-depth)",
        param=param,
    )


def _too_many(value: Any, max_values: int) -> TooManyJsonValuesError:
    """The error, its `param` the top-level field with the most values (when an object)."""
    param = None
    if type(value) is dict and value:
        param = max(value, key=lambda key: _count(value[key], max_values))
    where = f"{param}: " if param else ""
    return TooManyJsonValuesError(
        f"{where}more than {max_values} JSON values in one request"
        " (this server's --max-json-values)",
        param=param,
    )


def _count(value: Any, cap: int) -> int:
    """Values in `value`, counting stopped once past `cap`."""
    count, stack = 1, [value]
    while stack and count <= cap:
        node = stack.pop()
        if type(node) is dict or type(node) is list:
            items = node.values() if type(node) is dict else node
            count += len(items)
            kinds = set(map(type, items))
            if dict in kinds or list in kinds:
                stack += [item for item in items if type(item) is dict or type(item) is list]
    return count


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
