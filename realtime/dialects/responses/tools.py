"""Function tools and `tool_choice`: the Responses spelling in, the chat spelling out.

Responses tools are flat (`{"type": "function", "name": ..., "parameters": ...}`);
chat tools nest the function (`{"type": "function", "function": {...}}`), and the
chat pipeline (templates, tool parsers, the `tool_choice` check) takes the chat
form. Hosted tools (web search, file search, computer use, MCP, shell...) are
refused by name: this server runs no tools itself.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from realtime.dialects.responses.validation import client_error, invalid_type
from realtime.protocol.errors import (
    InvalidRequestError,
    UnknownFieldError,
    UnsupportedFeatureError,
)


class FunctionTool(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, populate_by_name=True)

    type: Literal["function"]
    name: str
    parameters: dict[str, Any] | None = None
    strict: bool | None = None
    description: str | None = None
    # the SDK's other fields: accepted, no effect here
    allowed_callers: list[Literal["direct", "programmatic"]] | None = None
    defer_loading: bool | None = None
    output_schema: dict[str, Any] | None = None
    async_: bool | None = Field(default=None, alias="async")


#: Tool types the SDK defines that this server does not run.
HOSTED_TOOLS = frozenset(
    {
        "file_search",
        "computer",
        "computer_use",
        "computer_use_preview",
        "web_search",
        "web_search_2025_08_26",
        "web_search_preview",
        "web_search_preview_2025_03_11",
        "mcp",
        "code_interpreter",
        "image_generation",
        "local_shell",
        "shell",
        "custom",
        "namespace",
        "tool_search",
        "apply_patch",
    }
)

#: `tool_choice` object types for hosted tools and features this server does not have.
_UNSUPPORTED_CHOICES = frozenset(
    {
        "allowed_tools",
        "mcp",
        "custom",
        "programmatic_tool_calling",
        "apply_patch",
        "shell",
        "file_search",
        "web_search_preview",
        "computer",
        "computer_use_preview",
        "computer_use",
        "web_search_preview_2025_03_11",
        "image_generation",
        "code_interpreter",
    }
)


@dataclass(frozen=True, slots=True)
class FunctionTools:
    """The request's function tools: as echoed on the response, and in chat form."""

    #: Responses form, fields that were sent (echoed in `response.tools`)
    echo: list[dict[str, Any]] = field(default_factory=list)
    #: chat form, for the template and the tool parser; None when there are none
    chat: list[dict[str, Any]] | None = None

    @property
    def names(self) -> list[str]:
        return [tool["name"] for tool in self.echo]


def parse_tools(raw: list[Any] | None) -> FunctionTools:
    if not raw:
        return FunctionTools()
    echo, chat = [], []
    for index, tool in enumerate(raw):
        where = f"tools.{index}"
        if not isinstance(tool, dict):
            raise invalid_type(where, ["an object"], tool)
        kind = tool.get("type")
        if kind != "function":
            if not isinstance(kind, str):
                raise invalid_type(f"{where}.type", ["a string"], kind)
            if kind in HOSTED_TOOLS:
                raise UnsupportedFeatureError(
                    f"{where}: tool type {kind!r} is not supported; this server runs no"
                    " hosted tools, only function tools the client executes",
                    param=f"{where}.type",
                )
            raise InvalidRequestError(
                f"Invalid value for '{where}.type': unknown tool type {kind!r}.",
                param=f"{where}.type",
                code="invalid_value",
            )
        try:
            parsed = FunctionTool.model_validate(tool)
        except ValidationError as exc:
            raise client_error(exc, where) from None
        if parsed.defer_loading:
            raise UnsupportedFeatureError(
                f"{where}: defer_loading needs tool search, which this server does not have",
                param=f"{where}.defer_loading",
            )
        function: dict[str, Any] = {"name": parsed.name}
        if parsed.description is not None:
            function["description"] = parsed.description
        if parsed.parameters is not None:
            function["parameters"] = parsed.parameters
        if parsed.strict is not None:
            function["strict"] = parsed.strict
        chat.append({"type": "function", "function": function})
        echo.append(
            {
                "type": "function",
                "name": parsed.name,
                "description": parsed.description,
                "parameters": parsed.parameters,
                "strict": parsed.strict,
            }
        )
    return FunctionTools(echo, chat)


def parse_tool_choice(raw: str | dict[str, Any] | None, tools: FunctionTools) -> Any:
    """The chat form of `tool_choice`, or a 400 naming what is wrong with it."""
    if raw is None:
        return None
    if isinstance(raw, str):
        if raw not in ("none", "auto", "required"):
            raise InvalidRequestError(
                f"Invalid value for 'tool_choice': {raw!r}; expected 'none', 'auto',"
                " 'required' or a function",
                param="tool_choice",
                code="invalid_value",
            )
        return raw
    kind = raw.get("type")
    if kind == "function":
        extra = sorted(set(raw) - {"type", "name"})
        if extra:
            raise UnknownFieldError(
                f"Unrecognized request argument supplied: tool_choice.{extra[0]}",
                param=f"tool_choice.{extra[0]}",
            )
        name = raw.get("name")
        if not isinstance(name, str):
            raise invalid_type("tool_choice.name", ["a string"], name)
        if name not in tools.names:
            raise InvalidRequestError(
                f"tool_choice names the function {name!r}, which is not in tools",
                param="tool_choice.name",
            )
        return {"type": "function", "function": {"name": name}}
    if isinstance(kind, str) and kind in _UNSUPPORTED_CHOICES:
        raise UnsupportedFeatureError(
            f"tool_choice of type {kind!r} is not supported; use 'none', 'auto',"
            " 'required' or {'type': 'function', 'name': ...}",
            param="tool_choice",
        )
    raise InvalidRequestError(
        f"Invalid value for 'tool_choice.type': {kind!r}",
        param="tool_choice.type",
        code="invalid_value",
    )


def echo_tool_choice(raw: str | dict[str, Any] | None) -> Any:
    """`tool_choice` as the response reports it (OpenAI's default: `auto`)."""
    return "auto" if raw is None else raw
