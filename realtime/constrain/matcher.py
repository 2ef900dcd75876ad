"""Per-sequence matchers: the allowed tokens of the next step, advanced token by token.

`ConstraintCompiler` (one per model, thread-safe) compiles a `Constraint` once
and keeps the compiled grammar, keyed by its text, so an agent that sends the
same tools every turn compiles them once. `compile()` returns a
`CompiledConstraint`, which is what an engine request carries: its `start()`
gives each sequence its own matcher, a copy of the compiled one (microseconds),
so nothing is ever compiled on an engine's thread.

A matcher's methods run on the cpu engine's mask workers (`next_mask.py`) or
exllamav2's filter workers, never on the event loop: computing a mask costs tens
of microseconds for an ordinary grammar (up to the step budget for a hostile
one), and llguidance releases the GIL while it works.

The per-step protocol, for one sequence:

    matcher = compiled.start()        # compiled = compiler.compile(constraint)
    while ...:
        logits = apply_allowed(logits, matcher.allowed())   # realtime.constrain.logits
        token = sample(logits)
        if not matcher.advance(token): fail the request with matcher.error
        if matcher.done: the answer is complete (the token was EOS)
"""

from __future__ import annotations

import ctypes
import threading
import weakref
from collections import OrderedDict
from typing import Protocol

import numpy as np
import numpy.typing as npt
import torch
from llguidance import LLExecutor, LLMatcher, LLParserLimits

from realtime.constrain.errors import ConstraintError, engine_detail, limit_detail
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

    def fill_bitmask_at(self, address: int, words: int) -> None:
        """`fill_bitmask` into raw memory: `words` int32 words at `address`, which the
        caller has checked (a `NextMask` writes its own row)."""
        ...

    def advance(self, token_id: int) -> bool:
        """Take the sampled token; False when it was not allowed (see `error`)."""
        ...

    def rollback(self, tokens: int) -> bool:
        """Undo the last `tokens` advances (speculative decoding); False if impossible."""
        ...


class DetachedConsumer:
    """Takes a token into a matcher with the GIL released.

    llguidance's `LLMatcher.consume_token` keeps the GIL while it works (measured:
    60 ms for one token of an object of 1,500 optional properties, every Python
    thread stalled meanwhile); `LLExecutor.consume_token_par` releases it, but
    only for two matchers or more. So the token goes to the real matcher and to a
    throwaway partner (a copy of a matcher that accepts anything, a microsecond).
    """

    _by_binding: weakref.WeakKeyDictionary[TokenizerBinding, DetachedConsumer] = (
        weakref.WeakKeyDictionary()
    )
    _lock = threading.Lock()

    def __init__(self, binding: TokenizerBinding) -> None:
        self._executor = LLExecutor(1)
        self._partner = LLMatcher(binding.ll, LLMatcher.grammar_from_regex(r"(?s:.*)"), log_level=0)

    @classmethod
    def for_binding(cls, binding: TokenizerBinding) -> DetachedConsumer:
        """One per tokenizer binding (its executor's thread is shared)."""
        with cls._lock:
            found = cls._by_binding.get(binding)
            if found is None:
                found = cls._by_binding[binding] = cls(binding)
            return found

    def consume(self, matcher: LLMatcher, token_id: int) -> bool:
        partner = self._partner.deep_copy()
        return bool(self._executor.consume_token_par([(matcher, token_id), (partner, token_id)])[0])


class GrammarMatcher:
    """One sequence under a grammar (an llguidance `LLMatcher`)."""

    __slots__ = ("_bits", "_consumer", "_done", "_eos", "_matcher", "_width", "description")

    def __init__(
        self,
        matcher: LLMatcher,
        binding: TokenizerBinding,
        description: str,
        consumer: DetachedConsumer | None = None,
    ) -> None:
        self._matcher = matcher
        self._consumer = consumer or DetachedConsumer.for_binding(binding)
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
        return limit_detail(engine_detail(m.get_error())) if m.is_error() else None

    def fill_bitmask(self, row: torch.Tensor) -> None:
        _check_row(row, self._bits.numel())
        self._matcher.unsafe_compute_mask_ptr(row.data_ptr(), row.numel() * 4)

    def fill_bitmask_at(self, address: int, words: int) -> None:
        self._matcher.unsafe_compute_mask_ptr(address, words * 4)

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

    def advance_releasing_gil(self, token_id: int) -> bool:
        """`advance`, with the GIL released while the grammar engine works: for a
        worker thread, where a costly token (up to the step budget: tens of ms)
        must not stall the event loop and the engine's thread meanwhile."""
        token_id = int(token_id)
        if self._done:
            return token_id in self._eos
        ok = self._consumer.consume(self._matcher, token_id)
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

    def fill_bitmask_at(self, address: int, words: int) -> None:
        ctypes.memmove(address, self._bits.data_ptr(), words * 4)

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


