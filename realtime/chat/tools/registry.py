"""Tool parsers by name, name validation, and a default picked from a chat template.

The CLI validates `--tool-parser` with `validate_tool_parser_name` at startup,
so a typo fails before the server serves anything, with the valid names in the
message.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from realtime.chat.tools.base import ToolParser, ToolSpec, tool_specs
from realtime.chat.tools.deepseek_v3 import DeepSeekV3ToolParser
from realtime.chat.tools.hermes import HermesToolParser
from realtime.chat.tools.json_only import JsonToolParser
from realtime.chat.tools.llama3_json import Llama3JsonToolParser
from realtime.chat.tools.mistral import MistralToolParser
from realtime.chat.tools.passthrough import PassthroughToolParser
from realtime.chat.tools.pythonic import PythonicToolParser
from realtime.chat.tools.qwen3_coder import Qwen3CoderToolParser
from realtime.protocol.output import ParsedOutput

_PARSERS: dict[str, type[ToolParser]] = {
    cls.name: cls
    for cls in (
        HermesToolParser,
        Llama3JsonToolParser,
        MistralToolParser,
        DeepSeekV3ToolParser,
        PythonicToolParser,
        Qwen3CoderToolParser,
        JsonToolParser,
        PassthroughToolParser,
    )
}


class UnknownParserError(ValueError):
    """An unknown parser name; the message lists the valid ones."""

    def __init__(self, kind: str, name: str, valid: Sequence[str]) -> None:
        super().__init__(f"unknown {kind} parser {name!r}; valid names: {', '.join(valid)}")
        self.name = name
        self.valid = list(valid)


def tool_parser_names() -> list[str]:
    return sorted(_PARSERS)


def validate_tool_parser_name(name: str) -> str:
    """`name` if it is a tool parser; UnknownParserError (a ValueError) otherwise."""
    if name not in _PARSERS:
        raise UnknownParserError("tool", name, tool_parser_names())
    return name


def tool_parser_class(name: str) -> type[ToolParser]:
    return _PARSERS[validate_tool_parser_name(name)]


def create_tool_parser(
    name: str,
    tools: Sequence[ToolSpec] | None = None,
    *,
    incremental: bool = True,
    id_factory: Callable[[], str] | None = None,
) -> ToolParser:
    return tool_parser_class(name)(tools, incremental=incremental, id_factory=id_factory)


def parse_tool_calls(
    text: str,
    parser: str,
    tools: Sequence[ToolSpec | Mapping[str, Any]] | None = None,
) -> ParsedOutput:
    """The tool calls and the remaining content of a complete model output.

    `parser` is a name from `tool_parser_names()` (UnknownParserError otherwise).
    `tools` are the declared tools, as ToolSpecs or OpenAI-shaped dicts: when
    given, a call to a name not among them stays content, as the server does.
    Only well-formed calls are returned; a malformed one is left in `content`.
    """
    specs = [t for t in tools or () if isinstance(t, ToolSpec)]
    specs += tool_specs([t for t in tools or () if not isinstance(t, ToolSpec)])
    return tool_parser_class(parser).parse(text, specs or None)


# Most specific first: Qwen3-Coder's template also mentions <tool_call>, and a
# pythonic template may mention <|python_tag|>.
_TEMPLATE_HINTS: tuple[tuple[tuple[str, ...], str], ...] = (
    (("tool\u2581calls\u2581begin",), "deepseek_v3"),
    (("[TOOL_CALLS]",), "mistral"),
    (("<function=", "<parameter="), "qwen3_coder"),
    (("<tool_call>",), "hermes"),
    (("[func_name1(",), "pythonic"),
    (("<|python_tag|>",), "llama3_json"),
)


def detect_tool_parser(template_source: str | None) -> str | None:
    """The tool parser a chat template clearly implies, or None when it is not clear."""
    if not template_source:
        return None
    for needles, name in _TEMPLATE_HINTS:
        if all(needle in template_source for needle in needles):
            return name
    return None


#: CLI values besides parser names: pick from the template, or parse nothing.
AUTO, NONE = "auto", "none"


def resolve_tool_parser(setting: str | None, template_source: str | None) -> str | None:
    """The tool parser to run for a `--tool-parser` setting: `auto` (detect from the
    template; None when unclear), `none`/None (no parsing), or a validated name."""
    if setting is None or setting == NONE:
        return None
    if setting == AUTO:
        return detect_tool_parser(template_source)
    return validate_tool_parser_name(setting)
