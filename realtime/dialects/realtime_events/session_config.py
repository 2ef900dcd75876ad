"""The session's configuration: what `session.update` sets and `session.created` shows.

An update is applied all at once or not at all: the new configuration is built
and checked first, so a refused update leaves the session as it was. A field
present in the update replaces the session's; `null` resets it to the server's
default; a field left out stays as it is (OpenAI's rule).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Literal

from realtime.dialects.realtime_events.decode import parse_tool, parse_tool_choice
from realtime.dialects.realtime_events.limits import EventLimits
from realtime.dialects.realtime_events.models import (
    FunctionTool,
    GenerationSettings,
    SessionSettings,
    ToolChoice,
)
from realtime.protocol.errors import InvalidRequestError, ModelNotFoundError

MaxTokens = int | Literal["inf"]


@dataclass(frozen=True, slots=True)
class GenerationConfig:
    """The settings a response runs with: the session's, then the response's overrides."""

    model: str | None
    instructions: str = ""
    tools: tuple[FunctionTool, ...] = field(default_factory=tuple)
    tool_choice: ToolChoice = "auto"
    max_output_tokens: MaxTokens = "inf"
    temperature: float | None = None
    parallel_tool_calls: bool | None = None

    def overridden(
        self, settings: GenerationSettings, prefix: str, limits: EventLimits
    ) -> GenerationConfig:
        """This configuration with the fields `settings` sets (present ones only)."""
        present = settings.model_fields_set
        changes: dict[str, Any] = {}
        if "instructions" in present:
            changes["instructions"] = settings.instructions or ""
        if "tools" in present:
            tools = settings.tools or []
            if len(tools) > limits.max_tools:
                raise InvalidRequestError(
                    f"{prefix}.tools: at most {limits.max_tools} tools "
                    "(this server's --realtime-max-tools)",
                    param=f"{prefix}.tools",
                )
            changes["tools"] = tuple(
                parse_tool(tool, f"{prefix}.tools.{index}") for index, tool in enumerate(tools)
            )
        if "tool_choice" in present:
            choice = settings.tool_choice
            changes["tool_choice"] = (
                "auto" if choice is None else parse_tool_choice(choice, f"{prefix}.tool_choice")
            )
        if "max_output_tokens" in present:
            changes["max_output_tokens"] = settings.max_output_tokens or "inf"
        if "temperature" in present:
            changes["temperature"] = settings.temperature
        if "parallel_tool_calls" in present:
            changes["parallel_tool_calls"] = settings.parallel_tool_calls
        return replace(self, **changes)

    def updated(
        self, session: SessionSettings, served_model: str, limits: EventLimits
    ) -> GenerationConfig:
        """`session.update` applied; refuses a model this server does not serve."""
        config = self.overridden(session, "session", limits)
        if "model" in session.model_fields_set and session.model is not None:
            model = check_model(session.model, served_model, "session.model")
            config = replace(config, model=model)
        return config

    def describe(self) -> dict[str, Any]:
        """The generation fields of the `session` object and of a response's echo."""
        choice = self.tool_choice
        return {
            "model": self.model,
            "output_modalities": ["text"],
            "instructions": self.instructions,
            "tools": [
                tool.model_dump(exclude_none=True) | {"type": "function"} for tool in self.tools
            ],
            "tool_choice": choice if isinstance(choice, str) else choice.model_dump(),
            "max_output_tokens": self.max_output_tokens,
            "temperature": self.temperature,
            "parallel_tool_calls": self.parallel_tool_calls,
        }


def check_model(name: str, served_model: str, param: str) -> str:
    if name != served_model:
        raise ModelNotFoundError(
            f"The model `{name[:128]}` does not exist. Available: {served_model}", param=param
        )
    return name


def check_tool_choice(config: GenerationConfig, prefix: str) -> None:
    """A named function must be one of the tools, checked before the response starts."""
    choice = config.tool_choice
    if isinstance(choice, str):
        if choice == "required" and not config.tools:
            raise InvalidRequestError(
                "tool_choice 'required' needs tools; set them with session.update or "
                "response.create",
                param=f"{prefix}.tool_choice",
            )
        return
    if choice.name not in {tool.name for tool in config.tools}:
        raise InvalidRequestError(
            f"tool_choice names the function {choice.name[:64]!r}, which is not among the tools",
            param=f"{prefix}.tool_choice",
        )


def session_object(session_id: str, config: GenerationConfig) -> dict[str, Any]:
    """The `session` of `session.created` and `session.updated` (a realtime session)."""
    return {
        "type": "realtime",
        "object": "realtime.session",
        "id": session_id,
        **config.describe(),
        "audio": None,
        "truncation": "disabled",
    }
