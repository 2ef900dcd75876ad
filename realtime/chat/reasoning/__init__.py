"""Reasoning parsers: split `reasoning_content` from the answer (see `base`)."""

from realtime.chat.reasoning.base import ReasoningParser
from realtime.chat.reasoning.registry import (
    create_reasoning_parser,
    detect_reasoning_parser,
    parse_reasoning,
    reasoning_parser_class,
    reasoning_parser_names,
    resolve_reasoning_parser,
    thinking_requested,
    validate_reasoning_parser_name,
)
from realtime.chat.reasoning.tags import TagReasoningParser

__all__ = [
    "ReasoningParser",
    "TagReasoningParser",
    "create_reasoning_parser",
    "detect_reasoning_parser",
    "parse_reasoning",
    "reasoning_parser_class",
    "reasoning_parser_names",
    "resolve_reasoning_parser",
    "thinking_requested",
    "validate_reasoning_parser_name",
]
