"""The CPU engine's model half: jobs, the running batch, stop conditions and KV reuse.

Everything here runs on the engine thread (see `threaded.py`), which owns the model
and every KV tensor, so nothing needs a lock.

Continuous batching. Client requests (normal priority) join a running batch between
steps, up to `max_batch_size` sequences, and leave it as soon as they finish or are
cancelled; the rest wait, in arrival order, for a place. Each `step()` is one forward
pass (`runner.py`), one of two kinds:

- a *decode* pass feeds every decoding sequence of the batch its last token, in one
  forward pass, and samples each one's next token;
- a *prefill* pass feeds newcomers the next chunk of their prompts: sequences taken in
  turn, left-padded to the longest chunk, at most `prefill_chunk_tokens` tokens in all
  (padding included).

While both kinds have work they alternate, so a newcomer's prefill delays the running
decodes by at most one chunk's pass, and every output of a pass is handed to the event
loop before the next pass starts. Each sequence keeps its own sampling parameters,
generator (seed), stop conditions, logprobs and cancel; a cancel is applied between
passes, so it costs at most the pass already running. A sequence whose reader lags is
*paused* (`pause`/`resume`, driven by the core's bounded output queues): it keeps its
KV and its place but is left out of decode passes until its reader catches up.

Background priority (speculative warm-ups) never shares a pass with client requests:
its jobs run one sequence per pass, in `background_chunk_tokens` chunks, taking turns,
and only while no client request can run. A client request arriving mid-warm-up waits
for at most the warm-up chunk already running.

Constrained sequences (`EngineRequest.constraint`: a JSON schema, enforced tool calls,
banned tool markers) each get their own matcher when they are added. After every pass
their rows of the logits are masked in one go (disallowed ids at -inf) before any
other sampling step, the ban of EOS before `min_tokens` is dropped where it would
leave no token (a complete answer allows only EOS), and each sampled token goes to
its matcher. A grammar that has taken EOS ends the answer (`eos`, even under
`ignore_eos`); `max_tokens` cuts it off like any other (`length`, the partial text);
a grammar that fails (a limit of its step budget) fails the request, as the
request's fault (`RequestPart.CONSTRAINT`). Unconstrained rows of the same pass are
left exactly as they were.

A grammar's work for one token (taking the sampled token, then the next mask) is
bounded by its step budget, but that can be far longer than a forward pass, so it
never runs on this thread: it goes to the mask workers (`constrain/next_mask.py`)
as soon as the token is sampled, and runs while the next forward pass does. A
sequence whose mask is not ready when its logits are is *parked*: its logits row is
kept, it is left out of passes, and it samples as soon as its mask is ready (at the
start of a later step). A costly grammar therefore delays only its own sequence.

Batched and alone. A batched pass computes a sequence's logits with other rows in the
same matrix products, so they can differ from a lone run's in the last float bits; a
greedy token changes only where the two best logits are that close (a near tie), and
a seeded request keeps its own generator and one draw per token either way. Models
whose layers are not all plain full attention, or whose batched passes do not match
single ones when the engine starts (`verify_batching`), run one sequence per pass;
`max_batch_size=1` asks for that too.

KV reuse: when a job ends (finished or cancelled), its KV state and the token ids it
covers (the prompt and every generated token but the last, which was never fed) go
into a `PrefixCache`; a new job starts from the longest stored prefix of its prompt
(copied into its batch row when it joins the batch) and computes the rest. At least
the last prompt token is always computed, because its logits choose the first output
token. A job that arrives while a lower-priority job has already computed more of its
prompt than the cache holds (its own next turn being warmed up) takes that work over:
the warm-up ends (`CANCELLED`) and leaves its KV in the cache first.

Isolation: entries are keyed by `(cache_salt, session_id)` when `cache_scope` is
"session" (the default: a session only reuses its own work, and requests without a
session only reuse those of other requests without one) and by `(cache_salt, None)`
when it is "salt" (every request with the same salt shares, across sessions). Sharing
saves the prefill of common system prompts across users, but the time to first token
then tells one user whether another recently sent a prompt that begins the same way (a
timing side channel), which is why it is opt-in. In both scopes a session's newest
entry is kept from eviction while anything else can go. Batching shares forward
passes, never KV: every row attends to its own columns only.
"""

