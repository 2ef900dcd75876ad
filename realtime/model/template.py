"""Chat templates rendered with jinja2's sandbox, the way `apply_chat_template` does.

Model directories ship their prompt format as a jinja template written against
Hugging Face's rendering environment, so this module rebuilds that environment
(same jinja options, globals, filters and input preparation) and a template renders
here byte for byte as it does in `transformers`; the test suite checks that.

The sandbox matters: templates come from model directories people download.
Rendering errors (including a template's own `raise_exception`) become a 400 that
carries the template's message, because they are almost always caused by the
conversation the client sent (for example a role the model does not support).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Iterable, Mapping
from datetime import datetime
from typing import Any

import jinja2
from jinja2.sandbox import ImmutableSandboxedEnvironment
from jinja2.utils import Namespace

from realtime.protocol.errors import InvalidRequestError

#: Names a message's reasoning may arrive under; templates read `reasoning_content`
#: (most) or `thinking` (gpt-oss), so a message carrying any of them gets both.
_REASONING_FIELDS = ("reasoning_content", "thinking", "reasoning")


class TemplateRaised(Exception):
    """Raised by a template's `raise_exception(...)`."""


def _raise_exception(message: str) -> None:
    raise TemplateRaised(message)


def _tojson(
    value: Any,
    ensure_ascii: bool = False,
    indent: int | None = None,
    separators: tuple[str, str] | None = None,
    sort_keys: bool = False,
) -> str:
    # Hugging Face's tojson: no HTML escaping, keyword arguments like json.dumps.
    return json.dumps(
        value, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys
    )


def _check_namespace_name(name: object) -> None:
    if isinstance(name, str) and name.startswith("_"):
        raise jinja2.exceptions.SecurityError(
            "Chat templates cannot store underscore-prefixed attributes on a namespace,"
            f" but got {name!r}. Please rename the attribute."
        )


class _Namespace(Namespace):
    """`namespace()` that refuses dunder and private names (a sandbox escape route)."""

    def __init__(*args: Any, **kwargs: Any) -> None:  # self in *args: namespace(self=...) works
        self, rest = args[0], args[1:]
        attrs = dict(*rest, **kwargs)
        for name in attrs:
            _check_namespace_name(name)
        Namespace.__init__(self, attrs)

    def __setitem__(self, name: str, value: Any) -> None:
        _check_namespace_name(name)
        super().__setitem__(name, value)


class _TemplateDict:
    """`dict(...)` for templates, without exposing the `dict` type itself."""

    def __call__(self, *args: Any, **kwargs: Any) -> dict[Any, Any]:
        return dict(*args, **kwargs)

    def fromkeys(self, *args: Any) -> dict[Any, Any]:
        return dict.fromkeys(*args)


def _environment(clock: Callable[[], datetime]) -> ImmutableSandboxedEnvironment:
    env = ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=["jinja2.ext.loopcontrols"]
    )

    def strftime_now(fmt: str) -> str:
        return clock().strftime(fmt)

    env.filters["tojson"] = _tojson
    env.globals["raise_exception"] = _raise_exception
    env.globals["strftime_now"] = strftime_now
    env.globals["dict"] = _TemplateDict()
    env.globals["namespace"] = _Namespace
    return env


#: The exact types `plain_data` returns as they are (subclasses are converted).
_PLAIN_SCALARS = frozenset({str, int, float, bool, type(None)})


def _plain_dict(pairs: Iterable[tuple[Any, Any]]) -> dict[Any, Any]:
    """`plain_data` of a dict's (key, value) pairs, the exact scalars taken as they are."""
    return {
        key if type(key) is str else plain_data(key): (
            item if type(item) in _PLAIN_SCALARS else plain_data(item)
        )
        for key, item in pairs
    }


