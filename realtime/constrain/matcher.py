"""Per-sequence matchers: the allowed tokens of the next step, advanced token by token.

`ConstraintCompiler` (one per engine, thread-safe) checks a `Constraint` once
and keeps the compiled grammar, keyed by its text, so an agent that sends the
same tools every turn compiles them once; `start()` then gives each sequence
its own matcher, a copy of the compiled one (microseconds).

A matcher's methods run on the engine's model thread (or exllamav2's filter
workers), never on the event loop: computing a mask costs tens of microseconds
and llguidance releases the GIL while it works.

The per-step protocol, for one sequence:

    matcher = compiler.start(constraint)
    while ...:
        logits = apply_allowed(logits, matcher.allowed())   # realtime.constrain.logits
        token = sample(logits)
        if not matcher.advance(token): fail the request with matcher.error
        if matcher.done: the answer is complete (the token was EOS)
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Protocol

import torch
from llguidance import LLMatcher, LLParserLimits

from realtime.constrain.errors import ConstraintError, engine_detail
from realtime.constrain.logits import pack_bitmask, unpack_bitmask
from realtime.constrain.spec import BannedTokens, Constraint, ConstraintLimits, GrammarSpec
from realtime.constrain.tokenizer import TokenizerBinding


class SequenceConstraint(Protocol):
    """What an engine drives for one constrained sequence."""

    @property
    def done(self) -> bool:
        """The answer is complete: EOS was accepted (nothing else ever will be)."""
        ...

    @property
    def error(self) -> str | None:
        """Why the matcher failed (a token it did not allow was fed), or None."""
        ...

    def allowed(self) -> torch.Tensor:
        """The ids allowed next: a bool tensor over the model's logits width."""
        ...

    def fill_bitmask(self, row: torch.Tensor) -> None:
        """Write the allowed ids into one contiguous int32 bitmask row (32 ids a word)."""
        ...

    def advance(self, token_id: int) -> bool:
        """Take the sampled token; False when it was not allowed (see `error`)."""
        ...

    def rollback(self, tokens: int) -> bool:
        """Undo the last `tokens` advances (speculative decoding); False if impossible."""
        ...


class GrammarMatcher:
    """One sequence under a grammar (an llguidance `LLMatcher`)."""

    __slots__ = ("_bits", "_done", "_eos", "_matcher", "_width", "description")

    def __init__(self, matcher: LLMatcher, binding: TokenizerBinding, description: str) -> None:
        self._matcher = matcher
        self._width = binding.width
        self._eos = binding.eos_token_ids
        self._bits = torch.zeros(binding.mask_words, dtype=torch.int32)
        self._done = False
        self.description = description

    @property
    def done(self) -> bool:
        return self._done

    @property
    def accepting(self) -> bool:
        """The answer so far is complete: EOS is allowed now."""
        return bool(self._matcher.is_accepting())

    @property
    def error(self) -> str | None:
        m = self._matcher
        return engine_detail(m.get_error()) if m.is_error() else None

    def fill_bitmask(self, row: torch.Tensor) -> None:
        _check_row(row, self._bits.numel())
        self._matcher.unsafe_compute_mask_ptr(row.data_ptr(), row.numel() * 4)

    def allowed(self) -> torch.Tensor:
        self.fill_bitmask(self._bits)
        return unpack_bitmask(self._bits, self._width)

    def advance(self, token_id: int) -> bool:
        token_id = int(token_id)
        if self._done:
            return token_id in self._eos
        ok = bool(self._matcher.consume_token(token_id))
        self._done = ok and token_id in self._eos
        return ok

    def rollback(self, tokens: int) -> bool:
        if tokens and self._done:
            self._done = False
        return bool(self._matcher.rollback(tokens))


class BannedTokenMatcher:
    """A fixed mask: every id allowed but the banned ones (`tool_choice: none`)."""

    __slots__ = ("_allowed", "_banned", "_bits")

    def __init__(self, banned: frozenset[int], binding: TokenizerBinding) -> None:
        allowed = torch.ones(binding.width, dtype=torch.bool)
        ids = [t for t in banned if 0 <= t < binding.width]
        allowed[ids] = False
        self._allowed = allowed
        self._banned = banned
        self._bits = pack_bitmask(allowed, binding.mask_words)

    @property
    def done(self) -> bool:
        return False

    @property
    def error(self) -> str | None:
        return None

    def allowed(self) -> torch.Tensor:
        return self._allowed

    def fill_bitmask(self, row: torch.Tensor) -> None:
        _check_row(row, self._bits.numel())
        row.copy_(self._bits)

    def advance(self, token_id: int) -> bool:
        return token_id not in self._banned

    def rollback(self, tokens: int) -> bool:
        return True


def _check_row(row: torch.Tensor, words: int) -> None:
    """The grammar engine writes through a raw pointer: the row must be exactly right."""
    if row.dtype != torch.int32 or row.dim() != 1 or not row.is_contiguous():
        raise ValueError("a bitmask row must be a contiguous 1-D int32 tensor")
    if row.numel() != words:
        raise ValueError(f"a bitmask row has {words} words (TokenizerBinding.mask_words)")


class ConstraintCompiler:
    """Checks and compiles constraints for one model; shared by all its sequences.

    Thread-safe. `check` is what the pipeline calls before it commits to an
    answer (off the event loop: a new grammar takes milliseconds to compile);
    `start` is what the engine calls when the sequence is added.
    """

    def __init__(self, binding: TokenizerBinding, limits: ConstraintLimits | None = None) -> None:
        self.binding = binding
        self.limits = limits or ConstraintLimits()
        self._lock = threading.Lock()
        self._compiled: OrderedDict[str, LLMatcher] = OrderedDict()
        self.compiles = 0  # grammars compiled (cache misses), for tests and metrics

    def _parser_limits(self) -> LLParserLimits:
        lim = self.limits
        return LLParserLimits(
            max_grammar_size=lim.max_grammar_size,
            initial_lexer_fuel=lim.initial_lexer_fuel,
            step_lexer_fuel=lim.step_lexer_fuel,
            step_max_items=lim.step_max_items,
            verbose_errors=False,
        )

    def check(self, constraint: Constraint) -> None:
        """Raise ConstraintError (naming the request field) unless it can be enforced."""
        if isinstance(constraint, GrammarSpec):
            self._prototype(constraint)

    def start(self, constraint: Constraint) -> SequenceConstraint:
        """A fresh matcher for one sequence (compiles on a cache miss)."""
        if isinstance(constraint, BannedTokens):
            return BannedTokenMatcher(constraint.token_ids, self.binding)
        matcher = self._prototype(constraint).deep_copy()
        return GrammarMatcher(matcher, self.binding, constraint.description)

    def _prototype(self, spec: GrammarSpec) -> LLMatcher:
        with self._lock:
            found = self._compiled.get(spec.grammar)
            if found is not None:
                self._compiled.move_to_end(spec.grammar)
                return found
        # Compiled outside the lock (llguidance releases the GIL): another thread
        # may compile the same grammar meanwhile, which only costs time.
        matcher = LLMatcher(
            self.binding.ll, spec.grammar, log_level=0, limits=self._parser_limits()
        )
        if matcher.is_error():
            raise ConstraintError(
                f"{spec.description} cannot be enforced: {engine_detail(matcher.get_error())}",
                param=spec.param,
            )
        with self._lock:
            self.compiles += 1
            self._compiled[spec.grammar] = matcher
            while len(self._compiled) > self.limits.cache_size:
                self._compiled.popitem(last=False)
        return matcher
