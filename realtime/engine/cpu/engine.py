"""The CPU reference engine: a Hugging Face model directory run with transformers.

It exists so the whole real-model path (tokenizer, chat template, sampling, logprobs,
stops, KV reuse, cancellation) runs and is tested on any machine, without a GPU, and
serves small models for real: concurrent requests share forward passes (continuous
batching, see `backend.py`).

The model directory is read when the engine is built (tokenizer, template, limits),
so `info` is available before `start()`; the weights are loaded by `start()`, on the
engine thread that will own them for the engine's lifetime (`ThreadedEngineCore`).
The event loop only hands work to that thread and collects tokens.

torch and transformers are optional (`realtime.engine.install.CPU_INSTALL_HINT`); this module is
imported only when the cpu engine is chosen.
"""

from __future__ import annotations

import inspect
import os
from collections.abc import AsyncGenerator
from contextlib import aclosing
from pathlib import Path
from typing import TYPE_CHECKING

from realtime.engine.install import CPU_INSTALL_HINT

try:
    import torch
    import transformers
except ImportError as exc:  # pragma: no cover - depends on the installation
    raise ImportError(f"the cpu engine needs torch and transformers: {CPU_INSTALL_HINT}") from exc

from realtime.engine.base import EngineOutput, EngineRequest
from realtime.engine.cpu.backend import (
    CACHE_SCOPES,
    DEFAULT_MAX_BATCH_SIZE,
    KV_BLOCK_TOKENS,
    BackendOptions,
    CpuBackend,
    CpuStats,
)
from realtime.engine.cpu.sampling import validate_sampling
from realtime.engine.errors import EngineRequestError, RequestPart
from realtime.engine.grammar import NOT_LOADED, GrammarSupport, bind_grammar
from realtime.engine.snapshot import EngineSnapshot, KvCacheSnapshot
from realtime.engine.threaded import ThreadedEngineCore
from realtime.model.info import ModelInfo
from realtime.model.model_dir import ModelFiles, load_model_dir

if TYPE_CHECKING:
    from realtime.constrain.tokenizer import TokenizerBinding


