"""Compaction without a server: the cut, the transcript, the item's content, the rule
that a compaction item stands for everything before it, and `context_management`."""

from __future__ import annotations

import pytest

from realtime.dialects.responses import compaction_item
from realtime.dialects.responses.build import SUMMARY_PREFIX, responses_conversation
from realtime.dialects.responses.compaction import split, transcript
from realtime.dialects.responses.context_management import parse_context_management
from realtime.dialects.responses.items import normalize_input
from realtime.protocol.conversation import Message
from realtime.protocol.errors import InvalidRequestError

CONTEXT = normalize_input(
    [
        {"role": "system", "content": "Be terse."},
        {"role": "user", "content": "first"},
        {"role": "assistant", "content": "one"},
        {"type": "function_call", "call_id": "c1", "name": "look", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c1", "output": "found"},
        {"role": "developer", "content": "Mind the tools."},
        {"role": "user", "content": "second"},
        {"role": "assistant", "content": "two"},
    ]
)


def texts(items: list[dict[str, object]]) -> list[str]:
    return [part["text"] for item in items for part in item["content"]]  # type: ignore[index,union-attr]


def test_system_messages_and_the_last_turn_are_kept_the_rest_summarized() -> None:
    cut = split(CONTEXT)
    assert texts(cut.system) == ["Be terse.", "Mind the tools."]
    assert texts(cut.kept) == ["second", "two"]
    assert [item["type"] for item in cut.summarized] == [
        "message", "message", "function_call", "function_call_output"
    ]  # fmt: skip
    assert transcript(cut.summarized) == (
        "user: first\nassistant: one\nassistant called look({})\ntool result: found"
    )
    one_turn = split(CONTEXT[:3])  # a single turn is summarized whole
    assert texts(one_turn.summarized) == ["first", "one"] and one_turn.kept == []


def test_a_compaction_item_stands_for_everything_before_it() -> None:
    content = compaction_item.encode(compaction_item.Compaction("they talked", split(CONTEXT).kept))
    items = normalize_input(
        [
            *CONTEXT,
            {"type": "compaction", "encrypted_content": content},
            {"role": "user", "content": "third"},
        ]
    )
    conversation = responses_conversation(items, "Rules.")
    assert conversation == (
        Message("system", ("Rules.",)),
        Message("system", ("Be terse.",)),
        Message("developer", ("Mind the tools.",)),
        Message("user", (SUMMARY_PREFIX + "they talked",)),
        Message("user", ("second",)),
        Message("assistant", ("two",)),
        Message("user", ("third",)),
    )
    # compacting again summarizes the earlier summary and its kept turn
    assert "summary of the earlier conversation: they talked" in transcript(split(items).summarized)


@pytest.mark.parametrize(
    ("content", "why"),
    [
        ("gAAAAABopenai", "not made by this server"),
        ("rtc1.%%%", "base64url"),
        ("rtc1." + "e30=", "exactly 'summary' and 'kept'"),
        ("rtc1." + "x" * (1 << 20), "characters"),
    ],
)
def test_foreign_or_broken_content_is_refused_naming_the_field(content: str, why: str) -> None:
    with pytest.raises(InvalidRequestError) as info:
        normalize_input([{"type": "compaction", "encrypted_content": content}])
    assert info.value.param == "input.0.encrypted_content" and why in info.value.message


def test_kept_items_are_validated_as_input_items() -> None:
    bad = compaction_item.encode(compaction_item.Compaction("s", [{"type": "web_search_call"}]))
    with pytest.raises(InvalidRequestError) as info:
        normalize_input([{"type": "compaction", "encrypted_content": bad}])
    assert info.value.param == "input.0.encrypted_content.kept.0.type"


CM = "context_management.0"


def test_context_management_takes_one_compaction_entry_in_range() -> None:
    assert parse_context_management(None) is None and parse_context_management([]) is None
    assert parse_context_management([{"type": "compaction", "compact_threshold": 5}]) == 5
    assert parse_context_management([{"type": "compaction"}]) == 0  # the default share
    for raw, param in [
        ([{"type": "compaction"}] * 2, "context_management"),
        (
            [{"type": "compaction", "compact_threshold": 10**8}],
            "context_management.0.compact_threshold",
        ),
        ([{"type": "other"}], f"{CM}.type"),
        (["x"], CM),
    ]:
        with pytest.raises(InvalidRequestError) as info:
            parse_context_management(raw)
        assert info.value.param == param, (raw, info.value.param)
