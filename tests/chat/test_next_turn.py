"""The next-turn prefix: what every next request after an answer begins with.

Checked against every template family in tests/model/templates and the tiny model's
own: the rendered next turn (any content) must start with the prefix, and the prefix
must cover the answer, including templates that render the latest answer differently
from earlier ones (reasoning kept only after the last user message).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from realtime.chat.conversation import answer_items, template_messages
from realtime.chat.next_turn import PLACEHOLDER, next_turn_prefix
from realtime.model.template import ChatTemplate
from realtime.protocol.errors import InvalidRequestError
from realtime.protocol.output import ParsedOutput, ParsedToolCall
from realtime.testing.tiny_model import CHATML_TEMPLATE, LLAMA3_TEMPLATE

TEMPLATES = Path(__file__).parent.parent / "model" / "templates"
SPECIALS = {
    "bos_token": "<s>",
    "eos_token": "</s>",
    "unk_token": "<unk>",
    "pad_token": "<pad>",
}
WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
    },
}
HISTORY = [
    {"role": "system", "content": "You are terse."},
    {"role": "user", "content": "What is the weather like in Paris today?"},
]
ANSWERS = {
    "content": ParsedOutput(content="It is sunny and 21 degrees."),
    "reasoning": ParsedOutput(content="Sunny.", reasoning="The user wants the weather."),
    "tool_call": ParsedOutput(
        tool_calls=[ParsedToolCall("call_1", "get_weather", '{"city": "Paris"}')]
    ),
}


def templates() -> dict[str, ChatTemplate]:
    found = {
        path.stem: ChatTemplate(path.read_text(encoding="utf-8"), SPECIALS)
        for path in sorted(TEMPLATES.glob("*.jinja"))
    }
    found["tiny_chatml"] = ChatTemplate(CHATML_TEMPLATE, {"eos_token": "<|im_end|>"})
    found["tiny_llama3"] = ChatTemplate(LLAMA3_TEMPLATE, {"bos_token": "<|begin_of_text|>"})
    return found


TEMPLATE_CASES = templates()


def next_message(answer: ParsedOutput, text: str) -> dict[str, Any]:
    if answer.tool_calls:
        return {"role": "tool", "tool_call_id": answer.tool_calls[0].id, "content": text}
    return {"role": "user", "content": text}


@pytest.mark.parametrize("answer_kind", sorted(ANSWERS))
@pytest.mark.parametrize("name", sorted(TEMPLATE_CASES))
def test_every_next_turn_starts_with_the_prefix(name: str, answer_kind: str) -> None:
    template = TEMPLATE_CASES[name]
    parsed = ANSWERS[answer_kind]
    tools = [WEATHER] if parsed.tool_calls else None
    [answer] = template_messages(answer_items(parsed))
    try:  # what the client's next request renders to
        nexts = [
            template.render(
                [*HISTORY, answer, next_message(parsed, text)],
                add_generation_prompt=True,
                tools=tools,
            )
            for text in ("Thanks! And tomorrow?", "42")
        ]
    except InvalidRequestError:
        pytest.skip(f"{name} cannot render this conversation at all")
    prefix = next_turn_prefix(template, HISTORY, answer, tools=tools)
    assert prefix is not None and PLACEHOLDER not in prefix
    for rendered in nexts:
        assert rendered.startswith(prefix)
    before = template.render(HISTORY, add_generation_prompt=False, tools=tools)
    assert len(prefix) > len(before)  # it covers the answer, not just the history
    if parsed.content:
        assert parsed.content in prefix


def test_reasoning_is_stripped_where_the_template_strips_it_once_a_turn_follows() -> None:
    template = TEMPLATE_CASES["tiny_chatml"]
    [answer] = template_messages(answer_items(ANSWERS["reasoning"]))
    naive = template.render([*HISTORY, answer], add_generation_prompt=False)
    prefix = next_turn_prefix(template, HISTORY, answer)
    assert prefix is not None
    assert "<think>" in naive  # the latest answer keeps its reasoning...
    assert "<think>" not in prefix  # ...until a user message follows it
    assert prefix.endswith("Sunny.<|im_end|>\n<|im_start|>user\n")


def test_a_template_that_refuses_the_placeholder_falls_back_to_the_plain_rendering() -> None:
    strict = ChatTemplate(
        "{%- for m in messages -%}"
        "{%- if loop.index0 > 2 -%}{{ raise_exception('three messages at most') }}{%- endif -%}"
        "[{{ m.role }}]{{ m.content }}"
        "{%- endfor -%}"
    )
    answer = {"role": "assistant", "content": "Sunny."}
    assert next_turn_prefix(strict, HISTORY, answer) == "[system]You are terse.[user]" + (
        "What is the weather like in Paris today?[assistant]Sunny."
    )
    broken = ChatTemplate("{{ raise_exception('never') }}")
    assert next_turn_prefix(broken, HISTORY, answer) is None
