"""`tool_choice` and `parallel_tool_calls`, as pure decisions over parsed output.

* `none`: tool calls are not parsed at all; call-shaped text stays content.
* `auto` (the default): calls are parsed when the request declared tools.
* `required`: the output must make at least one call.
* a named function: the parser accepts only that function's name (any other
  call-shaped text stays content, with a warning), and the output must call it.

`required` and named choices are checked after the fact as well:
`tool_choice_violation` says, at the end of the output, why it does not comply,
and the pipeline turns that into an error. Engines that constrain generation
enforce these choices by grammar (`grammar.py`), so there the check is a safety
net; on the others it is the only check. A request whose
choice cannot even be checked (no tools, a name it did not declare, no tool
parser configured) is refused before generation by `ToolChoiceError`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from realtime.chat.tools.base import ToolSpec
from realtime.protocol.conversation import NamedFunction

Mode = Literal["none", "auto", "required", "function"]


class ToolChoiceError(ValueError):
    """A `tool_choice` that cannot be honoured for this request (a 400 for the client)."""

    param = "tool_choice"


@dataclass(frozen=True, slots=True)
class ToolChoice:
    mode: Mode = "auto"
    function: str | None = None

    @property
    def parses_calls(self) -> bool:
        return self.mode != "none"

    @property
    def demands_call(self) -> bool:
        return self.mode in ("required", "function")

    def describe(self) -> str:
        return f"the function {self.function!r}" if self.mode == "function" else repr(self.mode)


AUTO = ToolChoice()


def normalize_tool_choice(value: Any) -> ToolChoice:
    """A ToolChoice from the request's field: None, a string, a `NamedFunction`, a dict or a
    pydantic model."""
    if value is None:
        return AUTO
    if isinstance(value, NamedFunction):
        return ToolChoice("function", value.name)
    if hasattr(value, "model_dump"):
        value = value.model_dump()
    if isinstance(value, str):
        if value in ("none", "auto", "required"):
            return ToolChoice(value)  # type: ignore[arg-type]
        raise ToolChoiceError(f"tool_choice {value!r} is not 'none', 'auto' or 'required'")
    if isinstance(value, Mapping):
        fn = value.get("function")
        name = fn.get("name") if isinstance(fn, Mapping) else None
        if value.get("type", "function") == "function" and isinstance(name, str) and name:
            return ToolChoice("function", name)
    raise ToolChoiceError("tool_choice must be 'none', 'auto', 'required' or a named function")


def tools_for_choice(tools: Sequence[ToolSpec], choice: ToolChoice) -> list[ToolSpec] | None:
    """The tools a parser may accept calls to; None when calls are not parsed.

    Raises ToolChoiceError when a demanded call is impossible to check.
    """
    if not choice.parses_calls:
        return None
    if choice.demands_call and not tools:
        raise ToolChoiceError(f"tool_choice {choice.describe()} needs `tools`")
    if choice.mode == "function":
        chosen = [t for t in tools if t.name == choice.function]
        if not chosen:
            raise ToolChoiceError(
                f"tool_choice names {choice.function!r}, which is not among the request's tools"
            )
        return chosen
    return list(tools) if tools else None


def tool_choice_violation(choice: ToolChoice, call_names: Sequence[str]) -> str | None:
    """Why an output with these calls does not comply with `choice`, or None."""
    if choice.mode == "required" and not call_names:
        return "tool_choice is 'required' but the model answered without calling a tool"
    if choice.mode == "function":
        if not call_names:
            return f"tool_choice names {choice.function!r} but the model did not call it"
        other = next((n for n in call_names if n != choice.function), None)
        if other is not None:
            return f"tool_choice names {choice.function!r} but the model called {other!r}"
    return None