class CompiledConstraint:
    """A constraint checked and compiled for one model: what an engine request carries.

    `start()` gives one sequence its own matcher, on whatever thread runs the
    sequence; it never compiles (the compiled grammar is held here, whatever
    the compiler's cache has evicted since).
    """

    __slots__ = ("_banned", "_prototype", "binding", "description", "param", "spec")

    def __init__(
        self,
        binding: TokenizerBinding,
        *,
        description: str,
        param: str,
        prototype: LLMatcher | None = None,
        banned: frozenset[int] | None = None,
        spec: Constraint | None = None,
    ) -> None:
        if (prototype is None) == (banned is None):
            raise ValueError("a compiled constraint is a grammar or a set of banned ids")
        self.binding = binding
        self.description = description
        #: The request field it came from (`response_format`, `tools`, `tool_choice`).
        self.param = param
        self._prototype = prototype
        self._banned = banned
        #: What it was compiled from: plain data, so the constraint can cross to an engine
        #: in another process, which compiles it again there (its own cache).
        self.spec = spec

    @property
    def ends_answer(self) -> bool:
        """True for a grammar: it decides when the answer is complete (EOS is its last
        token, even under `ignore_eos`); a ban never ends anything."""
        return self._prototype is not None

    def start(self) -> SequenceConstraint:
        """A fresh matcher for one sequence."""
        if self._banned is not None:
            return BannedTokenMatcher(self._banned, self.binding)
        assert self._prototype is not None
        return GrammarMatcher(self._prototype.deep_copy(), self.binding, self.description)


