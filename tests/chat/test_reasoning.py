"""Reasoning parsers: streaming at any split folds to the complete split of reasoning/content."""

from __future__ import annotations

from typing import Any

import pytest

from realtime.chat.reasoning import create_reasoning_parser, thinking_requested
from realtime.protocol.output import (
    ContentDelta,
    OutputEvent,
    ParsedOutput,
    ReasoningDelta,
    fold_events,
)
from tests.chat.tools.harness import splits


def stream(name: str, pieces: list[str], **options: Any) -> tuple[list[OutputEvent], ParsedOutput]:
    parser = create_reasoning_parser(name, **options)
    events: list[OutputEvent] = []
    for piece in pieces:
        events += parser.feed(piece)
    events += parser.finish()
    return events, fold_events(events)


def check(name: str, text: str, reasoning: str, content: str, **options: Any) -> None:
    complete = create_reasoning_parser(name, **options).parse(text)
    assert (complete.reasoning, complete.content) == (reasoning, content)
    for pieces in splits(text):
        events, folded = stream(name, pieces, **options)
        assert (folded.reasoning, folded.content) == (reasoning, content), pieces
        assert all(isinstance(e, ContentDelta | ReasoningDelta) and e.text for e in events)


R1_PROMPT = "<\uff5cUser\uff5c>2+2?<\uff5cAssistant\uff5c><think>\n"
QWEN_PROMPT = "<|im_start|>user\n2+2?<|im_end|>\n<|im_start|>assistant\n"

CASES: list[tuple[str, str, str, str, dict[str, Any]]] = [
    ("qwen3", "<think>\nTwo plus two.\n</think>\n\nIt is 4.", "Two plus two.", "It is 4.", {}),
    ("qwen3", "  <think>a < b</think>ok", "a < b", "ok", {}),
    ("qwen3", "It is 4.", "", "It is 4.", {}),
    ("qwen3", "It is 4. <think>late</think>", "", "It is 4. <think>late</think>", {}),
    ("qwen3", "<think>x</think>y", "", "<think>x</think>y", {"enable_thinking": False}),
    # Qwen3 "Thinking" / QwQ: the prompt opened the block.
    (
        "qwen3",
        "Hmm, 4.\n</think>\n\nIt is 4.",
        "Hmm, 4.",
        "It is 4.",
        {"prompt": QWEN_PROMPT + "<think>\n"},
    ),
    # enable_thinking=false renders an empty block into the prompt.
    ("qwen3", "It is 4.", "", "It is 4.", {"prompt": QWEN_PROMPT + "<think>\n\n</think>\n\n"}),
    ("deepseek_r1", "Let me add.\n</think>\n\nIt is 4.", "Let me add.", "It is 4.", {}),
    ("deepseek_r1", "<think>\nLet me add.\n</think>It is 4.", "Let me add.", "It is 4.", {}),
    ("deepseek_r1", "Let me add. Two and", "Let me add. Two and", "", {"prompt": R1_PROMPT}),
    ("deepseek_r1", "</think>Direct.", "", "Direct.", {}),
    ("mistral", "[THINK]Add them.[/THINK]It is 4.", "Add them.", "It is 4.", {}),
    ("mistral", "It is 4.", "", "It is 4.", {}),
    (
        "tags",
        "<reasoning>é 🤔</reasoning>\nDone",
        "é 🤔",
        "Done",
        {"start_tag": "<reasoning>", "end_tag": "</reasoning>"},
    ),
    ("tags", "<think>\n\n</think>\n\nEmpty thought", "", "Empty thought", {}),
]


@pytest.mark.parametrize(("name", "text", "reasoning", "content", "options"), CASES)
def test_cases(name: str, text: str, reasoning: str, content: str, options: dict[str, Any]) -> None:
    check(name, text, reasoning, content, **options)


def test_reasoning_streams_before_the_end_tag() -> None:
    parser = create_reasoning_parser("qwen3")
    assert parser.feed("<thi") == []
    assert parser.feed("nk>\nStep one") == [ReasoningDelta("Step one")]
    assert parser.feed(" then </th") == [ReasoningDelta(" then")]
    assert parser.feed("ink>\n\n") == []
    assert parser.feed("Answer") == [ContentDelta("Answer")]
    assert parser.finish() == []


def test_without_reasoning_every_character_is_content() -> None:
    for text in ["  padded  ", "\n", "<thin", "<th"]:
        check("qwen3", text, "", text)


def test_thinking_requested() -> None:
    assert thinking_requested({"enable_thinking": False}) is False
    assert thinking_requested({"thinking": True}) is True
    assert thinking_requested({"other": 1}) is None
    assert thinking_requested(None) is None


def test_markers() -> None:
    assert create_reasoning_parser("mistral").markers == ("[THINK]", "[/THINK]")


def test_empty_tags_are_refused() -> None:
    from realtime.chat.reasoning import TagReasoningParser

    with pytest.raises(ValueError, match="must not be empty"):
        TagReasoningParser(start_tag="", end_tag="")
