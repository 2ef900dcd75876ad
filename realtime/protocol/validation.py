"""Validation errors in OpenAI's words: one wording for every API's strict request models.

Every request model is pydantic-strict; a failure becomes one 400 naming the
offending field by its path (`messages.0.content`, `tools.3.parameters`) with
OpenAI's type wording ("Invalid type for 'n': expected an integer, but got a string
instead."), whichever API's model it was.
"""

from __future__ import annotations

from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from realtime.protocol.errors import InvalidRequestError, InvalidTypeError, UnknownFieldError

Model = TypeVar("Model", bound=BaseModel)


def validate_body(model: type[Model], data: Any) -> Model:
    """A decoded request body as `model`: it must be a JSON object; every failure is
    one 400 naming the field (`validation_error_to_client`)."""
    if not isinstance(data, dict):
        raise InvalidRequestError("the request body must be a JSON object")
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise validation_error_to_client(exc) from None


def validation_error_to_client(exc: ValidationError) -> InvalidRequestError:
    """Turn pydantic's report into an OpenAI-style error naming the offending field."""
    # For a union (e.g. content: str | list[part]) pydantic reports every member;
    # the error that got deepest into the input is the one the client can act on.
    errors = exc.errors(include_url=False)
    first = max(errors, key=lambda e: len(e["loc"]))
    param = _param_path(first["loc"])
    if first["type"] == "extra_forbidden":
        return UnknownFieldError(f"Unrecognized request argument supplied: {param}", param=param)
    if first["type"] in EXPECTED_TYPES:
        # A union reports one type error per member: name every type it would take.
        expected = [
            EXPECTED_TYPES[e["type"]]
            for e in errors
            if e["type"] in EXPECTED_TYPES and _param_path(e["loc"]) == param
        ]
        return invalid_type(param, list(dict.fromkeys(expected)), first["input"])
    message = first["msg"]
    if message.startswith("Value error, "):
        message = message[len("Value error, ") :]
    if param:
        return InvalidRequestError(f"{param}: {message}", param=param)
    return InvalidRequestError(message)


#: Pydantic's type errors in strict mode, and the JSON type each one wanted.
EXPECTED_TYPES = {
    "bool_type": "a boolean",
    "int_type": "an integer",
    "float_type": "a number",
    "string_type": "a string",
    "list_type": "an array",
    "dict_type": "an object",
    "model_type": "an object",
    "model_attributes_type": "an object",
}


def json_type(value: Any) -> str:
    """How OpenAI's messages name a JSON value's type (\"an integer\", \"a string\")."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int):
        return "an integer"
    if isinstance(value, float):
        return "a decimal number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    return "an object"


def invalid_type(param: str, expected: list[str], value: Any) -> InvalidTypeError:
    """OpenAI's wording: "Invalid type for 'n': expected an integer, but got a string instead."""
    wanted = expected[-1]
    if len(expected) > 1:
        wanted = "one of " + ", ".join(expected[:-1]) + " or " + wanted
    name = param or "the request body"
    return InvalidTypeError(
        f"Invalid type for '{name}': expected {wanted}, but got {json_type(value)} instead.",
        param=param or None,
    )


#: Discriminator tags pydantic puts in an error's location after a list index.
_UNION_TAGS = frozenset(
    {
        "system",
        "developer",
        "user",
        "assistant",
        "tool",
        "function",
        "text",
        "image_url",
        "input_audio",
        "file",
        "refusal",
    }
)


def _param_path(loc: tuple[int | str, ...]) -> str:
    """`('messages', 0, 'tool', 'tool_call_id')` -> `messages.0.tool_call_id`.

    Pydantic adds the chosen member of a union to the location: discriminator tags
    after a list index, and type names such as `str`, `list[...]` or a model name
    for plain unions. None of those are fields a client could name.
    """
    parts: list[str] = []
    previous: int | str | None = None
    for item in loc:
        in_tagged_list = isinstance(previous, int) and parts[-2:-1] in (["messages"], ["content"])
        if isinstance(item, str) and (
            (in_tagged_list and item in _UNION_TAGS)
            or item in ("str", "int", "float", "bool")
            or item.startswith(("function-", "literal[", "list[", "dict[", "json-or-python["))
            or item[:1].isupper()
        ):
            previous = item
            continue
        parts.append(str(item))
        previous = item
    return ".".join(parts)
