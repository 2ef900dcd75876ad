"""The exllamav2 engine's model half: requests become exllamav2 jobs, results become outputs.

Everything here runs on the engine thread (see `threaded.py`), which owns the
generator. How requests map onto exllamav2 (0.3.x):

* The prompt is `prompt_token_ids` as a `(1, n)` tensor; exllamav2 never
  re-tokenizes, so the chat template and tokenizer stay the pipeline's.
* Stop conditions are token ids only: every EOS id of the model (unless
  `ignore_eos`) plus the request's `stop_token_ids`. Stop *strings* are matched by
  the pipeline; handing them to exllamav2 as well would hold text back twice.
  `min_new_tokens` makes exllamav2 ban every stop token until enough tokens exist,
  which is what `min_tokens` means for EOS and stop token ids.
* Sampler settings start from exllamav2's defaults, which are not neutral
  (temperature 0.8, top_k 50, top_p 0.8, repetition penalty 1.025): every field
  is set explicitly, so a request that asks for nothing gets plain sampling from
  the model's distribution, as with OpenAI.
* Logprobs come from exllamav2's *final sampling probabilities*: after
  repetition penalties, `logit_bias`, temperature and top-k/top-p/min-p
  truncation. With neutral settings that is the model's distribution; with
  truncation the kept tokens are renormalised and the rest have probability 0
  (reported as -9999.0, since JSON has no -inf).
* exllamav2 holds tokens back while their text ends in an incomplete UTF-8
  character (and, at a stop token, hands the held tokens over under "held").
  Text is ignored here - the pipeline detokenizes ids itself - but every held id
  is passed on, so the ids, usage and logprobs add up to exllamav2's `new_tokens`.
* A constrained request (`EngineRequest.constraint`) gets a `GrammarFilter` in the
  job's `filters`: exllamav2 calls it before every sampled token (a mask, computed
  on its filter thread while the GPU runs the next pass) and feeds it each token.
  A grammar ends the answer with EOS, so EOS is among the job's stop tokens even
  under `ignore_eos`. A token the grammar refused (which the mask makes
  impossible) puts the filter in error: the job is cancelled and the request fails.
* `cache_salt` keeps a request to the cached pages of its own salt
  (`salt.py`); requests without a salt share with each other, across
  sessions, as the cpu engine's "salt" cache scope does.

Background priority (speculative warm-ups): exllamav2 has no priorities - every
active job gets a prefill chunk or a decode step in every `iterate()`. So a
background request is kept out of the generator while any normal request is
there, runs alone (one at a time, in prefill chunks of `background_chunk_size`
tokens so that a request arriving meanwhile waits for at most one such chunk),
and leaves when a normal request arrives: it is cancelled in exllamav2, whose
finished pages stay in the cache under their hashes. If the new request continues
the warm-up's prompt (the turn it was warming), the warm-up ends there
(`CANCELLED`) and the turn reuses its pages; otherwise it waits and starts again
once no normal request is left, reusing its own finished pages.

Known differences from vLLM-style semantics, all from exllamav2 itself:
presence/frequency/repetition penalties look at the whole sequence (prompt and
output).
"""

from __future__ import annotations

import logging
import math
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from realtime.engine.base import NORMAL_PRIORITY, EngineOutput, EngineRequest, SamplingParams
from realtime.engine.errors import RequestPart
from realtime.engine.exllamav2.salt import salt_seed
from realtime.engine.prefix_cache import common_prefix_length
from realtime.model.generation import FinishReason, TokenLogprob

if TYPE_CHECKING:  # imported when a request is constrained (it needs torch)
    from realtime.constrain.exllamav2_filter import GrammarFilter

log = logging.getLogger("realtime.engine.exllamav2")

#: A probability of 0 as a logprob: finite, because JSON cannot carry -inf (vLLM does the same).
MIN_LOGPROB = -9999.0


