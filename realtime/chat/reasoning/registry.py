"""Reasoning parsers by name, validation, per-request construction and template detection."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from realtime.chat.reasoning.deepseek_r1 import DeepSeekR1ReasoningParser
from realtime.chat.reasoning.mistral import MistralReasoningParser
from realtime.chat.reasoning.qwen3 import Qwen3ReasoningParser
from realtime.chat.reasoning.tags import TagReasoningParser
from realtime.chat.tools.registry import UnknownParserError
from realtime.protocol.output import ParsedOutput

_PARSERS: dict[str, type[TagReasoningParser]] = {
    cls.name: cls
    for cls in (
        DeepSeekR1ReasoningParser,
        Qwen3ReasoningParser,
        MistralReasoningParser,
        TagReasoningParser,
    )
}


def reasoning_parser_names() -> list[str]:
    return sorted(_PARSERS)


def validate_reasoning_parser_name(name: str) -> str:
    """`name` if it is a reasoning parser; UnknownParserError (a ValueError) otherwise."""
    if name not in _PARSERS:
        raise UnknownParserError("reasoning", name, reasoning_parser_names())
    return name


def reasoning_parser_class(name: str) -> type[TagReasoningParser]:
    return _PARSERS[validate_reasoning_parser_name(name)]


def thinking_requested(template_kwargs: Mapping[str, Any] | None) -> bool | None:
    """What the request's `chat_template_kwargs` say about thinking, or None.

    Qwen3 uses `enable_thinking`, DeepSeek V3.1 `thinking`.
    """
    for key in ("enable_thinking", "thinking"):
        value = (template_kwargs or {}).get(key)
        if isinstance(value, bool):
            return value
    return None


def create_reasoning_parser(
    name: str,
    *,
    prompt: str | None = None,
    enable_thinking: bool | None = None,
    start_tag: str | None = None,
    end_tag: str | None = None,
) -> TagReasoningParser:
    """A parser for one request.

    `prompt` is the rendered prompt text, when there is one: a prompt that ends
    with the start tag means the output begins inside the reasoning, one that
    ends with the end tag (an empty block, thinking switched off) means there is
    no reasoning. `enable_thinking=False` disables the parser as well. Otherwise
    the parser's own default applies.
    """
    cls = reasoning_parser_class(name)
    start = cls.start_tag if start_tag is None else start_tag
    end = cls.end_tag if end_tag is None else end_tag
    enabled = enable_thinking is not False
    starts_in: bool | None = None
    tail = (prompt or "").rstrip()
    if tail.endswith(start):
        starts_in = True
    elif tail.endswith(end):
        enabled = False
    return cls(enabled=enabled, starts_in_reasoning=starts_in, start_tag=start, end_tag=end)


def parse_reasoning(
    text: str,
    parser: str,
    *,
    prompt: str | None = None,
    enable_thinking: bool | None = None,
) -> ParsedOutput:
    """The reasoning and the answer (`content`) of a complete model output.

    `parser` is a name from `reasoning_parser_names()` (UnknownParserError
    otherwise); `prompt` and `enable_thinking` mean what they mean for
    `create_reasoning_parser` (a prompt ending in the start tag: the output begins
    inside the reasoning).
    """
    created = create_reasoning_parser(parser, prompt=prompt, enable_thinking=enable_thinking)
    return created.parse(text)


def detect_reasoning_parser(template_source: str | None) -> str | None:
    """The reasoning parser a chat template clearly implies, or None."""
    if not template_source:
        return None
    if "[THINK]" in template_source:
        return "mistral"
    if "<think>" in template_source or "</think>" in template_source:
        if "\uff5cAssistant\uff5c" in template_source:  # DeepSeek's <|Assistant|>
            return "deepseek_r1"
        return "qwen3"
    return None


def resolve_reasoning_parser(setting: str | None, template_source: str | None) -> str | None:
    """The reasoning parser for a `--reasoning-parser` setting: `auto` (detect from the
    template; None when unclear), `none`/None (no parsing), or a validated name."""
    if setting is None or setting == "none":
        return None
    if setting == "auto":
        return detect_reasoning_parser(template_source)
    return validate_reasoning_parser_name(setting)
