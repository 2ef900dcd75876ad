"""The request's tools and `tool_choice`: the Responses spelling in, the chat spelling out.

Responses tools are flat (`{"type": "function", "name": ..., "parameters": ...}`);
chat tools nest the function (`{"type": "function", "function": {...}}`), and the
chat pipeline (templates, tool parsers, the `tool_choice` check) takes the chat
form. What each tool type becomes:

* `function`: offered to the model as it is;
* `namespace` (a named group of function and custom tools the client runs, as Codex
  declares its sub-agent tools): flattened, each of its tools offered by its own
  name; a call of one comes back carrying the group's `namespace`;
* `custom` (freeform input, optionally a Lark or regex grammar `format`): offered
  as a function with one string parameter, `input`; its calls come back as
  `custom_tool_call` items with that string as their `input`;
* hosted tools (web search, file search, code interpreter, image generation,
  local shell, computer use, MCP...: tools OpenAI's servers run): accepted, never
  offered to the model (this server runs none), and listed in `hosted` by field
  path so the service can log them once per request. A dated variant the SDK does
  not know yet is accepted too, and left out of the response's `tools` echo.

Two tools of one name (across namespaces too) are a 400: a call names only the
function, so the server could not tell which was meant.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from realtime.dialects.responses.validation import client_error, invalid_type
from realtime.protocol.errors import (
    InvalidRequestError,
    UnknownFieldError,
    UnsupportedFeatureError,
)

_M = TypeVar("_M", bound=BaseModel)


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, populate_by_name=True)


class FunctionTool(_Strict):
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


class TextInput(_Strict):
    type: Literal["text"]


class GrammarInput(_Strict):
    type: Literal["grammar"]
    syntax: Literal["lark", "regex"]
    definition: str


class CustomTool(_Strict):
    type: Literal["custom"]
    name: str
    description: str | None = None
    format: TextInput | GrammarInput | None = Field(default=None, discriminator="type")
    # the SDK's other fields: accepted, no effect here
    allowed_callers: list[Literal["direct", "programmatic"]] | None = None
    defer_loading: bool | None = None
    async_: bool | None = Field(default=None, alias="async")


class NamespaceTool(_Strict):
    type: Literal["namespace"]
    name: str
    description: str
    tools: list[dict[str, Any]]


#: The one parameter a custom tool is offered with: its freeform input.
CUSTOM_INPUT = "input"
CUSTOM_PARAMETERS: dict[str, Any] = {
    "type": "object",
    "properties": {CUSTOM_INPUT: {"type": "string"}},
    "required": [CUSTOM_INPUT],
    "additionalProperties": False,
}


def custom_parameters(fmt: GrammarInput | None) -> dict[str, Any]:
    """The parameters a custom tool is offered with. A regex `format` becomes the input's
    JSON Schema `pattern` (anchored: the whole input must match), which the engines that
    constrain enforce wherever they enforce a call's arguments (an enforced
    `tool_choice`), under the same grammar limits as any schema. A Lark `format` cannot
    be written inside a JSON string's grammar: its input is offered as free text."""
    if fmt is None or fmt.syntax != "regex":
        return CUSTOM_PARAMETERS
    pattern = {"type": "string", "pattern": f"^(?:{fmt.definition})$"}
    return {**CUSTOM_PARAMETERS, "properties": {CUSTOM_INPUT: pattern}}


#: Tool types the SDK defines that OpenAI's servers run: accepted, never offered.
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
        "tool_search",
        "apply_patch",
        "programmatic_tool_calling",
    }
)

#: A dated variant of a hosted tool (`web_search_2025_08_26`), including ones a newer
#: SDK adds: the base name, then a date.
_DATED = re.compile(r"([a-z_]+?)_\d{4}_\d{2}_\d{2}")


def is_hosted(kind: str) -> bool:
    """A tool type OpenAI's servers run: a known one, or a dated variant of one."""
    if kind in HOSTED_TOOLS:
        return True
    dated = _DATED.fullmatch(kind)
    return dated is not None and dated.group(1) in HOSTED_TOOLS