from __future__ import annotations

import logging
import queue
from collections import OrderedDict, deque
from collections.abc import Hashable
from concurrent.futures import FIRST_COMPLETED, wait
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from transformers import DynamicCache
from transformers.cache_utils import DynamicLayer

from realtime.constrain.logits import unpack_rows, usable_bans
from realtime.constrain.matcher import SequenceConstraint
from realtime.constrain.next_mask import MaskWorkers, NextMask, mask_threads
from realtime.engine.base import NORMAL_PRIORITY, EngineOutput, EngineRequest
from realtime.engine.cpu.batch_cache import KVState
from realtime.engine.cpu.runner import BatchRunner, Feed, Runner, SoloRunner, verify_batching
from realtime.engine.cpu.sampling import SequenceSampler, sample_batch
from realtime.engine.cpu.stats import CpuStats, RequestStats
from realtime.engine.errors import RequestPart
from realtime.engine.prefix_cache import PrefixCache, common_prefix_length
from realtime.model.generation import FinishReason

__all__ = [
    "CACHE_SCOPES",
    "KV_BLOCK_TOKENS",
    "BackendOptions",
    "CpuBackend",
    "CpuStats",
    "KVState",
    "RequestStats",
]

log = logging.getLogger("realtime.engine.cpu")

#: Ended sessions remembered, so a late cancel does not re-protect their entries.
ENDED_SESSIONS_KEPT = 4096
#: `cache_scope` values: who may reuse whose KV (see the module docs).
CACHE_SCOPES = ("session", "salt")
#: No banned ids (shared, so a pass builds no empty sets).
_NOTHING: frozenset[int] = frozenset()
#: Sequences decoded together by default.
DEFAULT_MAX_BATCH_SIZE = 32
#: The longest the engine thread waits for a parked sequence's mask when nothing else
#: can run, before it looks at its commands again (a new request, a cancel).
PARKED_POLL_SECONDS = 0.002
#: The unit the engine reports its KV cache in (`CpuEngine.snapshot`). It allocates per
#: token; 16 tokens is vLLM's default block size, so tools that hash prompts in blocks of
#: the reported size (the endpoint picker's prefix scorer) work on it as on vLLM.
KV_BLOCK_TOKENS = 16


@dataclass(frozen=True)
class BackendOptions:
    context_length: int
    eos_token_ids: frozenset[int]
    max_cache_tokens: int
    prefill_chunk_tokens: int
    #: "session" or "salt": the prefix cache's isolation key (see the module docs)
    cache_scope: str = "session"
    #: prefill chunk of background jobs; smaller = less wait for a request arriving mid-chunk
    background_chunk_tokens: int | None = None
    #: client sequences in the running batch; 1 = one sequence per forward pass
    max_batch_size: int = DEFAULT_MAX_BATCH_SIZE


