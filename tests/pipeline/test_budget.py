"""The token budget alone: the context check and the server's cap, decided in one place.

The refusals are `--max-tokens-policy error`'s (`TokenBudget(policy="error")`); the
default policy clamps (the tests at the end)."""

from __future__ import annotations

import pytest

from realtime.pipeline.budget import OutputAsk, PromptOverflow, TokenBudget
from realtime.protocol.errors import InvalidRequestError, OutputLimitError

CONTEXT = 10


def overflow(seen: list[PromptOverflow]) -> object:
    def build(problem: PromptOverflow) -> InvalidRequestError:
        seen.append(problem)
        return InvalidRequestError("overflow", code="context_length_exceeded")

    return build


def ask(tokens: int | None, explicit: bool = True) -> OutputAsk:
    return OutputAsk(tokens, explicit=explicit, field="max_tokens")


def test_without_a_limit_an_answer_may_fill_the_context() -> None:
    assert TokenBudget().limits([3, 7], CONTEXT, ask(None, False), overflow([])) == [7, 3]


def test_a_limit_that_fits_is_kept() -> None:
    assert TokenBudget().limits([3], CONTEXT, ask(7), overflow([])) == [7]


@pytest.mark.parametrize(
    ("prompts", "tokens", "expected"),
    [
        ([3, 9], 2, PromptOverflow(1, 9, 2, 1, CONTEXT, "max_tokens")),  # asks more than the room
        ([10], None, PromptOverflow(0, 10, 0, 0, CONTEXT, "max_tokens")),  # no room at all
        ([12], 1, PromptOverflow(0, 12, 1, -2, CONTEXT, "max_tokens")),  # prompt beyond context
    ],
)
def test_a_prompt_that_leaves_no_room_is_described_to_the_api(
    prompts: list[int], tokens: int | None, expected: PromptOverflow
) -> None:
    seen: list[PromptOverflow] = []
    with pytest.raises(InvalidRequestError):
        TokenBudget(max_tokens_cap=100, policy="error").limits(
            prompts, CONTEXT, ask(tokens), overflow(seen)
        )
    assert seen == [expected]


def test_the_cap_cuts_every_limit_the_client_did_not_set() -> None:
    budget = TokenBudget(max_tokens_cap=4)
    assert budget.limits([1, 8], CONTEXT, ask(None, False), overflow([])) == [4, 2]
    # an API default (completions' 16-token default) is not the client's: it is cut too
    assert budget.limits([1], 100, ask(16, explicit=False), overflow([])) == [4]


def test_a_limit_the_client_set_above_the_cap_is_refused() -> None:
    budget = TokenBudget(max_tokens_cap=4, policy="error")
    assert budget.limits([1], CONTEXT, ask(4), overflow([])) == [4]
    with pytest.raises(OutputLimitError) as info:
        budget.limits(
            [1], CONTEXT, OutputAsk(5, explicit=True, field="max_completion_tokens"), overflow([])
        )
    error = info.value
    assert error.code == "max_tokens_exceeded" and error.param == "max_completion_tokens"
    assert error.message == (
        "max_completion_tokens is 5 but this server allows at most 4 tokens per answer"
    )


def test_the_context_is_checked_before_the_cap() -> None:
    seen: list[PromptOverflow] = []
    with pytest.raises(InvalidRequestError) as info:
        TokenBudget(max_tokens_cap=4, policy="error").limits([8], CONTEXT, ask(50), overflow(seen))
    assert info.value.code == "context_length_exceeded" and len(seen) == 1


def test_a_cap_below_one_is_refused_at_startup() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        TokenBudget(max_tokens_cap=0)


def clamped(tokens: int) -> OutputAsk:
    return OutputAsk(tokens, explicit=True, field="max_tokens", clamp=True)


def test_a_clamped_limit_is_cut_to_the_room_then_to_the_cap() -> None:
    assert TokenBudget().limits([3, 8], CONTEXT, clamped(32000), overflow([])) == [7, 2]
    assert TokenBudget().limits([3], CONTEXT, clamped(5), overflow([])) == [5]
    # the cap, which refuses a limit the client set, cuts a clamped one
    assert TokenBudget(max_tokens_cap=4).limits([3], CONTEXT, clamped(32000), overflow([])) == [4]


def test_a_prompt_that_leaves_no_room_is_refused_even_when_clamped() -> None:
    seen: list[PromptOverflow] = []
    with pytest.raises(InvalidRequestError):
        TokenBudget().limits([10], CONTEXT, clamped(32000), overflow(seen))
    assert seen == [PromptOverflow(0, 10, 32000, 0, CONTEXT, "max_tokens")]


def test_the_default_policy_clamps_every_request() -> None:
    """`--max-tokens-policy clamp` (the default): a limit the client set beyond the room or
    the cap is cut to what fits, without the request asking for it."""
    assert TokenBudget().limits([3, 8], CONTEXT, ask(32000), overflow([])) == [7, 2]
    assert TokenBudget(max_tokens_cap=4).limits([3], CONTEXT, ask(32000), overflow([])) == [4]
    assert TokenBudget(max_tokens_cap=4).limits([3], CONTEXT, ask(3), overflow([])) == [3]
    seen: list[PromptOverflow] = []
    with pytest.raises(InvalidRequestError):  # still: a prompt that leaves no room at all
        TokenBudget().limits([10], CONTEXT, ask(5), overflow(seen))
    assert seen == [PromptOverflow(0, 10, 5, 0, CONTEXT, "max_tokens")]


def test_the_error_policy_refuses_unless_the_request_asks_to_be_clamped() -> None:
    budget = TokenBudget(max_tokens_cap=4, policy="error")
    with pytest.raises(OutputLimitError):
        budget.limits([1], CONTEXT, ask(5), overflow([]))
    assert budget.limits([3], CONTEXT, clamped(32000), overflow([])) == [4]


def test_an_unknown_policy_is_refused_at_startup() -> None:
    with pytest.raises(ValueError, match="policy"):
        TokenBudget(policy="truncate")
