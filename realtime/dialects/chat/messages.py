"""Chat messages and content parts, as the OpenAI API and its SDKs send them.

Messages accept keys beyond the ones typed here (for example `reasoning_content`
on an assistant turn a client sends back): they are passed to the chat template,
which is where model-specific message fields are meant to be read. The request
itself is strict about unknown fields (see `request.py`).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field


class _Part(BaseModel):
    model_config = ConfigDict(extra="allow", strict=True)


class TextPart(_Part):
    type: Literal["text"]
    text: str


class ImageURL(BaseModel):
    model_config = ConfigDict(strict=True)
    url: str
    detail: Literal["auto", "low", "high"] | None = None


class ImagePart(_Part):
    type: Literal["image_url"]
    image_url: ImageURL


class InputAudio(BaseModel):
    model_config = ConfigDict(strict=True)
    data: str
    format: str


class AudioPart(_Part):
    type: Literal["input_audio"]
    input_audio: InputAudio


class FilePart(_Part):
    type: Literal["file"]
    file: dict[str, Any]


class RefusalPart(_Part):
    type: Literal["refusal"]
    refusal: str


ContentPart = Annotated[
    TextPart | ImagePart | AudioPart | FilePart | RefusalPart, Field(discriminator="type")
]


class FunctionCall(BaseModel):
    model_config = ConfigDict(strict=True)
    name: str
    arguments: str


class ToolCall(BaseModel):
    model_config = ConfigDict(extra="allow", strict=True)
    id: str
    type: Literal["function"] = "function"
    function: FunctionCall


class _Message(BaseModel):
    model_config = ConfigDict(extra="allow", strict=True)
    name: str | None = None


class SystemMessage(_Message):
    role: Literal["system"]
    content: str | list[ContentPart]


class DeveloperMessage(_Message):
    role: Literal["developer"]
    content: str | list[ContentPart]


class UserMessage(_Message):
    role: Literal["user"]
    content: str | list[ContentPart]


class AssistantMessage(_Message):
    role: Literal["assistant"]
    content: str | list[ContentPart] | None = None
    refusal: str | None = None
    tool_calls: list[ToolCall] | None = None
    function_call: FunctionCall | None = None
    reasoning_content: str | None = None


class ToolMessage(_Message):
    role: Literal["tool"]
    content: str | list[ContentPart]
    tool_call_id: str


class FunctionMessage(_Message):
    role: Literal["function"]
    content: str | None
    name: str


Message = Annotated[
    SystemMessage
    | DeveloperMessage
    | UserMessage
    | AssistantMessage
    | ToolMessage
    | FunctionMessage,
    Field(discriminator="role"),
]


def text_of(content: str | list[Any] | None) -> str:
    """The plain text of a message's content: a string, or its text parts joined."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    return "".join(part.text for part in content if isinstance(part, TextPart))