class _Job:
    """One request on the engine thread: its tokens, KV and sampling state."""

    __slots__ = (
        "arrival",
        "attached",
        "computed",
        "generated",
        "job_id",
        "key",
        "mask",
        "matcher",
        "max_tokens",
        "min_tokens",
        "parked",
        "paused",
        "prompt_len",
        "request",
        "runner",
        "sampler",
        "stats",
        "suppressed",
        "tokens",
        "unsent_cached",
    )

    def __init__(
        self,
        job_id: int,
        request: EngineRequest,
        sampler: SequenceSampler,
        key: Hashable,
        runner: Runner,
    ):
        self.job_id = job_id
        self.request = request
        self.sampler = sampler
        #: the prefix cache's isolation key for this job's lookups and inserts
        self.key = key
        #: what runs its forward passes (and holds its KV once `attached`)
        self.runner = runner
        self.attached = False
        #: left out of decode passes while its reader lags
        self.paused = False
        #: the engine's forward-pass count when the job arrived (for `steps_waited`)
        self.arrival = 0
        self.tokens = list(request.prompt_token_ids)  # prompt, then generated ids
        self.prompt_len = len(self.tokens)
        self.computed = 0  # leading tokens whose KV the runner holds
        self.generated = 0
        #: ids that end the request (EOS unless ignore_eos, stop ids): banned before min_tokens
        self.suppressed: frozenset[int] = frozenset()
        self.min_tokens = request.stop.min_tokens
        self.max_tokens = request.stop.max_tokens
        #: the constraint's per-sequence matcher, when the request has one
        self.matcher: SequenceConstraint | None = None
        #: its next mask, computed off this thread (see the module docs)
        self.mask: NextMask | None = None
        #: the logits of a token that waits for its mask (the job is parked meanwhile)
        self.parked: torch.Tensor | None = None
        self.stats = RequestStats()
        #: `cached_tokens` for the first output; None once sent
        self.unsent_cached: int | None = 0

    @property
    def prefilling(self) -> bool:
        return self.computed < self.prompt_len

    @property
    def background(self) -> bool:
        return self.request.priority > NORMAL_PRIORITY


