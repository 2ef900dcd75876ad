"""Pydantic's validation report -> one OpenAI-style 400 naming the field, in Responses terms.

The chat request has its own converter (`dialects/chat/request.py`); the Responses
request validates its input items and tools one at a time (their type decides
the model), so every error here carries a prefix such as `input.3` or `tools.0`
and the field inside it: `input.3.content.0.text`.
"""

from __future__ import annotations

from pydantic import ValidationError

from realtime.protocol.errors import InvalidRequestError, UnknownFieldError
from realtime.protocol.validation import EXPECTED_TYPES, invalid_type

__all__ = ["client_error", "invalid_type", "join_path"]


def client_error(exc: ValidationError, prefix: str = "") -> InvalidRequestError:
    """The error the client sees for `exc`, its `param` being `prefix` + the field's path."""
    errors = exc.errors(include_url=False)
    # For a union (content: str | list) pydantic reports every member; the error
    # that got deepest into the input is the one the client can act on. At one depth
    # an unknown field goes first: `txt` for `text` is a typo, not two mistakes.
    first = max(errors, key=lambda e: (len(e["loc"]), e["type"] == "extra_forbidden"))
    param = join_path(prefix, _path(first["loc"]))
    kind = first["type"]
    if kind == "extra_forbidden":
        return UnknownFieldError(f"Unrecognized request argument supplied: {param}", param=param)
    if kind == "missing":
        return InvalidRequestError(
            f"Missing required parameter: '{param}'.",
            param=param,
            code="missing_required_parameter",
        )
    if kind in EXPECTED_TYPES:
        expected = [
            EXPECTED_TYPES[e["type"]]
            for e in errors
            if e["type"] in EXPECTED_TYPES and join_path(prefix, _path(e["loc"])) == param
        ]
        return invalid_type(param, list(dict.fromkeys(expected)), first["input"])
    message = first["msg"]
    if message.startswith("Value error, "):
        message = message[len("Value error, ") :]
    name = param or "the request body"
    return InvalidRequestError(
        f"Invalid value for '{name}': {message}", param=param or None, code="invalid_value"
    )


def join_path(prefix: str, path: str) -> str:
    return f"{prefix}.{path}" if prefix and path else prefix or path


def _path(loc: tuple[int | str, ...]) -> str:
    """`('content', 'list[dict[str,any]]', 0)` -> `content.0`: union members left out."""
    parts = []
    for item in loc:
        if isinstance(item, str) and (
            item in ("str", "int", "float", "bool")
            or item.startswith(("function-", "literal[", "list[", "dict[", "json-or-python["))
            or item[:1].isupper()
        ):
            continue
        parts.append(str(item))
    return ".".join(parts)
