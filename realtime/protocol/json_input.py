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

Decoded elsewhere. orjson holds the GIL for a whole document (a body of four
million small values takes it for 200 ms or more), so a transport hands a large
input to a decode process (`realtime.pipeline.json_process`), which runs
`decode_checked` and sends back a `Decoded`. A socket frame's dialect then
parses it inside `decoded_as(text, decoded)`: `parse_json` returns the value
already decoded (or raises what decoding raised) and `check_shape` refuses a `RefusedShape` (the
envelope of a document over the limits, so a dialect can still name its
`request_id`) without walking anything.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
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
#: The longest top-level string a `RefusedShape` keeps (a frame's id, not its content).
_ENVELOPE_CHARS = 256
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
    known = _decoded.get()
    if known is not None and known[0] is raw:
        return known[1].value_or_raise()
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
    if type(value) is RefusedShape:
        raise value.refusal
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


class RefusedShape(dict[str, Any]):
    """What is left of a document a decode process refused for its shape: the top-level
    members that are short scalars (a frame's `type`, `request_id`, `event_id`), and
    the refusal, which `check_shape` raises."""

    refusal: InvalidRequestError

    @classmethod
    def of(cls, value: Any, refusal: InvalidRequestError) -> RefusedShape:
        members = value.items() if type(value) is dict else ()
        envelope = cls(
            (key, item)
            for key, item in members
            if item is None
            or type(item) in (bool, int, float)
            or (type(item) is str and len(item) <= _ENVELOPE_CHARS)
        )
        envelope.refusal = refusal
        return envelope


@dataclass(frozen=True, slots=True)
class Decoded:
    """A document decoded and checked by `decode_checked` (in a decode process)."""

    value: Any = None
    #: orjson's refusal of the text (message, char, line, column), if it is not JSON.
    syntax: tuple[str, int, int, int] | None = None
    #: A document deeper than orjson decodes (nothing was decoded).
    too_deep: JsonTooDeepError | None = None

    def value_or_raise(self) -> Any:
        """What `parse_json` returns for the text, or what it raises."""
        if self.syntax is not None:
            msg, pos, lineno, colno = self.syntax
            exc = orjson.JSONDecodeError.__new__(orjson.JSONDecodeError)
            ValueError.__init__(exc, f"{msg}: line {lineno} column {colno} (char {pos})")
            exc.msg, exc.doc, exc.pos, exc.lineno, exc.colno = msg, "", pos, lineno, colno
            raise exc
        if self.too_deep is not None:
            raise self.too_deep
        return self.value

    def checked_value(self) -> Any:
        """What `load_json` returns for the text, or what it raises."""
        value = self.value_or_raise()
        if type(value) is RefusedShape:
            raise value.refusal
        return value


#: The text a decode process already read, and what it made of it, for the current task.
_decoded: ContextVar[tuple[str, Decoded] | None] = ContextVar("decoded", default=None)


@contextmanager
def decoded_as(text: str, decoded: Decoded) -> Iterator[None]:
    """Inside the block, `parse_json(text)` (this very object) answers with `decoded`
    instead of decoding the text again. A context variable, not a wrapper around the
    text, so that dialects see the frame's own `str` (a copy of 8 MiB took 8 ms) and
    their interface does not change."""
    token = _decoded.set((text, decoded))
    try:
        yield
    finally:
        _decoded.reset(token)


def decode_checked(raw: bytes | str, max_depth: int, max_values: int | None) -> Decoded:
    """`load_json`, its refusals returned rather than raised: what a decode process runs.
    A document over the limits comes back as its `RefusedShape`, so only its envelope
    crosses back, not the millions of values it held."""
    try:
        value = parse_json(raw, max_depth)
    except orjson.JSONDecodeError as exc:
        return Decoded(syntax=(exc.msg, exc.pos, exc.lineno, exc.colno))
    except JsonTooDeepError as exc:
        return Decoded(too_deep=exc)
    try:
        check_shape(value, max_depth, max_values)
    except (JsonTooDeepError, TooManyJsonValuesError) as exc:
        return Decoded(RefusedShape.of(value, exc))
    return Decoded(value)


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
