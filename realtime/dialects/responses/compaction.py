"""Compaction: a long context summarized by the served model into one `compaction` item.

`POST /v1/responses/compact` (`ResponsesService.compact`) and `context_management`'s
automatic compaction on `responses.create` share this. What is kept verbatim and
what is summarized (documented in docs/protocol.md, "Compaction"):

* kept verbatim: every `system` and `developer` message, and the last turn - the
  last `user` message and everything after it (the answer, tool calls and their
  output). The kept turn travels inside the compaction item (`compaction_item.py`),
  so a compaction item alone stands for the whole context;
* summarized: everything else, rendered as a plain transcript (`transcript`) into
  one prompt (`COMPACT_INSTRUCTIONS`, then the transcript) that the served model
  answers in at most `MAX_SUMMARY_TOKENS` tokens. A context that is a single turn
  is summarized whole (then nothing but the system messages is kept).

The summary is the model's own: on the echo engine it is the transcript echoed
back, on the scripted engine whatever the script says, on a real model a summary.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from contextlib import aclosing
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, ValidationError

from realtime.dialects.responses import compaction_item, ids
from realtime.dialects.responses.build import RESPONSES_PATHS, compacted
from realtime.dialects.responses.items import item_text, normalize_input
from realtime.dialects.responses.request import ImageOptions, PromptCacheOptions
from realtime.dialects.responses.validation import client_error
from realtime.pipeline import ChatPipeline
from realtime.pipeline.events import Step, Usage
from realtime.pipeline.items import OutputItems
from realtime.pipeline.offload import prepare_chat
from realtime.protocol.conversation import Message
from realtime.protocol.errors import InvalidRequestError
from realtime.protocol.generation_request import GenerationRequest

#: The summary's token limit (clamped to what fits the context).
MAX_SUMMARY_TOKENS = 1024
#: The summarizing prompt's system message.
COMPACT_INSTRUCTIONS = (
    "You compact conversations. Summarize the conversation below so that it can"
    " continue from your summary alone: the user's goals and requests, the decisions"
    " and facts established, tool calls made and what they returned, and what is"
    " still open. Be concise; write plain prose or short bullet points; do not"
    " address the user."
)
#: What follows the transcript in the summarizing prompt's user message.
COMPACT_REQUEST_END = "\n\nEnd of conversation. Write the summary."
#: The lines of the transcript, before the conversation.
TRANSCRIPT_HEAD = "Conversation to summarize:\n"
_KEPT_ROLES = ("system", "developer")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class CompactRequest(_Strict):
    """`POST /v1/responses/compact`: the SDK's `ResponseCompactParams`."""

    model: str
    input: str | list[Any] | None = None
    instructions: str | None = None
    previous_response_id: str | None = None
    # accepted, no effect here (as on responses.create)
    prompt_cache_key: str | None = None
    prompt_cache_options: PromptCacheOptions | None = None
    prompt_cache_retention: Literal["in_memory", "24h"] | None = None
    service_tier: str | None = None
    image: ImageOptions | None = None


def parse_compact_request(data: Any) -> tuple[CompactRequest, list[dict[str, Any]]]:
    """The body and its input items in normal form; every failure is a 400 naming it."""
    if not isinstance(data, dict):
        raise InvalidRequestError("the request body must be a JSON object")
    try:
        request = CompactRequest.model_validate(data)
    except ValidationError as exc:
        raise client_error(exc) from None
    if request.prompt_cache_options is not None and request.prompt_cache_options.prewarm:
        raise InvalidRequestError(
            "prompt_cache_options.prewarm is not supported",
            param="prompt_cache_options.prewarm",
            code="unsupported",
        )
    return request, normalize_input(request.input)


@dataclass(frozen=True, slots=True)
class Split:
    """A context cut for compaction."""

    #: system and developer messages, kept verbatim before the compaction item
    system: list[dict[str, Any]]
    #: what the summary replaces
    summarized: list[dict[str, Any]]
    #: the last turn, kept verbatim inside the compaction item
    kept: list[dict[str, Any]]