class ConstraintCompiler:
    """Checks and compiles constraints for one model; shared by all its sequences.

    Thread-safe. `compile` is what the pipeline calls before it commits to an
    answer (off the event loop: a new grammar takes milliseconds to compile);
    the engine starts each sequence's matcher from the `CompiledConstraint`.

    A grammar is compiled under its spec's limits (`GrammarSpec.limits`: the
    grammar engine's own bounds on compile size and time, and on each step's
    work), and proven usable before it is kept: its first mask, and the tokens the
    grammar forces from there, are computed with those limits. A grammar that
    fails them is refused now, as its request's 400, not in the middle of an answer.
    """

    def __init__(self, binding: TokenizerBinding, limits: ConstraintLimits | None = None) -> None:
        self.binding = binding
        self.limits = limits or ConstraintLimits()
        self._lock = threading.Lock()
        self._compiled: OrderedDict[tuple[str, ConstraintLimits], LLMatcher] = OrderedDict()
        self._consumer = DetachedConsumer.for_binding(binding)
        self.compiles = 0  # grammars compiled (cache misses), for tests and metrics

    def compile(self, constraint: Constraint) -> CompiledConstraint:
        """The constraint compiled for this model (from the cache when it was seen);
        ConstraintError (naming the request field) when it cannot be enforced."""
        found = self.cached(constraint)
        if found is not None:
            return found
        assert isinstance(constraint, GrammarSpec)  # a ban is never a cache miss
        return self._grammar(constraint, self._prototype(constraint))

    def cached(self, constraint: Constraint) -> CompiledConstraint | None:
        """The compiled constraint when nothing needs compiling (a ban, a cached
        grammar), else None: the caller can skip the trip to a worker thread."""
        if isinstance(constraint, BannedTokens):
            return CompiledConstraint(
                self.binding,
                description=constraint.description,
                param=constraint.param,
                banned=constraint.token_ids,
                spec=constraint,
            )
        key = (constraint.grammar, constraint.limits)
        with self._lock:
            found = self._compiled.get(key)
            if found is None:
                return None
            self._compiled.move_to_end(key)
        return self._grammar(constraint, found)

    def check(self, constraint: Constraint) -> None:
        """Raise ConstraintError (naming the request field) unless it can be enforced."""
        self.compile(constraint)

    def start(self, constraint: Constraint) -> SequenceConstraint:
        """A fresh matcher for one sequence (compiles on a cache miss)."""
        return self.compile(constraint).start()

    def _grammar(self, spec: GrammarSpec, prototype: LLMatcher) -> CompiledConstraint:
        return CompiledConstraint(
            self.binding,
            description=spec.description,
            param=spec.param,
            prototype=prototype,
            spec=spec,
        )

    def _prototype(self, spec: GrammarSpec) -> LLMatcher:
        key = (spec.grammar, spec.limits)
        with self._lock:
            found = self._compiled.get(key)
            if found is not None:
                self._compiled.move_to_end(key)
                return found
        # Compiled outside the lock (llguidance releases the GIL): another thread
        # may compile the same grammar meanwhile, which only costs time.
        matcher = LLMatcher(
            self.binding.ll, spec.grammar, log_level=0, limits=parser_limits(spec.limits)
        )
        if matcher.is_error():
            raise self._refusal(spec, matcher)
        # The first mask, here on the compiling thread: a grammar that cannot even
        # start an answer (a `$ref` to itself) fails now; and the lexer states it
        # builds serve every sequence's copy.
        matcher.compute_bitmask()
        if matcher.is_error():
            raise self._refusal(spec, matcher, "no answer can start")
        self._probe(spec, matcher)
        with self._lock:
            self.compiles += 1
            self._compiled[key] = matcher
            while len(self._compiled) > self.limits.cache_size:
                self._compiled.popitem(last=False)
        return matcher

    def _probe(self, spec: GrammarSpec, prototype: LLMatcher) -> None:
        """Walk, on copies, the first tokens of every answer while they are few: the
        tokens the grammar forces (`{"name": "` of a single tool's call, `{"a": {"a":
        ...` of a schema that nests itself) and the few ways to write them (`{` or
        `{"`), computing each next mask. With the real limits, each step must fit its
        budget, or the grammar is refused now.

        At most `PROBE_STEPS` masks (each bounded by the step budget); masks are
        computed, and tokens taken, with the GIL released."""
        words = self.binding.mask_words
        bits = np.empty(words, dtype=np.int32)
        eos = self.binding.eos_token_ids
        pending = [prototype.deep_copy()]
        for _ in range(PROBE_STEPS):
            if not pending:
                return
            probe = pending.pop()
            probe.unsafe_compute_mask_ptr(bits.ctypes.data, words * 4)
            if probe.is_error():
                raise self._refusal(spec, probe, "the grammar fails on its first tokens")
            tokens = _few_tokens(bits, PROBE_BRANCHING)
            for token in [t for t in tokens if t not in eos]:
                branch = probe.deep_copy()
                if not self._consumer.consume(branch, token) or branch.is_error():
                    raise self._refusal(spec, branch, "the grammar fails on its first tokens")
                pending.append(branch)

    @staticmethod
    def _refusal(spec: GrammarSpec, matcher: LLMatcher, when: str | None = None) -> ConstraintError:
        detail = limit_detail(engine_detail(matcher.get_error()))
        where = f"{when} ({detail})" if when else detail
        return ConstraintError(f"{spec.description} cannot be enforced: {where}", param=spec.param)


#: Masks computed on trial when a grammar is compiled (see `_probe`), and the most
#: tokens a step may allow for the trial to go on through each of them.
PROBE_STEPS = 16
PROBE_BRANCHING = 4


def parser_limits(limits: ConstraintLimits) -> LLParserLimits:
    """llguidance's limits, from ours."""
    return LLParserLimits(
        max_grammar_size=limits.max_grammar_size,
        initial_lexer_fuel=limits.initial_lexer_fuel,
        step_lexer_fuel=limits.step_lexer_fuel,
        step_max_items=limits.step_max_items,
        max_items_in_row=limits.max_items_in_row,
        max_lexer_states=limits.max_lexer_states,
        verbose_errors=False,
    )


def _few_tokens(bits: npt.NDArray[np.int32], most: int) -> list[int]:
    """The ids a bitmask allows when they are at most `most`, else none."""
    words = np.flatnonzero(bits)
    if len(words) > most:
        return []
    ids = [
        int(w) * 32 + bit
        for w in words
        for bit in range(32)
        if (int(bits[w]) & 0xFFFFFFFF) >> bit & 1
    ]
    return ids if len(ids) <= most else []
