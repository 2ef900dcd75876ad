"""realtime: an LLM streaming server with a persistent WebSocket and an OpenAI-compatible API.

The names in `__all__` are the library API, kept stable: serve an engine of your
own (`create_app`, `serve`, `ServerConfig`), the engine contract it follows
(`Engine`, `EngineRequest`, `EngineOutput`, ...), and the output parsers on their
own (`parse_tool_calls`, `parse_reasoning`, the streaming parsers and their
names). The engine conformance kit is `realtime.testing`.

Each name is imported from its module on first use (PEP 562), so importing one
part of the package (the client, the parsers) never loads the server.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

#: Public name -> the module that defines it.
_EXPORTS: dict[str, str] = {
    # serving an engine object
    "create_app": "realtime.api",
    "serve": "realtime.api",
    "ServerConfig": "realtime.config",
    # the engine contract
    "Engine": "realtime.engine.base",
    "EngineRequest": "realtime.engine.base",
    "EngineOutput": "realtime.engine.base",
    "SamplingParams": "realtime.engine.base",
    "StopConditions": "realtime.engine.base",
    "FinishReason": "realtime.model.generation",
    "TokenLogprob": "realtime.model.generation",
    "ModelInfo": "realtime.model.info",
    "Tokenizer": "realtime.model.tokenizer",
    "ChatTemplate": "realtime.model.template",
    "GenerationError": "realtime.engine.errors",
    "EngineRequestError": "realtime.engine.errors",
    "EngineUnavailable": "realtime.engine.errors",
    "EngineFailure": "realtime.engine.errors",
    # what an engine reports of its state (optional: `snapshot()`)
    "EngineSnapshot": "realtime.engine.snapshot",
    "KvCacheSnapshot": "realtime.engine.snapshot",
    # engines by name: built-in, plug-ins, package.module:factory
    "EngineFactory": "realtime.engine.registry",
    "EngineLoadError": "realtime.engine.registry",
    "create_engine": "realtime.engine.registry",
    "engine_names": "realtime.engine.registry",
    # output parsers: complete text, streaming, names
    "parse_tool_calls": "realtime.chat.tools.registry",
    "parse_reasoning": "realtime.chat.reasoning.registry",
    "tool_parser_names": "realtime.chat.tools.registry",
    "reasoning_parser_names": "realtime.chat.reasoning.registry",
    "create_tool_parser": "realtime.chat.tools.registry",
    "create_reasoning_parser": "realtime.chat.reasoning.registry",
    "UnknownParserError": "realtime.chat.tools.registry",
    "ToolParser": "realtime.chat.tools.base",
    "ToolSpec": "realtime.chat.tools.base",
    "ReasoningParser": "realtime.chat.reasoning.base",
    "ParsedOutput": "realtime.protocol.output",
    "ParsedToolCall": "realtime.protocol.output",
    "ContentDelta": "realtime.protocol.output",
    "ReasoningDelta": "realtime.protocol.output",
    "ToolCallStart": "realtime.protocol.output",
    "ToolCallArguments": "realtime.protocol.output",
}

__all__ = [
    "ChatTemplate",
    "ContentDelta",
    "Engine",
    "EngineFactory",
    "EngineFailure",
    "EngineLoadError",
    "EngineOutput",
    "EngineRequest",
    "EngineRequestError",
    "EngineSnapshot",
    "EngineUnavailable",
    "FinishReason",
    "GenerationError",
    "KvCacheSnapshot",
    "ModelInfo",
    "ParsedOutput",
    "ParsedToolCall",
    "ReasoningDelta",
    "ReasoningParser",
    "SamplingParams",
    "ServerConfig",
    "StopConditions",
    "TokenLogprob",
    "Tokenizer",
    "ToolCallArguments",
    "ToolCallStart",
    "ToolParser",
    "ToolSpec",
    "UnknownParserError",
    "__version__",
    "create_app",
    "create_engine",
    "create_reasoning_parser",
    "create_tool_parser",
    "engine_names",
    "parse_reasoning",
    "parse_tool_calls",
    "reasoning_parser_names",
    "serve",
    "tool_parser_names",
]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'realtime' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # once: later lookups do not come here
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})


if TYPE_CHECKING:  # the same names, for type checkers (tests/test_layers.py allows this)
    from realtime.api import create_app, serve
    from realtime.chat.reasoning.base import ReasoningParser
    from realtime.chat.reasoning.registry import (
        create_reasoning_parser,
        parse_reasoning,
        reasoning_parser_names,
    )
    from realtime.chat.tools.base import ToolParser, ToolSpec
    from realtime.chat.tools.registry import (
        UnknownParserError,
        create_tool_parser,
        parse_tool_calls,
        tool_parser_names,
    )
    from realtime.config import ServerConfig
    from realtime.engine.base import (
        Engine,
        EngineOutput,
        EngineRequest,
        SamplingParams,
        StopConditions,
    )
    from realtime.engine.errors import (
        EngineFailure,
        EngineRequestError,
        EngineUnavailable,
        GenerationError,
    )
    from realtime.engine.registry import EngineFactory, EngineLoadError, create_engine, engine_names
    from realtime.engine.snapshot import EngineSnapshot, KvCacheSnapshot
    from realtime.model.generation import FinishReason, TokenLogprob
    from realtime.model.info import ModelInfo
    from realtime.model.template import ChatTemplate
    from realtime.model.tokenizer import Tokenizer
    from realtime.protocol.output import (
        ContentDelta,
        ParsedOutput,
        ParsedToolCall,
        ReasoningDelta,
        ToolCallArguments,
        ToolCallStart,
    )