class CpuBackend:
    """A `StepBackend` (and `PausableBackend`) over a transformers causal LM."""

    def __init__(self, model: Any, options: BackendOptions, stats: CpuStats):
        if options.cache_scope not in CACHE_SCOPES:
            raise ValueError(f"cache_scope must be one of {CACHE_SCOPES}")
        if options.max_batch_size < 1:
            raise ValueError(f"max_batch_size must be at least 1, got {options.max_batch_size}")
        self.model = model
        self.options = options
        self.stats = stats
        self.vocab_size = int(model.get_output_embeddings().weight.shape[0])
        self._jobs: dict[int, _Job] = {}
        #: KV blocks (`KV_BLOCK_TOKENS`) held by the client jobs in the batch, counted
        #: after every step and cancel; read from the event loop by `snapshot()`
        self.held_blocks = 0
        #: client jobs waiting for a place in the batch, in arrival order
        self._waiting: deque[int] = deque()
        #: client jobs in the batch, in the order they joined
        self._batch: list[int] = []
        #: background priority -> job ids taking turns at that priority
        self._background: dict[int, deque[int]] = {}
        #: final outputs of preempted jobs, delivered with the next step
        self._pending: list[tuple[int, EngineOutput]] = []
        #: the last pass was a prefill (decode and prefill passes alternate)
        self._prefilled_last = False
        #: jobs holding logits until their mask is ready, and who computes masks
        self._parked: dict[int, _Job] = {}
        self._mask_workers = MaskWorkers(mask_threads(torch.get_num_threads()))
        #: which prefilling job goes first in the next prefill pass
        self._prefill_turn = 0
        #: session ids ended from the event loop (`CpuEngine.end_session`), not yet applied
        self.ended_sessions: queue.SimpleQueue[str] = queue.SimpleQueue()
        self._ended: OrderedDict[str, None] = OrderedDict()
        self._model_config = model.config
        self._reusable = self._plain_attention_cache()
        budget = options.max_cache_tokens if self._reusable else 0
        self.prefixes: PrefixCache[KVState] = PrefixCache(budget, _trim_state)
        self._solo = SoloRunner(self._model_config)
        self._runner: Runner = self._solo
        if self._reusable and options.max_batch_size > 1:
            batch = BatchRunner(
                self._model_config,
                dtype=next(model.parameters()).dtype,
                max_rows=options.max_batch_size,
                max_length=options.context_length,
            )
            if verify_batching(model, batch, self._solo, self.vocab_size):
                self._runner = batch
        stats.batching = self._runner.batched

    def _plain_attention_cache(self) -> bool:
        """KV slicing by position (and batching by rows) needs every layer to keep every
        position; sliding-window and recurrent layers do not."""
        layers = DynamicCache(config=self._model_config).layers
        plain = all(type(layer) is DynamicLayer for layer in layers)
        if not plain:
            log.warning(
                "this model's cache is not plain attention; prefix reuse and batching are off"
            )
        return plain

    # --- what the engine reports (read from the event loop: lengths, read whole) ---

    @property
    def running(self) -> int:
        """Client jobs in the batch (paused ones included: they keep their place)."""
        return len(self._batch)

    @property
    def waiting(self) -> int:
        """Client jobs waiting for a place in the batch."""
        return len(self._waiting)

    @property
    def batch_blocks(self) -> int | None:
        """KV blocks the batch may hold: a row of the context's length for each place in
        it; None when every sequence runs alone with a cache of its own (no bound)."""
        if not self._runner.batched:
            return None
        row = -(-self.options.context_length // KV_BLOCK_TOKENS)
        return self.options.max_batch_size * row

    def _count_held(self) -> None:
        jobs = self._jobs
        self.held_blocks = sum(-(-jobs[j].computed // KV_BLOCK_TOKENS) for j in self._batch)

    @property
    def reuses_prefixes(self) -> bool:
        return self.prefixes.max_tokens > 0

    # --- StepBackend ---

    def add(self, job_id: int, request: EngineRequest) -> None:
        prompt = request.prompt_token_ids
        limit = self.options.context_length
        if not prompt:
            raise ValueError("the prompt is empty")
        if len(prompt) >= limit:
            raise ValueError(f"the prompt is {len(prompt)} tokens; the context is {limit}")
        if min(prompt) < 0 or max(prompt) >= self.vocab_size:
            raise ValueError(f"prompt token ids must be in 0..{self.vocab_size - 1}")
        max_tokens = request.stop.max_tokens
        if max_tokens is not None and max_tokens < 1:
            raise ValueError("max_tokens must be at least 1")
        sampler = SequenceSampler(
            request.sampling,
            vocab_size=self.vocab_size,
            prompt_token_ids=prompt,
            logprobs=request.logprobs,
        )
        self._apply_ended_sessions()
        background = request.priority > NORMAL_PRIORITY
        runner = self._solo if background else self._runner
        job = _Job(job_id, request, sampler, self._key(request), runner)
        constraint = request.constraint
        if constraint is not None:
            if constraint.binding.width != self.vocab_size:
                raise ValueError(
                    f"the constraint was compiled for {constraint.binding.width} token ids; "
                    f"this model has {self.vocab_size}"
                )
            job.matcher = constraint.start()
            job.mask = NextMask(job.matcher, constraint.binding.mask_words, self._mask_workers)
            job.mask.after(None)  # the first mask, while the prompt is computed
        ends = set(request.stop.stop_token_ids)
        if not request.stop.ignore_eos:
            ends |= self.options.eos_token_ids
        job.suppressed = frozenset(ends)
        self._take_over(job)
        self._jobs[job_id] = job
        job.arrival = self.stats.forward_passes
        self.stats.requests_started += 1
        job.stats = self.stats.track(request.request_id)
        job.stats.prompt_tokens = job.prompt_len
        job.stats.priority = request.priority
        if background:
            self._attach(job)
            self._background.setdefault(request.priority, deque()).append(job_id)
        else:
            self._waiting.append(job_id)

    def cancel(self, job_id: int) -> None:
        job = self._jobs.pop(job_id, None)
        if job is None:
            return
        self._dequeue(job)
        job.stats.cancelled = True
        self.stats.requests_cancelled += 1
        self._keep_prefix(job)
        self._count_held()

    def pause(self, job_id: int) -> None:
        job = self._jobs.get(job_id)
        if job is not None and not job.paused:
            job.paused = True
            job.stats.paused += 1
            self.stats.requests_paused += 1

    def resume(self, job_id: int) -> None:
        job = self._jobs.get(job_id)
        if job is not None:
            job.paused = False

    def has_work(self) -> bool:
        if self._pending or any(self._background.values()):
            return True
        if self._waiting and self._runner.has_room():
            return True
        if any(not job.paused for job in self._parked.values()):
            return True
        return any(not self._jobs[j].paused for j in self._batch)

    def step(self) -> list[tuple[int, EngineOutput]]:
        outputs, self._pending = self._pending, []
        outputs += self._sample_parked()
        self._admit()
        prefill = self._prefill_feeds()
        decode = [
            job
            for j in self._batch
            if not (job := self._jobs[j]).prefilling and not job.paused and job.parked is None
        ]
        if prefill and not (decode and self._prefilled_last):
            self._prefilled_last = True
            outputs += self._run(self._runner, prefill)
        elif decode:
            self._prefilled_last = False
            feeds = [(job, Feed(job.job_id, [job.tokens[-1]], job.computed)) for job in decode]
            outputs += self._run(self._runner, feeds)
        else:
            warm = self._next_background()
            if warm is not None and warm.parked is None:
                chunk = self.options.background_chunk_tokens or self.options.prefill_chunk_tokens
                end = min(len(warm.tokens), warm.computed + chunk)
                feed = Feed(warm.job_id, warm.tokens[warm.computed : end], warm.computed)
                outputs += self._run(self._solo, [(warm, feed)])
            elif self._parked:
                # Only sequences waiting for their grammar: wait a little for one of them.
                self._wait_parked()
        self._count_held()
        return outputs

    def recover(self) -> None:
        """A failed forward may leave a job's KV half-updated: start clean."""
        self._jobs.clear()
        self._waiting.clear()
        self._batch.clear()
        self._background.clear()
        self._pending.clear()
        self._parked.clear()
        self._runner.clear()
        self._solo.clear()
        self.prefixes.clear()
        self._sync_cache_stats()
        self.held_blocks = 0

    def close(self) -> None:
        self.recover()
        self._mask_workers.close()
        self.model = None

    # --- scheduling ---

    def _admit(self) -> None:
        """Waiting client jobs join the batch while it has room."""
        while self._waiting and self._runner.has_room():
            job = self._jobs[self._waiting.popleft()]
            self._attach(job)
            self._batch.append(job.job_id)

    def _prefill_feeds(self) -> list[tuple[_Job, Feed]]:
        """Prompt chunks for one prefill pass: jobs in turn, at most the chunk budget of
        tokens once left-padded to the longest chunk (the first job sets that width)."""
        prefilling = [job for j in self._batch if (job := self._jobs[j]).prefilling]
        if not prefilling:
            return []
        budget = self.options.prefill_chunk_tokens
        first = self._prefill_turn % len(prefilling)
        self._prefill_turn = first + 1
        feeds: list[tuple[_Job, Feed]] = []
        width = 0
        for job in prefilling[first:] + prefilling[:first]:
            remaining = job.prompt_len - job.computed
            take = min(remaining, budget) if not feeds else min(remaining, width)
            if feeds and (len(feeds) + 1) * width > budget:
                break
            width = max(width, take)
            end = job.computed + take
            feeds.append((job, Feed(job.job_id, job.tokens[job.computed : end], job.computed)))
        return feeds

    def _next_background(self) -> _Job | None:
        """The next background job of the most urgent priority present, rotated."""
        for priority in sorted(self._background):
            turn = self._background[priority]
            if turn:
                job_id = turn.popleft()
                turn.append(job_id)
                return self._jobs[job_id]
        return None

    def _dequeue(self, job: _Job) -> None:
        job_id = job.job_id
        self._parked.pop(job_id, None)
        if job.background:
            turn = self._background.get(job.request.priority)
            if turn is not None:
                turn.remove(job_id)
                if not turn:
                    del self._background[job.request.priority]
        elif job.attached:
            self._batch.remove(job_id)
        else:
            self._waiting.remove(job_id)

    def _take_over(self, job: _Job) -> None:
        """End the less urgent job that computed the most of this prompt, if that beats the
        cache, and leave its KV in the cache for `_attach` to find.

        This is how a conversation's next turn, arriving while its speculative warm-up
        is still prefilling, gets that work instead of waiting for it or redoing it.
        """
        limit = job.prompt_len - 1
        best: tuple[int, _Job] | None = None
        for other in self._jobs.values():
            if other.request.priority <= job.request.priority or other.key != job.key:
                continue
            shared = min(common_prefix_length(other.tokens[: other.computed], job.tokens), limit)
            if shared > 0 and (best is None or shared > best[0]):
                best = (shared, other)
        if best is None:
            return
        cached = self.prefixes.lookup(job.key, job.tokens, limit=limit)
        if cached is not None and cached.length >= best[0]:
            return
        other = best[1]
        del self._jobs[other.job_id]
        self._dequeue(other)
        other.stats.preempted = True
        self.stats.requests_preempted += 1
        self._keep_prefix(other)
        ended = EngineOutput(
            [], finish_reason=FinishReason.CANCELLED, cached_tokens=other.unsent_cached
        )
        self._pending.append((other.job_id, ended))

    # --- the model ---

    def _run(
        self, runner: Runner, batch: list[tuple[_Job, Feed]]
    ) -> list[tuple[int, EngineOutput]]:
        """One forward pass (or, unbatched, one per feed) and the tokens it chose.

        Runs once per pass for every sequence in it, so it avoids per-row calls where
        plain arithmetic will do."""
        stats = self.stats
        size = len(batch)
        before = stats.forward_passes
        logits = runner.forward(self.model, [feed for _, feed in batch])
        stats.forward_passes = before + (1 if runner.batched else size)
        stats.rows_forwarded += size
        if size > stats.largest_batch:
            stats.largest_batch = size
        recent = stats.recent_forwards
        rows: list[int] = []
        ready: list[_Job] = []
        for row, (job, feed) in enumerate(batch):
            fed = len(feed.tokens)
            counters = job.stats
            if counters.steps_waited is None:
                counters.steps_waited = before - job.arrival
            computed = job.computed
            if computed < job.prompt_len:
                prompt_part = min(fed, job.prompt_len - computed)
                counters.prefill_computed += prompt_part
                stats.prefill_tokens_computed += prompt_part
            computed += fed
            job.computed = computed
            counters.forward_passes += 1
            if size > counters.largest_batch:
                counters.largest_batch = size
            if job.background:
                stats.background_forward_passes += 1
            recent.append((job.request.request_id, fed))
            if computed == len(job.tokens):  # not mid-prompt: a token is due
                rows.append(row)
                ready.append(job)
        if not ready:
            return []
        row_logits = logits[rows] if len(rows) < size else logits
        if any(job.mask is not None and not job.mask.ready for job in ready):
            # Their grammar is still working on the mask: keep their logits, sample the rest.
            kept = []
            for k, job in enumerate(ready):
                if job.mask is not None and not job.mask.ready:
                    job.parked = row_logits[k].clone()
                    self._parked[job.job_id] = job
                    stats.tokens_parked += 1
                else:
                    kept.append(k)
            if not kept:
                return []
            ready = [ready[k] for k in kept]
            row_logits = row_logits[kept]
        return self._sample(ready, row_logits)

    def _sample(
        self, ready: list[_Job], row_logits: torch.Tensor
    ) -> list[tuple[int, EngineOutput]]:
        """Each job's next token from its row of `row_logits` ([len(ready), vocab]), masked
        by its constraint (whose mask is ready), and the outputs."""
        banned = [job.suppressed if job.generated < job.min_tokens else _NOTHING for job in ready]
        failures: dict[int, str] = {}
        if any(job.mask is not None for job in ready):
            row_logits, failures = _constrain(row_logits, ready, banned)
        chosen = sample_batch([job.sampler for job in ready], row_logits, banned)
        outputs = []
        for index, (job, sampled) in enumerate(zip(ready, chosen, strict=True)):
            output = self._next_token(job, sampled.token_id, sampled.logprob, failures.get(index))
            if output.finish_reason is not None:
                self._finish(job, output.finish_reason)
            elif job.mask is not None:
                job.mask.after(sampled.token_id)  # the next mask, during the next pass
            outputs.append((job.job_id, output))
        self.stats.tokens_generated += len(ready)
        return outputs

    def _sample_parked(self) -> list[tuple[int, EngineOutput]]:
        """Sample the parked jobs whose mask is now ready (and whose reader keeps up)."""
        if not self._parked:
            return []
        ready = [
            job
            for job in self._parked.values()
            if not job.paused and job.mask is not None and job.mask.ready
        ]
        if not ready:
            return []
        logits = []
        for job in ready:
            del self._parked[job.job_id]
            assert job.parked is not None
            logits.append(job.parked)
            job.parked = None
        return self._sample(ready, torch.stack(logits))

    def _wait_parked(self) -> None:
        """Block for at most `PARKED_POLL_SECONDS` until a parked job's mask is ready."""
        futures = [
            future
            for job in self._parked.values()
            if job.mask is not None and (future := job.mask.future) is not None
        ]
        if futures:
            wait(futures, timeout=PARKED_POLL_SECONDS, return_when=FIRST_COMPLETED)

    def _next_token(
        self, job: _Job, token: int, logprob: Any, failure: str | None = None
    ) -> EngineOutput:
        stop = job.request.stop
        tokens = job.tokens
        tokens.append(token)
        job.generated += 1
        job.stats.tokens_generated += 1
        if failure is not None:
            # The grammar failed (its step budget, most likely): the token drawn from
            # nothing but EOS is not shown, and the request fails, as its own fault.
            job.unsent_cached = None
            error = f"constrained decoding failed: {failure}"
            return EngineOutput(
                [], finish_reason=FinishReason.ERROR, error=error, error_part=RequestPart.CONSTRAINT
            )
        constraint = job.request.constraint
        reason: FinishReason | None = None
        on_token = False
        if token in job.suppressed:  # EOS (unless ignored) or a stop id
            on_token = True
            reason = FinishReason.STOP if token in stop.stop_token_ids else FinishReason.EOS
        elif (
            constraint is not None
            and constraint.ends_answer
            and token in constraint.binding.eos_token_ids
        ):
            # The grammar allowed EOS (its answer is complete), and EOS was drawn: the
            # answer ends, even under ignore_eos.
            on_token = True
            reason = FinishReason.EOS
        elif (job.max_tokens is not None and job.generated >= job.max_tokens) or len(
            tokens
        ) >= self.options.context_length:
            reason = FinishReason.LENGTH
        cached, job.unsent_cached = job.unsent_cached, None
        return EngineOutput(
            [token],
            [logprob] if logprob is not None else None,
            reason,
            cached_tokens=cached,
            stopped_on_token=on_token,
        )

    def _finish(self, job: _Job, reason: FinishReason) -> None:
        del self._jobs[job.job_id]
        self._dequeue(job)
        job.stats.finish_reason = reason.value
        self.stats.requests_finished += 1
        self._keep_prefix(job)

    # --- prefix reuse ---

    def _key(self, request: EngineRequest) -> Hashable:
        """The prefix cache's isolation key: the salt, and the session when scoped by it."""
        session = request.session_id if self.options.cache_scope == "session" else None
        return (request.cache_salt, session)

    def _attach(self, job: _Job) -> None:
        """Give the job its KV: the longest cached prefix of its prompt, or nothing."""
        match = self.prefixes.lookup(job.key, job.tokens, limit=job.prompt_len - 1)
        if match is None:
            job.runner.attach(job.job_id, None, 0)
        else:
            job.runner.attach(job.job_id, match.payload, match.length)
            job.computed = job.unsent_cached = match.length
        job.attached = True
        job.stats.prefill_reused = job.computed
        self.stats.prefill_tokens_reused += job.computed
        if self.prefixes.max_tokens > 0:
            self.stats.prefix_cache_queries += job.prompt_len

    def _keep_prefix(self, job: _Job) -> None:
        """Offer the job's KV state (the tokens fed so far) to the prefix cache, then free
        what the job held."""
        self._apply_ended_sessions()
        if not job.attached:
            return
        session = job.request.session_id
        ended = session is not None and session in self._ended
        # An ended session's entries are unreachable when keyed by it: do not keep them.
        if job.computed > 0 and self.prefixes.max_tokens > 0 and not (ended and self._scoped()):
            state = job.runner.export(job.job_id, job.computed)
            owner = None if ended else session
            self.prefixes.insert(job.key, job.tokens[: job.computed], state, owner=owner)
        job.runner.release(job.job_id)
        job.attached = False
        self._sync_cache_stats()

    def _scoped(self) -> bool:
        return self.options.cache_scope == "session"

    def _apply_ended_sessions(self) -> None:
        """Release (or, scoped by session, drop) the cache entries of sessions that ended."""
        while True:
            try:
                session = self.ended_sessions.get_nowait()
            except queue.Empty:
                return
            self.prefixes.release(session, drop=self._scoped())
            self._ended[session] = None
            while len(self._ended) > ENDED_SESSIONS_KEPT:
                self._ended.popitem(last=False)
            self._sync_cache_stats()

    def _sync_cache_stats(self) -> None:
        self.stats.cache_entries = len(self.prefixes)
        self.stats.cache_tokens = self.prefixes.tokens
        self.stats.cache_evictions = self.prefixes.evictions


def _constrain(
    logits: torch.Tensor, jobs: list[_Job], banned: list[frozenset[int]]
) -> tuple[torch.Tensor, dict[int, str]]:
    """`logits` ([len(jobs), vocab]) with the constrained rows masked, and each row's
    `banned` ids (EOS before min_tokens) dropped where that would leave no token.

    Each constrained job's mask is ready (computed off this thread: `NextMask`).
    Also returns the rows whose constraint failed or allows nothing, with why: they
    may draw only EOS, and the request fails after the draw.
    """
    index = [i for i, job in enumerate(jobs) if job.mask is not None]
    masks = [m for i in index if (m := jobs[i].mask) is not None]
    constraint = jobs[index[0]].request.constraint
    assert constraint is not None
    binding = constraint.binding
    errors = [mask.error for mask in masks]
    words = np.stack([mask.bits for mask in masks])
    allowed = unpack_rows(words, binding.width)
    failures: dict[int, str] = {}
    empty = set(torch.nonzero(~allowed.any(dim=-1)).flatten().tolist())
    for k, error in enumerate(errors):
        if error is not None or k in empty:
            failures[index[k]] = error or "the constraint allows no next token"
            allowed[k] = False
            allowed[k, sorted(binding.eos_token_ids)] = True
    for k, i in enumerate(index):
        if banned[i]:
            banned[i] = frozenset(usable_bans(allowed[k], banned[i]))
    if len(index) < len(jobs):  # free rows stay exactly as they were
        every = torch.ones(logits.shape, dtype=torch.bool)
        every[index] = allowed
        allowed = every
    # Not in place: the logits are inference tensors of the forward pass.
    return logits.masked_fill(~allowed, float("-inf")), failures


def _trim_state(state: KVState, n: int) -> KVState:
    """The first n tokens of a KV state, copied so the longer tensors can be freed."""
    return tuple((k[..., :n, :].clone(), v[..., :n, :].clone()) for k, v in state)