class _Generator(Protocol):
    """The part of `ExLlamaV2DynamicGenerator` this engine calls (all on the engine thread)."""

    padded_vocab_size: int

    def enqueue(self, job: Any) -> Any: ...

    def cancel(self, job: Any) -> None: ...

    def iterate(self) -> list[dict[str, Any]]: ...

    def clear_queue(self) -> None: ...

    def reset_page_table(self) -> None: ...


@dataclass
class BackgroundStats:
    """What background (speculative warm-up) requests did; read from any thread."""

    #: iterate() calls with a background job in the generator
    steps: int = 0
    #: background jobs taken out of the generator for a normal request, to run later
    yields: int = 0
    #: background jobs ended because a normal request continues their prompt
    drops: int = 0


@dataclass(slots=True)
class _Job:
    request: EngineRequest
    seed: bytes | None
    #: the ExLlamaV2DynamicJob; None for a background job not (or no longer) enqueued
    handle: Any = None
    cached_reported: bool = False
    #: the job's grammar filter, when the request is constrained
    filter: GrammarFilter | None = None

    @property
    def background(self) -> bool:
        return self.request.priority > NORMAL_PRIORITY


class ExLlamaV2Backend:
    """The model-specific half of the engine (a `StepBackend`); every method runs on its thread.

    It owns the generator and the jobs it was given, keyed by the core's job id,
    which is also each job's exllamav2 `identifier`, so results find their request
    without a lookup by job object. `salting` says whether `cache_salt` isolation is
    installed (see `salt.py`); without it a salted request is refused
    rather than allowed to share another salt's cache.
    """

    def __init__(
        self,
        generator: Any,
        *,
        job_class: Any,
        settings_class: Any,
        torch: Any,
        vocab_size: int,
        eos_token_ids: frozenset[int],
        context_length: int,
        resources: Sequence[Any] = (),
        salting: bool = True,
        background_chunk_size: int | None = None,
        background_stats: BackgroundStats | None = None,
    ):
        self.generator: _Generator = generator
        self._job_class = job_class
        self._settings_class = settings_class
        self._torch = torch
        self._vocab_size = vocab_size
        self._eos_ids = eos_token_ids
        self._context_length = context_length
        self._resources = list(resources)  # the model and cache, released by close()
        self._salting = salting
        self._jobs: dict[int, _Job] = {}
        #: normal jobs in self._jobs (all of them are in the generator)
        self._normal = 0
        #: background jobs waiting outside the generator, oldest first
        self._waiting: deque[int] = deque()
        #: the one background job in the generator, if any
        self._running_background: int | None = None
        #: final outputs of jobs ended outside iterate(), delivered by the next step
        self._ended: list[tuple[int, EngineOutput]] = []
        self._chunk = getattr(generator, "max_chunk_size", None)
        self._background_chunk = background_chunk_size
        if self._chunk is not None and background_chunk_size is not None:
            self._background_chunk = min(background_chunk_size, self._chunk)
        self.background = background_stats if background_stats is not None else BackgroundStats()
        #: prompt tokens of the jobs that reported their cached tokens, and those tokens:
        #: the prefix cache's queries and hits (written here, read from any thread)
        self.prefix_queries = 0
        self.prefix_hits = 0

    # --- what the engine reports (read from the event loop: lengths, read whole) ---

    @property
    def running(self) -> int:
        """Client jobs the generator is computing. A background job is only ever in the
        generator alone (a client request takes it out), so then there are none."""
        if self._running_background is not None:
            return 0
        return len(getattr(self.generator, "active_jobs", ()))

    @property
    def waiting(self) -> int:
        """Client jobs the generator holds until they fit its batch and free pages."""
        if self._running_background is not None:
            return 0
        return len(getattr(self.generator, "pending_jobs", ()))

    def pages(self) -> tuple[int, int, int] | None:
        """(page size, pages, pages referenced by jobs in the generator) from its page
        table; pages that only keep a finished job's prefix are unreferenced (free).
        None for a generator without exllamav2 0.3's page table attributes."""
        generator = self.generator
        size = getattr(generator, "page_size", None)
        total = getattr(generator, "max_pages", None)
        referenced = getattr(generator, "referenced_pages", None)
        if not isinstance(size, int) or not isinstance(total, int) or referenced is None:
            return None
        return size, total, len(referenced)

    # --- StepBackend ---

    def add(self, job_id: int, request: EngineRequest) -> None:
        ids = request.prompt_token_ids
        if not ids:
            raise ValueError("the prompt is empty")
        # An id outside the embedding table is a device-side assert on CUDA, which kills
        # the whole context, not one request; nvext.token_data can carry any id.
        if min(ids) < 0 or max(ids) >= self._vocab_size:
            bad = next(t for t in ids if not 0 <= t < self._vocab_size)
            raise ValueError(
                f"prompt token id {bad} is outside the model's vocabulary "
                f"(0..{self._vocab_size - 1})"
            )
        if request.cache_salt is not None and not self._salting:
            raise ValueError(
                "cache_salt is not supported with this exllamav2 version "
                "(its page hashing is not the one realtime isolates salts in)"
            )
        constraint = request.constraint
        if constraint is not None and constraint.binding.width != self._vocab_size:
            raise ValueError(
                f"the constraint was compiled for {constraint.binding.width} token ids; "
                f"this model has {self._vocab_size}"
            )
        job = _Job(request, salt_seed(request.cache_salt))
        handle = self._new_handle(job_id, job)  # built now: a bad request fails now
        if job.background:
            job.handle = handle
            self._jobs[job_id] = job
            self._waiting.append(job_id)
            return
        self._make_room_for(request, job.seed)
        self._enqueue(handle)
        job.handle = handle
        self._jobs[job_id] = job
        self._normal += 1

    def cancel(self, job_id: int) -> None:
        job = self._jobs.pop(job_id, None)
        if job is None:
            return
        in_generator = not job.background or job_id == self._running_background
        if not job.background:
            self._normal -= 1
        elif job_id == self._running_background:
            self._running_background = None
        else:
            self._waiting.remove(job_id)
        if in_generator:
            # Removes a pending job, or frees an active job's pages; no result follows for it.
            self.generator.cancel(job.handle)

    def has_work(self) -> bool:
        return bool(self._jobs) or bool(self._ended)

    def step(self) -> list[tuple[int, EngineOutput]]:
        self._start_background()
        outputs, self._ended = self._ended, []
        if self._running_background is not None:
            self.background.steps += 1
        for result in self.generator.iterate():
            job_id = result.get("identifier")
            if result.get("stage") != "streaming" or not isinstance(job_id, int):
                continue  # "started" and "prefill" carry no tokens
            job = self._jobs.get(job_id)
            if job is None:
                continue  # cancelled while this iterate() ran
            failure = job.filter.error if job.filter is not None else None
            if failure is not None:
                outputs.append((job_id, self._fail_constraint(job_id, job, result, failure)))
                continue
            output = self._output(job, result)
            if result.get("eos"):
                self._forget(job_id, job)
            if output is not None:
                outputs.append((job_id, output))
        return outputs

    def _fail_constraint(
        self, job_id: int, job: _Job, result: dict[str, Any], failure: str
    ) -> EngineOutput:
        """The filter was fed a token its grammar refused: end the job now (its mask
        would allow only EOS from here) and fail the request."""
        if not result.get("eos"):
            self.generator.cancel(job.handle)
        self._forget(job_id, job)
        error = f"constrained decoding failed: {failure}"
        return EngineOutput(
            [], finish_reason=FinishReason.ERROR, error=error, error_part=RequestPart.CONSTRAINT
        )

    def recover(self) -> None:
        """Forget every job after `iterate()` raised, and the page table with them.

        A failed pass can leave pages that claim KV which was never written (exllamav2
        records a decode step's tokens in the page table before the forward pass), and
        a later prompt with the same prefix would reuse that garbage. Dropping the
        page table costs the prefix cache once; it is only done here, never while
        serving normally.
        """
        self._clear_jobs()
        try:
            self.generator.clear_queue()
        except Exception:
            log.exception("exllamav2: clear_queue failed during recovery")
        try:
            self.generator.reset_page_table()
        except Exception:
            log.exception("exllamav2: reset_page_table failed during recovery")

    def close(self) -> None:
        self._clear_jobs()
        try:
            self.generator.clear_queue()
        except Exception:
            log.exception("exllamav2: clear_queue failed while closing")
        for resource in self._resources:
            unload = getattr(resource, "unload", None)
            if unload is not None:
                try:
                    unload()
                except Exception:
                    log.exception("exllamav2: unloading %s failed", type(resource).__name__)
        self._resources.clear()

    # --- scheduling ---

    def _enqueue(self, handle: Any) -> None:
        try:
            self.generator.enqueue(handle)
        except AssertionError as exc:
            # exllamav2 validates with asserts (e.g. "Job requires N pages"); they are
            # about this request, so the core must reject it rather than die.
            raise ValueError(str(exc) or "exllamav2 refused the job") from exc
        except Exception as exc:
            # Anything else escaping here would end the engine thread for everyone.
            log.exception("exllamav2: could not enqueue a job")
            raise ValueError(f"exllamav2 refused the job ({type(exc).__name__})") from exc

    def _forget(self, job_id: int, job: _Job) -> None:
        del self._jobs[job_id]
        if not job.background:
            self._normal -= 1
        if job_id == self._running_background:
            self._running_background = None

    def _clear_jobs(self) -> None:
        self._jobs.clear()
        self._waiting.clear()
        self._ended.clear()
        self._normal = 0
        self._running_background = None
        self._set_chunk(self._chunk)

    def _make_room_for(self, request: EngineRequest, seed: bytes | None) -> None:
        """A normal request arrived: background jobs leave the generator, or end.

        One that the request continues (its prompt starts with the background
        prompt, give or take the last token) ends: its work is in the cache for this
        request, and finishing it would redo what the request is about to compute.
        Any other stays (waiting) and starts again once no normal job is left.
        """
        prompt = request.prompt_token_ids
        for job_id in [*self._waiting, self._running_background]:
            if job_id is None:
                continue
            job = self._jobs[job_id]
            warmed = job.request.prompt_token_ids
            running = job_id == self._running_background
            if running:
                self.generator.cancel(job.handle)  # its finished pages stay in the cache
                job.handle = None
                self._running_background = None
            if job.seed == seed and common_prefix_length(warmed, prompt) >= len(warmed) - 1:
                self._jobs.pop(job_id)
                if job_id in self._waiting:
                    self._waiting.remove(job_id)
                self._ended.append((job_id, EngineOutput([], finish_reason=FinishReason.CANCELLED)))
                self.background.drops += 1
            elif running:
                self._waiting.appendleft(job_id)
                self.background.yields += 1
        self._set_chunk(self._chunk)

    def _start_background(self) -> None:
        """With no normal job left, the oldest waiting background job enters the generator."""
        if self._normal or self._running_background is not None or not self._waiting:
            return
        job_id = self._waiting.popleft()
        job = self._jobs[job_id]
        try:
            # A job that left the generator cannot go back in: it starts afresh (and
            # finds the pages it finished in the cache).
            handle = job.handle if job.handle is not None else self._new_handle(job_id, job)
            self._set_chunk(self._background_chunk)
            self._enqueue(handle)
        except ValueError as exc:
            self._set_chunk(self._chunk)
            del self._jobs[job_id]
            error = EngineOutput([], finish_reason=FinishReason.ERROR, error=str(exc))
            self._ended.append((job_id, error))
            return
        job.handle = handle
        self._running_background = job_id

    def _set_chunk(self, chunk: int | None) -> None:
        """Prefill chunk of the generator's next iterate() calls (read there, per call)."""
        if chunk is not None and getattr(self.generator, "max_chunk_size", None) is not None:
            self.generator.max_chunk_size = chunk  # type: ignore[attr-defined]

    # --- request -> job ---

    def _new_handle(self, job_id: int, job: _Job) -> Any:
        """The exllamav2 job for a request (not yet enqueued)."""
        request = job.request
        ids = request.prompt_token_ids
        limit = request.stop.max_tokens
        max_new = limit if limit is not None else self._context_length - len(ids)
        if max_new < 1:
            raise ValueError("no room to generate: max_tokens must be at least 1")
        settings = self._settings(request.sampling)
        stop_conditions = self._stop_token_ids(request)
        input_ids = self._torch.tensor([ids], dtype=self._torch.long)
        filters = []
        if request.constraint is not None:
            from realtime.constrain.exllamav2_filter import GrammarFilter

            job.filter = GrammarFilter(request.constraint)
            filters.append(job.filter)
        try:
            handle = self._job_class(
                input_ids=input_ids,
                max_new_tokens=max_new,
                min_new_tokens=request.stop.min_tokens,
                gen_settings=settings,
                seed=request.sampling.seed,
                stop_conditions=stop_conditions,
                decode_special_tokens=False,
                return_top_tokens=request.logprobs or 0,
                return_probs=request.logprobs is not None,
                filters=filters,
                identifier=job_id,
            )
        except AssertionError as exc:
            raise ValueError(str(exc) or "exllamav2 refused the job") from exc
        except Exception as exc:
            log.exception("exllamav2: could not build a job")
            raise ValueError(f"exllamav2 refused the job ({type(exc).__name__})") from exc
        handle.realtime_seed = job.seed
        return handle

    def _stop_token_ids(self, request: EngineRequest) -> list[int]:
        stops = set(request.stop.stop_token_ids)
        constraint = request.constraint
        if not request.stop.ignore_eos or (constraint is not None and constraint.ends_answer):
            # A grammar's answer ends with EOS (the mask allows nothing else), ignore_eos
            # or not: exllamav2 ends a masked job only on a stop token.
            stops |= self._eos_ids
        # Ids the model cannot produce can never match, and exllamav2 indexes the logits
        # with them while min_new_tokens bans stop tokens: keep only real ones.
        return sorted(t for t in stops if 0 <= t < self._vocab_size)

    def _settings(self, sampling: SamplingParams) -> Any:
        """exllamav2 sampler settings for OpenAI semantics: nothing on unless asked for."""
        s = self._settings_class()
        greedy = sampling.temperature <= 0.0 or sampling.top_p <= 0.0
        # exllamav2 itself turns a temperature below 0.01 into top_k=1; say so explicitly.
        s.temperature = 1.0 if greedy else sampling.temperature
        s.top_k = 1 if greedy else max(sampling.top_k, 0)
        s.top_p = 1.0 if greedy else sampling.top_p
        s.min_p = sampling.min_p
        s.top_a = 0.0
        s.tfs = 0.0
        s.typical = 0.0  # 0 (like 1) is off
        s.skew = 0.0
        s.smoothing_factor = 0.0
        s.min_temp = 0.0
        s.max_temp = 0.0
        s.temperature_last = False
        s.mirostat = False
        s.xtc_probability = 0.0
        s.dry_multiplier = 0.0
        s.token_repetition_penalty = sampling.repetition_penalty
        s.token_repetition_range = -1
        s.token_repetition_decay = 0
        s.token_presence_penalty = sampling.presence_penalty
        s.token_frequency_penalty = sampling.frequency_penalty
        if sampling.logit_bias:
            bias = self._torch.zeros((self.generator.padded_vocab_size,), dtype=self._torch.float)
            for token_id, value in sampling.logit_bias.items():
                if not 0 <= token_id < self._vocab_size:
                    raise ValueError(
                        f"logit_bias token id {token_id} is outside the model's vocabulary "
                        f"(0..{self._vocab_size - 1})"
                    )
                bias[token_id] = float(value)
            s.token_bias = bias
        return s

    # --- result -> output ---

    def _output(self, job: _Job, result: dict[str, Any]) -> EngineOutput | None:
        token_ids = _ids(result.get("token_ids"))
        probs = _row(result.get("token_probs"))
        top_ids = _row(result.get("top_k_tokens"))
        top_probs = _row(result.get("top_k_probs"))
        eos = bool(result.get("eos"))
        held = result.get("held") if eos else None
        if isinstance(held, dict):
            # At a stop token exllamav2 does not emit what it held back (the stop token
            # and any incomplete character before it); the ids still count.
            token_ids += _ids(held.get("token_ids"))
            probs += _row(held.get("token_probs"))
            top_ids += _row(held.get("top_k_tokens"))
            top_probs += _row(held.get("top_k_probs"))
        cached: int | None = None
        if not job.cached_reported and result.get("cached_tokens") is not None:
            cached = int(result["cached_tokens"])
            job.cached_reported = True
            self.prefix_queries += len(job.request.prompt_token_ids)
            self.prefix_hits += cached
        if not token_ids and not eos:
            return None  # everything in this step is held back
        finish: FinishReason | None = None
        stopped_on_token = False
        if eos:
            finish, stopped_on_token = self._finish(job, result, token_ids)
        return EngineOutput(
            token_ids,
            self._logprobs(job, token_ids, probs, top_ids, top_probs),
            finish,
            cached_tokens=cached,
            stopped_on_token=stopped_on_token,
        )

    def _finish(
        self, job: _Job, result: dict[str, Any], token_ids: list[int]
    ) -> tuple[FinishReason, bool]:
        reason = result.get("eos_reason")
        if reason == "stop_token":
            trigger = result.get("eos_triggering_token_id")
            on_token = bool(token_ids) and token_ids[-1] == trigger
            if trigger in job.request.stop.stop_token_ids:
                return FinishReason.STOP, on_token
            return FinishReason.EOS, on_token
        if reason == "max_new_tokens":
            return FinishReason.LENGTH, False
        if reason == "end_filter" and token_ids and token_ids[-1] in self._eos_ids:
            # A filter that lists allowed ids (not ours: it masks) ends on its EOS.
            return FinishReason.EOS, True
        if reason not in ("stop_string", "end_filter"):
            # Stop strings are never passed; an unknown reason from a newer exllamav2
            # still ends the request cleanly.
            log.warning("exllamav2 ended a job with an unknown eos_reason %r", reason)
        return FinishReason.STOP, False

    def _logprobs(
        self,
        job: _Job,
        token_ids: list[int],
        probs: list[Any],
        top_ids: list[Any],
        top_probs: list[Any],
    ) -> list[TokenLogprob] | None:
        k = job.request.logprobs
        if k is None or not token_ids or len(probs) != len(token_ids):
            return None
        entries = []
        for i, (token_id, prob) in enumerate(zip(token_ids, probs, strict=True)):
            top: list[tuple[int, float]] = []
            if k and i < len(top_ids) and i < len(top_probs):
                top = [
                    (int(t), _logprob(p)) for t, p in zip(top_ids[i], top_probs[i], strict=False)
                ]
            entries.append(TokenLogprob(token_id, _logprob(prob), top))
        return entries


def _ids(tensor: Any) -> list[int]:
    """exllamav2's `(1, n)` token id tensor as a list (empty when absent)."""
    return [int(t) for t in _row(tensor)]


def _row(tensor: Any) -> list[Any]:
    """The first (only) batch row of a `(1, n, ...)` tensor as nested lists."""
    if tensor is None:
        return []
    row: list[Any] = tensor[0].tolist()
    return row


def _logprob(prob: float) -> float:
    if prob <= 0.0:
        return MIN_LOGPROB
    return max(MIN_LOGPROB, min(0.0, math.log(prob)))