def plain_data(value: Any) -> Any:
    """A fresh copy of `value` made of JSON types only; anything else becomes "<Type>".

    Templates then see exactly what transformers shows them, and the sandbox only
    ever meets plain data (no object methods a template could reach).
    """
    kind = type(value)
    if kind in _PLAIN_SCALARS:
        return value
    # The exact containers first: a message is made of them, and the checks below
    # against abstract classes cost more than copying (a long conversation's render
    # spent half its time here).
    if kind is dict:
        return _plain_dict(value.items())
    if kind is list:
        return [item if type(item) in _PLAIN_SCALARS else plain_data(item) for item in value]
    if isinstance(value, str):
        return str.__str__(value)
    if isinstance(value, int):
        return int.__int__(value)
    if isinstance(value, float):
        return float.__float__(value)
    if isinstance(value, Mapping):
        return {plain_data(key): plain_data(item) for key, item in value.items()}
    if isinstance(value, list):
        return [plain_data(item) for item in value]
    if isinstance(value, tuple):
        return tuple(plain_data(item) for item in value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: plain_data(getattr(value, f.name)) for f in dataclasses.fields(value)}
    dump = getattr(value, "model_dump", None)
    if callable(dump):
        return plain_data(dump())
    return f"<{kind.__name__}>"


def prepare_messages(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Messages as apply_chat_template hands them to a template.

    Keys whose value is None are dropped (templates test `is defined`, not
    `is none`), the data is copied, and reasoning is offered as both
    `reasoning_content` and `thinking` whichever name it arrived under.
    """
    prepared: list[dict[str, Any]] = []
    for message in messages:
        if not isinstance(message, Mapping):
            raise InvalidRequestError(
                f"chat messages must be objects, got {type(message).__name__}", param="messages"
            )
        # plain_data of the message less its None values, in one pass
        plain = _plain_dict((key, value) for key, value in message.items() if value is not None)
        reasoning = next(
            (plain[key] for key in _REASONING_FIELDS if plain.get(key) is not None), None
        )
        if reasoning is not None:
            plain = {"thinking": reasoning, **plain, "reasoning_content": reasoning}
        prepared.append(plain)
    return prepared


def _compile(env: ImmutableSandboxedEnvironment, source: str) -> jinja2.Template:
    try:
        return env.from_string(source)
    except jinja2.TemplateSyntaxError as exc:
        raise ValueError(f"chat template does not compile: {exc}") from exc


class ChatTemplate:
    """A compiled chat template plus the special tokens it may refer to.

    `special_tokens` are the tokenizer's named tokens (`bos_token`, `eos_token`,
    ...) as strings; request kwargs may override them, as in transformers.
    `tool_use` is an optional second template used when the request has tools
    (a model directory's template named "tool_use", picked the way transformers
    picks it). `clock` feeds `strftime_now` (tests freeze it).
    """

    def __init__(
        self,
        source: str,
        special_tokens: Mapping[str, str] | None = None,
        *,
        tool_use: str | None = None,
        clock: Callable[[], datetime] = datetime.now,
    ):
        self.source = source
        self.tool_use_source = tool_use
        self.special_tokens = dict(special_tokens or {})
        env = _environment(clock)
        self._template = _compile(env, source)
        self._tool_use = _compile(env, tool_use) if tool_use is not None else None

    def render(
        self,
        messages: list[dict[str, Any]],
        *,
        add_generation_prompt: bool = True,
        tools: list[dict[str, Any]] | None = None,
        documents: list[dict[str, Any]] | None = None,
        **kwargs: Any,
    ) -> str:
        """The prompt text. Raises InvalidRequestError with the template's message."""
        template = self._tool_use if tools is not None and self._tool_use else self._template
        context: dict[str, Any] = plain_data({**self.special_tokens, **kwargs})
        context.update(
            messages=prepare_messages(messages),
            tools=plain_data(tools),
            documents=plain_data(documents),
            add_generation_prompt=add_generation_prompt,
        )
        try:
            return template.render(**context)
        except (TemplateRaised, jinja2.TemplateError) as exc:
            raise InvalidRequestError(f"chat template error: {exc}", param="messages") from None
        except Exception as exc:
            # e.g. a TypeError from `'text' + content` when content is a list of parts:
            # still the conversation's shape, so still the client's 400.
            raise InvalidRequestError(
                f"chat template error: {type(exc).__name__}: {exc}", param="messages"
            ) from None