#: `tool_choice` object types for hosted tools and features this server does not have.
_UNSUPPORTED_CHOICES = frozenset(
    {
        "allowed_tools",
        "mcp",
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
    """The request's tools: as echoed on the response, in chat form, and what each
    offered name is (a namespace's function, a custom tool)."""

    #: Responses form, as sent (echoed in `response.tools`)
    echo: list[dict[str, Any]] = field(default_factory=list)
    #: chat form, for the template and the tool parser; None when there are none
    chat: list[dict[str, Any]] | None = None
    #: offered name -> the namespace it came from
    namespaces: dict[str, str] = field(default_factory=dict)
    #: offered name -> the custom tool's input grammar (None: freeform text)
    custom: dict[str, GrammarInput | None] = field(default_factory=dict)
    #: field paths of the hosted tools left out (`tools.8`), with their types
    hosted: list[tuple[str, str]] = field(default_factory=list)

    @property
    def names(self) -> list[str]:
        """The names the model is offered."""
        return [tool["function"]["name"] for tool in self.chat or ()]


def parse_tools(raw: list[Any] | None) -> FunctionTools:
    if not raw:
        return FunctionTools()
    tools = FunctionTools(chat=[])
    for index, tool in enumerate(raw):
        where = f"tools.{index}"
        kind = _tool_type(tool, where)
        if is_hosted(kind):
            tools.hosted.append((where, kind))
            if kind not in HOSTED_TOOLS:
                continue  # a dated variant the SDK's types lack: its echo would not parse
        elif kind == "namespace":
            group = _validate(NamespaceTool, tool, where)
            for inner, member in enumerate(group.tools):
                at = f"{where}.tools.{inner}"
                if _tool_type(member, at) not in ("function", "custom"):
                    raise InvalidRequestError(
                        f"Invalid value for '{at}.type': a namespace holds function and"
                        " custom tools",
                        param=f"{at}.type",
                        code="invalid_value",
                    )
                _add(tools, member, at, group.name)
        elif kind in ("function", "custom"):
            parsed = _add(tools, tool, where, None)
            if isinstance(parsed, FunctionTool):
                tools.echo.append(
                    {
                        "type": "function",
                        "name": parsed.name,
                        "description": parsed.description,
                        "parameters": parsed.parameters,
                        "strict": parsed.strict,
                    }
                )
                continue
        else:
            raise InvalidRequestError(
                f"Invalid value for '{where}.type': unknown tool type {kind!r}.",
                param=f"{where}.type",
                code="invalid_value",
            )
        tools.echo.append(tool)
    if not tools.chat:
        return FunctionTools(tools.echo, None, hosted=tools.hosted)
    return tools


def _tool_type(tool: Any, where: str) -> str:
    if not isinstance(tool, dict):
        raise invalid_type(where, ["an object"], tool)
    kind = tool.get("type")
    if not isinstance(kind, str):
        raise invalid_type(f"{where}.type", ["a string"], kind)
    return kind


def _validate(model: type[_M], tool: dict[str, Any], where: str) -> _M:
    try:
        return model.model_validate(tool)
    except ValidationError as exc:
        raise client_error(exc, where) from None


def _add(
    tools: FunctionTools, tool: dict[str, Any], where: str, namespace: str | None
) -> FunctionTool | CustomTool:
    """One function or custom tool, offered by its name (in chat form)."""
    parsed: FunctionTool | CustomTool
    if tool["type"] == "custom":
        parsed = _validate(CustomTool, tool, where)
    else:
        parsed = _validate(FunctionTool, tool, where)
    if parsed.defer_loading:
        raise UnsupportedFeatureError(
            f"{where}: defer_loading needs tool search, which this server does not have",
            param=f"{where}.defer_loading",
        )
    if parsed.name in tools.names:
        raise InvalidRequestError(
            f"{where}.name: a tool named {parsed.name!r} is already in tools (namespaces"
            " share one set of names here)",
            param=f"{where}.name",
        )
    function: dict[str, Any] = {"name": parsed.name}
    if parsed.description is not None:
        function["description"] = parsed.description
    if isinstance(parsed, CustomTool):
        fmt = parsed.format if isinstance(parsed.format, GrammarInput) else None
        function["parameters"] = custom_parameters(fmt)
        tools.custom[parsed.name] = fmt
    else:
        if parsed.parameters is not None:
            function["parameters"] = parsed.parameters
        if parsed.strict is not None:
            function["strict"] = parsed.strict
    assert tools.chat is not None
    tools.chat.append({"type": "function", "function": function})
    if namespace is not None:
        tools.namespaces[parsed.name] = namespace
    return parsed


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
    if kind in ("function", "custom"):
        extra = sorted(set(raw) - {"type", "name"})
        if extra:
            raise UnknownFieldError(
                f"Unrecognized request argument supplied: tool_choice.{extra[0]}",
                param=f"tool_choice.{extra[0]}",
            )
        name = raw.get("name")
        if not isinstance(name, str):
            raise invalid_type("tool_choice.name", ["a string"], name)
        if name not in tools.names or (kind == "custom") != (name in tools.custom):
            raise InvalidRequestError(
                f"tool_choice names the {kind} tool {name!r}, which is not in tools",
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