def default_threads() -> int:
    """torch threads when none are asked for: one core is left to the event loop."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        cores = os.cpu_count() or 1
    return max(1, cores - 1)


DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


class CpuEngine:
    """`Engine` over a transformers causal LM on the CPU.

    Background-priority requests run only while no normal request waits
    (`schedules_background`), and `end_session` releases a session's cache entries.
    Requests may carry a constraint (`ConstrainingEngine`): the model's tokenizer is
    bound to the grammar engine when the weights load, and each constrained
    sequence's logits are masked before sampling (see `backend.py`).

    Options:
    - `model_name`: the name clients send as `model` (default: the directory's name);
    - `max_cache_tokens`: the prefix cache's budget in tokens, 0 to disable KV reuse;
    - `cache_scope`: "session" (default; reuse only within a session, or among requests
      without one) or "salt" (share across sessions with the same `cache_salt`; faster
      for shared system prompts, but leaks prompt prefixes through timing); see
      `backend.py`;
    - `dtype`: "float32" (default), "bfloat16" or "float16" for the weights and KV cache;
    - `threads`: torch's intra-op threads (process-wide; default: the usable cores minus
      one, at least 1: the event loop needs a core of its own, and torch's threads spin
      while they wait, so on two cores torch's own default halves the throughput);
    - `prefill_chunk_tokens`: the most prompt tokens (padding included) one prefill
      pass takes, over all the sequences it serves;
    - `background_chunk_tokens`: the same for background work (speculative warm-ups),
      which bounds how long a request arriving mid-chunk waits (default: 128);
    - `max_batch_size`: client sequences decoded together in one forward pass (default
      32); more wait for a place; 1 runs one sequence per pass;
    - `chat_template`: a template overriding the directory's own.
    """

    #: Background-priority work (speculative warm-ups) never holds up normal requests.
    schedules_background = True

    def __init__(
        self,
        model_dir: str | Path,
        *,
        model_name: str | None = None,
        max_cache_tokens: int = 32768,
        dtype: str = "float32",
        threads: int | None = None,
        prefill_chunk_tokens: int = 256,
        chat_template: str | None = None,
        cache_scope: str = "session",
        background_chunk_tokens: int = 128,
        max_batch_size: int = DEFAULT_MAX_BATCH_SIZE,
    ):
        if dtype not in DTYPES:
            raise ValueError(f"unknown dtype {dtype!r}; choose one of: {', '.join(DTYPES)}")
        if threads is not None and threads < 1:
            raise ValueError(f"threads must be at least 1, got {threads}")
        if prefill_chunk_tokens < 1:
            raise ValueError(f"prefill_chunk_tokens must be at least 1, got {prefill_chunk_tokens}")
        if max_cache_tokens < 0:
            raise ValueError(f"max_cache_tokens must be >= 0, got {max_cache_tokens}")
        if cache_scope not in CACHE_SCOPES:
            raise ValueError(
                f"unknown cache_scope {cache_scope!r}; choose one of: {', '.join(CACHE_SCOPES)}"
            )
        if background_chunk_tokens < 1:
            raise ValueError(
                f"background_chunk_tokens must be at least 1, got {background_chunk_tokens}"
            )
        if max_batch_size < 1:
            raise ValueError(f"max_batch_size must be at least 1, got {max_batch_size}")
        self.files: ModelFiles = load_model_dir(model_dir, chat_template=chat_template)
        self.dtype = dtype
        self.threads = threads if threads is not None else default_threads()
        self.options = BackendOptions(
            context_length=self.files.context_length,
            eos_token_ids=frozenset(self.files.eos_token_ids),
            max_cache_tokens=max_cache_tokens,
            prefill_chunk_tokens=prefill_chunk_tokens,
            cache_scope=cache_scope,
            background_chunk_tokens=background_chunk_tokens,
            max_batch_size=max_batch_size,
        )
        self._info = self.files.model_info(name=model_name)
        self.stats = CpuStats()
        #: The backend, once `start()` built it; only the engine thread may call into it.
        self.backend: CpuBackend | None = None
        self._grammar: GrammarSupport = NOT_LOADED
        # Under load a request's tokens reach its stream in fewer, larger chunks.
        self._core = ThreadedEngineCore(
            self._build_backend, name="realtime-cpu-engine", merge_backlog=True
        )
        self._started = False

    @property
    def info(self) -> ModelInfo:
        return self._info

    @property
    def ready(self) -> bool:
        return self._core.running

    @property
    def unavailable_reason(self) -> str | None:
        if self._core.running:
            return None
        if not self._started:
            return "the model is not loaded yet"
        return "the engine has stopped"

    @property
    def grammar_binding(self) -> TokenizerBinding | None:
        return self._grammar.binding

    @property
    def grammar_unavailable_reason(self) -> str | None:
        return self._grammar.reason

    @property
    def core(self) -> ThreadedEngineCore:
        return self._core

    async def start(self) -> None:
        self._started = True
        await self._core.start()

    async def close(self) -> None:
        await self._core.close()

    def snapshot(self) -> EngineSnapshot:
        """Client jobs in the batch (running) and waiting for a place in it, or for the
        engine thread to take them between steps. The KV cache is the batch's: a row of
        up to the context's length per place, counted in blocks of `KV_BLOCK_TOKENS`
        tokens (the engine allocates per token); the blocks used are those the jobs in
        the batch hold, counted after each step. Finished requests' KV kept in the
        prefix cache is not counted (it is given up when needed, as vLLM's cached
        blocks are). Prefix-cache queries and hits are prompt tokens looked up and found
        when a job joins. The cpu engine never preempts a job to resume it later (a
        warm-up that a client request takes over ends; `stats.requests_preempted`
        counts those), so `preemptions` is 0."""
        stats, backend = self.stats, self.backend
        if backend is None:
            return EngineSnapshot()
        blocks = backend.batch_blocks
        kv = None
        if blocks is not None:
            kv = KvCacheSnapshot(
                block_size=KV_BLOCK_TOKENS,
                total_blocks=blocks,
                used_blocks=backend.held_blocks,
                prefix_caching=backend.reuses_prefixes,
                dtype=self.dtype,
            )
        return EngineSnapshot(
            running=backend.running,
            waiting=backend.waiting + self._core.queued,
            kv_cache=kv,
            prefix_cache_queries=stats.prefix_cache_queries,
            prefix_cache_hits=stats.prefill_tokens_reused,
        )

    def end_session(self, session_id: str) -> None:
        """The session is over: its cache entries lose their protection (are dropped when
        the cache is scoped by session). Applied by the engine thread before its next use
        of the cache, so it is safe to call from the event loop."""
        if self.backend is not None:
            self.backend.ended_sessions.put(session_id)

    async def generate(self, request: EngineRequest) -> AsyncGenerator[EngineOutput, None]:
        self.check_request(request)
        async with aclosing(self._core.generate(request)) as outputs:
            async for output in outputs:
                yield output

    def check_request(self, request: EngineRequest) -> None:
        """Refuse, as the request's fault, what the engine thread would refuse (cheap checks)."""
        prompt = request.prompt_token_ids
        if not prompt:
            raise EngineRequestError("the prompt is empty", part=RequestPart.PROMPT)
        if len(prompt) >= self.options.context_length:
            raise EngineRequestError(
                f"the prompt is {len(prompt)} tokens; the model's context is "
                f"{self.options.context_length} tokens",
                part=RequestPart.PROMPT,
                exceeds_context=True,
            )
        if self.backend is None:
            return  # not started: the core refuses the request
        top = self.backend.vocab_size - 1
        if min(prompt) < 0 or max(prompt) > top:
            raise EngineRequestError(
                f"prompt token ids must be in 0..{top}", part=RequestPart.PROMPT_TOKEN_IDS
            )
        try:
            validate_sampling(request.sampling, self.backend.vocab_size)
        except ValueError as exc:
            raise EngineRequestError(str(exc), part=RequestPart.SAMPLING) from None

    def _build_backend(self) -> CpuBackend:
        """Runs on the engine thread: load the weights there, once (already in eval mode)."""
        torch.set_num_threads(self.threads)
        # sdpa explicitly: the batched passes hand it per-row masks (eager works too).
        model = transformers.AutoModelForCausalLM.from_pretrained(
            self.files.path, dtype=DTYPES[self.dtype], attn_implementation="sdpa"
        )
        if "cache" not in inspect.signature(model.forward).parameters:
            raise RuntimeError(
                f"transformers {transformers.__version__} is not supported by the cpu engine "
                "(it needs the `cache` argument of transformers 5.24): "
                "pip install 'realtime[cpu]'"
            )
        backend = CpuBackend(model, self.options, self.stats)
        # The mask covers exactly the model's logits (its output embedding's rows).
        self._grammar = bind_grammar(self.files.tokenizer, logits_width=backend.vocab_size)
        self.backend = backend
        return backend
