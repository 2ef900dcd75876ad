"""The text a conversation's next request will begin with, rendered before it arrives.

Speculative next-turn prefill warms the KV cache with the prefix of the *next* turn:
the conversation so far plus the answer just produced. Rendering that with
`add_generation_prompt=False` alone (what Dynamo does) is not quite it: templates
render the latest assistant turn differently from earlier ones (Qwen-style templates
keep its `<think>` block only while no user message follows it), so the next turn's
prompt may diverge right at the answer.

So the conversation is rendered with one more message after the answer, a placeholder
of the role that will come next (a tool result when the answer called tools, else a
user message), and cut where the placeholder's content begins. What is left is what
the template produces for any next message of that role, its header included, so the
warm-up covers everything the next turn shares. A template that refuses the
placeholder (strict role or tool-call-id checks) gets Dynamo's rendering instead.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from realtime.chat.conversation import template_messages
from realtime.model.template import ChatTemplate
from realtime.protocol.conversation import FunctionCallOutput, Item, Message
from realtime.protocol.errors import InvalidRequestError

#: Letters and digits only, so filters like `trim` leave it whole and it cannot merge
#: with the surrounding template text into something that looks like markup.
PLACEHOLDER = "RealtimeNextTurnPlaceholder7f3a"


def next_turn_prefix(
    template: ChatTemplate,
    messages: list[dict[str, Any]],
    answer: dict[str, Any],
    *,
    tools: list[dict[str, Any]] | None = None,
    template_kwargs: Mapping[str, Any] | None = None,
) -> str | None:
    """The prompt text every next turn after `answer` starts with; None if unrenderable.

    `messages` and `answer` are template input (see `realtime.chat.conversation`).
    """
    kwargs = dict(template_kwargs or {})
    history = [*messages, answer]
    try:
        text = template.render(
            [*history, _placeholder(answer)], add_generation_prompt=False, tools=tools, **kwargs
        )
        cut = text.rfind(PLACEHOLDER)
        if cut >= 0:
            return text[:cut]
    except InvalidRequestError:
        pass
    try:
        return template.render(history, add_generation_prompt=False, tools=tools, **kwargs)
    except InvalidRequestError:
        return None


def _placeholder(answer: dict[str, Any]) -> dict[str, Any]:
    calls = answer.get("tool_calls") or []
    item: Item
    if calls:
        item = FunctionCallOutput(calls[0].get("id", ""), (PLACEHOLDER,))
    else:
        item = Message("user", (PLACEHOLDER,))
    [message] = template_messages([item])
    return message
