"""Tool-call parsing: one module per model format behind one interface (`base`).

The pipeline uses `realtime.chat.tools.output.ChatOutputParser` (reasoning,
then tools, then the request's tool policy); import it from there.
"""

from realtime.chat.tools.base import ToolParser, ToolSpec, tool_specs
from realtime.chat.tools.registry import (
    UnknownParserError,
    create_tool_parser,
    detect_tool_parser,
    parse_tool_calls,
    resolve_tool_parser,
    tool_parser_class,
    tool_parser_names,
    validate_tool_parser_name,
)
from realtime.protocol.output import (
    ContentDelta,
    OutputEvent,
    ParsedOutput,
    ParsedToolCall,
    ReasoningDelta,
    ToolCallArguments,
    ToolCallStart,
    fold_events,
)

__all__ = [
    "ContentDelta",
    "OutputEvent",
    "ParsedOutput",
    "ParsedToolCall",
    "ReasoningDelta",
    "ToolCallArguments",
    "ToolCallStart",
    "ToolParser",
    "ToolSpec",
    "UnknownParserError",
    "create_tool_parser",
    "detect_tool_parser",
    "fold_events",
    "parse_tool_calls",
    "resolve_tool_parser",
    "tool_parser_class",
    "tool_parser_names",
    "tool_specs",
    "validate_tool_parser_name",
]
