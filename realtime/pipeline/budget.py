"""How many tokens an answer may have: what fits after its prompt, at most the server's cap.

Decided once per request, inside `prepare`, for every API. A limit the request
asks for must fit the model's context after the prompt (else 400
`context_length_exceeded`); without one, the answer may fill the context. The
server's `--max-tokens-cap` then narrows that: a limit the client set above the
cap is refused (400 `max_tokens_exceeded`); any other limit is cut to the cap, and
such an answer ends with `finish_reason` `length`.

A request that asks to be clamped (`OutputAsk.clamp`, from the neutral request's
`max_tokens_clamp`: the Messages API, where Claude Code sends `max_tokens: 32000`
whatever the model) gets neither refusal: its limit is cut to the room after the
prompt and to the cap, and an answer that reaches it ends with the length finish
reason (`max_tokens` on the Messages API). A prompt that leaves no room at all is
still refused, on every policy.
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


class TokenBudget:
    def __init__(self, max_tokens_cap: int | None = None):
        if max_tokens_cap is not None and max_tokens_cap < 1:
            raise ValueError(f"the max tokens cap must be at least 1, got {max_tokens_cap}")
        self.max_tokens_cap = max_tokens_cap

    def limits(
        self,
        prompt_lengths: Sequence[int],
        context_length: int,
        ask: OutputAsk,
        overflow: Overflow,
    ) -> list[int]:
        """Each prompt's output limit. Raises InvalidRequestError (see the module docstring)."""
        limits = []
        for index, prompt_tokens in enumerate(prompt_lengths):
            room = context_length - prompt_tokens
            limit = ask.tokens if ask.tokens is not None else room
            if ask.clamp and 0 < room < limit:
                limit = room
            if room <= 0 or limit > room:
                raise overflow(
                    PromptOverflow(index, prompt_tokens, limit, room, context_length, ask.field)
                )
            limits.append(limit)
        cap = self.max_tokens_cap
        if cap is None:
            return limits
        if ask.explicit and not ask.clamp and ask.tokens is not None and ask.tokens > cap:
            raise OutputLimitError(
                f"{ask.field} is {ask.tokens} but this server allows at most {cap} tokens"
                " per answer",
                param=ask.field,
            )
        return [min(limit, cap) for limit in limits]
