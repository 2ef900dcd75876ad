"""`truncation: "auto"`'s choice of where a conversation may start, without a server."""

from __future__ import annotations

import asyncio

import pytest

from realtime.dialects.responses.truncation import fit_by_dropping_turns, turn_starts
from realtime.protocol.conversation import FunctionCall, FunctionCallOutput, Item, text_message
from realtime.protocol.errors import PromptTooLongError

SYSTEM = text_message("system", "be terse")
DEVELOPER = text_message("developer", "use tools")


def user(text: str) -> Item:
    return text_message("user", text)


def assistant(text: str) -> Item:
    return text_message("assistant", text)


def too_long(tokens: int) -> PromptTooLongError:
    return PromptTooLongError("too long", prompt_tokens=tokens, context_length=10)


CALL = FunctionCall(call_id="c1", name="ls", arguments="{}")
OUTPUT = FunctionCallOutput(call_id="c1", output=("a b",))
#: instructions, then three turns; the second calls a tool
CONVERSATION: tuple[Item, ...] = (
    SYSTEM,
    DEVELOPER,
    user("one"),
    assistant("1"),
    user("two"),
    CALL,
    OUTPUT,
    assistant("2"),
    user("three"),
)


def test_turns_start_at_user_messages_after_the_instructions() -> None:
    assert turn_starts(CONVERSATION) == (2, [2, 4, 8])
    assert turn_starts((user("only"),)) == (0, [0])
    assert turn_starts((SYSTEM,)) == (1, [])


def fits_within(items: int) -> object:
    """An attempt that fits when the conversation has at most `items` items."""
    tried: list[int] = []

    async def attempt(conversation: tuple[Item, ...]) -> int:
        tried.append(len(conversation))
        if len(conversation) > items:
            raise too_long(len(conversation))
        return len(conversation)

    attempt.tried = tried  # type: ignore[attr-defined]
    return attempt


@pytest.mark.parametrize(
    ("room", "kept", "dropped"),
    [(7, 7, 2), (6, 3, 6), (3, 3, 6)],  # cut before "two", then before "three"
)
def test_the_longest_tail_that_fits_is_kept_and_the_instructions_always(
    room: int, kept: int, dropped: int
) -> None:
    attempt = fits_within(room)
    result, count = asyncio.run(fit_by_dropping_turns(CONVERSATION, attempt, too_long(99)))  # type: ignore[arg-type]
    assert (result, count) == (kept, dropped)
    assert len(attempt.tried) <= 2  # type: ignore[attr-defined]  # bisection over 2 cuts


def test_when_not_even_the_last_turn_fits_the_original_error_is_raised() -> None:
    original = too_long(99)
    with pytest.raises(PromptTooLongError) as raised:
        asyncio.run(fit_by_dropping_turns(CONVERSATION, fits_within(2), original))  # type: ignore[arg-type]
    assert raised.value is original


def test_a_cut_never_separates_a_tool_output_from_its_call() -> None:
    seen: list[tuple[Item, ...]] = []

    async def attempt(conversation: tuple[Item, ...]) -> None:
        seen.append(conversation)
        raise too_long(len(conversation))

    with pytest.raises(PromptTooLongError):
        asyncio.run(fit_by_dropping_turns(CONVERSATION, attempt, too_long(99)))
    for conversation in seen:
        assert conversation[:2] == (SYSTEM, DEVELOPER)
        assert isinstance(conversation[2], type(SYSTEM)) and conversation[2].role == "user"  # type: ignore[union-attr]
        if OUTPUT in conversation:
            assert CALL in conversation