def split(items: Iterable[dict[str, Any]]) -> Split:
    """Cut a context (normal-form items) into what is kept and what is summarized."""
    listed = compacted(items)
    system = [i for i in listed if i["type"] == "message" and i["role"] in _KEPT_ROLES]
    rest = [i for i in listed if not (i["type"] == "message" and i["role"] in _KEPT_ROLES)]
    users = [n for n, i in enumerate(rest) if i["type"] == "message" and i["role"] == "user"]
    cut = users[-1] if users else len(rest)
    summarized, kept = rest[:cut], rest[cut:]
    if not summarized:  # one turn: summarize it whole
        summarized, kept = kept, []
    return Split(system, summarized, kept)


def transcript(items: Iterable[dict[str, Any]]) -> str:
    """The items as plain text lines, for the summarizing prompt."""
    lines: list[str] = []
    for item in items:
        kind = item["type"]
        if kind == "message":
            lines.append(f"{item['role']}: " + "\n".join(item_text(item["content"])))
        elif kind == "function_call":
            lines.append(f"assistant called {item['name']}({item['arguments']})")
        elif kind == "function_call_output":
            output = item["output"]
            text = output if isinstance(output, str) else "\n".join(item_text(output))
            lines.append(f"tool result: {text}")
        elif kind == "compaction":
            summary, kept = compaction_item.decode(item["encrypted_content"])
            lines.append(f"summary of the earlier conversation: {summary}")
            lines.append(transcript(kept))
        # reasoning is the model's own scratch work: not summarized
    return "\n".join(line for line in lines if line)


def summary_request(
    model: str, instructions: str | None, part: list[dict[str, Any]]
) -> GenerationRequest:
    """The neutral request that asks the model for the summary of `part`."""
    head = TRANSCRIPT_HEAD + (f"system: {instructions}\n" if instructions else "")
    return GenerationRequest(
        model=model,
        conversation=(
            Message("system", (COMPACT_INSTRUCTIONS,)),
            Message("user", (head + transcript(part) + COMPACT_REQUEST_END,)),
        ),
        tool_choice="none",
        max_tokens=MAX_SUMMARY_TOKENS,
        max_tokens_clamp=True,
        thinking=False,
        paths=RESPONSES_PATHS,
    )


@dataclass(frozen=True, slots=True)
class Compacted:
    """A compaction's result: the items that replace the context, and its tokens."""

    #: the system messages, then the compaction item
    output: list[dict[str, Any]]
    item: dict[str, Any]
    usage: Usage


async def compact(
    pipeline: ChatPipeline,
    model: str,
    items: list[dict[str, Any]],
    *,
    instructions: str | None = None,
    session_id: str | None = None,
    cache_salt: str | None = None,
) -> Compacted:
    """Summarize `items` with the served model. Raises RealtimeError (a context with
    nothing to summarize, a summarizing prompt that does not fit the model)."""
    cut = split(items)
    if not cut.summarized:
        raise InvalidRequestError(
            "input: nothing to compact (only system or developer messages)", param="input"
        )
    # the caller's salt: its summary shares no cached prefix with another key's requests
    request = dataclasses.replace(
        summary_request(model, instructions, cut.summarized), cache_salt=cache_salt
    )
    chat = await prepare_chat(
        pipeline, request, stream=False, session_id=session_id, size=sum(map(len, map(str, items)))
    )
    await pipeline.constrain(chat)
    answer = OutputItems(lambda kind: kind, reasoning=False)
    async with aclosing(pipeline.events(chat)) as events:  # a cancel stops the engine
        async for event in events:
            if type(event) is Step:
                answer.step(event)
    summary = "".join(item.text for item in answer.items if item.kind == "message").strip()
    item = {
        "id": ids.new_id("cmp"),
        "type": "compaction",
        "encrypted_content": compaction_item.encode(compaction_item.Compaction(summary, cut.kept)),
    }
    return Compacted([*cut.system, item], item, chat.usage)
