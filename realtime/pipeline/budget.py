"""How many tokens an answer may have: what fits after its prompt, at most the server's cap.

Decided once per request, inside `prepare`, for every API. Without a limit, the
answer may fill the context after the prompt, and the server's `--max-tokens-cap`
narrows that; such an answer ends with `finish_reason` `length`.

A limit the client asks for beyond what fits is cut to what fits by default
(`--max-tokens-policy clamp`): to the room after the prompt, then to the cap, and
an answer that reaches it ends with the length finish reason (`length`,
`max_tokens` on the Messages API). Agents send one limit whatever the model
(opencode `max_tokens: 32000`, Claude Code the same), so refusing it would refuse
every request on a small model. Under `--max-tokens-policy error` such a limit is
refused instead: beyond the room 400 `context_length_exceeded`, above the cap 400
`max_tokens_exceeded`; a request may still ask to be clamped whatever the policy
(`OutputAsk.clamp`, from the neutral request's `max_tokens_clamp`: the Messages
API, whose clients never expect the refusal). A prompt that leaves no room at all
is refused on every policy.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from realtime.protocol.errors import InvalidRequestError, OutputLimitError


@dataclass(slots=True)  # not frozen: built for every request, and frozen costs twice as much
class OutputAsk:
    """The output limit a request asks for, as its API spells it."""

    #: the limit, the API's default included; None: as many tokens as fit
    tokens: int | None
    #: whether the client set it (only a limit the client set is refused for the cap)
    explicit: bool
    #: the field that carries it, named in errors
    field: str
    #: cut a limit beyond the room or the cap to what fits, instead of refusing it
    clamp: bool = False


@dataclass(frozen=True, slots=True)
class PromptOverflow:
    """A prompt that leaves no room, or not the room asked for, in the model's context."""

    index: int
    prompt_tokens: int
    #: the limit asked for or, without one, the room (then <= 0)
    asked: int
    room: int
    context_length: int
    field: str


#: Builds the API's own error for an overflowing prompt (its wording and `param`).
Overflow = Callable[[PromptOverflow], InvalidRequestError]


#: `--max-tokens-policy` values: cut a limit beyond what fits, or refuse it.
MAX_TOKENS_POLICIES = ("clamp", "error")


class TokenBudget:
    def __init__(self, max_tokens_cap: int | None = None, policy: str = "clamp"):
        if max_tokens_cap is not None and max_tokens_cap < 1:
            raise ValueError(f"the max tokens cap must be at least 1, got {max_tokens_cap}")
        if policy not in MAX_TOKENS_POLICIES:
            raise ValueError(f"the max tokens policy must be one of {MAX_TOKENS_POLICIES}")
        self.max_tokens_cap = max_tokens_cap
        #: every request clamped, not only those that ask (`OutputAsk.clamp`)
        self.clamp = policy == "clamp"

    def limits(
        self,
        prompt_lengths: Sequence[int],
        context_length: int,
        ask: OutputAsk,
        overflow: Overflow,
    ) -> list[int]:
        """Each prompt's output limit. Raises InvalidRequestError (see the module docstring)."""
        clamp = ask.clamp or self.clamp
        limits = []
        for index, prompt_tokens in enumerate(prompt_lengths):
            room = context_length - prompt_tokens
            limit = ask.tokens if ask.tokens is not None else room
            if clamp and 0 < room < limit:
                limit = room
            if room <= 0 or limit > room:
                raise overflow(
                    PromptOverflow(index, prompt_tokens, limit, room, context_length, ask.field)
                )
            limits.append(limit)
        cap = self.max_tokens_cap
        if cap is None:
            return limits
        if ask.explicit and not clamp and ask.tokens is not None and ask.tokens > cap:
            raise OutputLimitError(
                f"{ask.field} is {ask.tokens} but this server allows at most {cap} tokens"
                " per answer",
                param=ask.field,
            )
        return [min(limit, cap) for limit in limits]
