"""The exllamav2 engine: `ExLlamaV2DynamicGenerator` behind the `Engine` protocol (CUDA only).

exllamav2's dynamic generator does continuous batching itself: jobs are enqueued,
every `iterate()` starts what fits, runs one prefill chunk per new job and one
decode step for every running job, and returns a list of result dicts. It is not
thread-safe, and its asyncio wrapper runs `iterate()` on the event loop, which
would stall every socket for the length of a prefill. So this engine runs it on
one dedicated thread through `ThreadedEngineCore`: `add`, `cancel` and `iterate()`
all happen there, and the loop only receives finished `EngineOutput`s.

The model half (`ExLlamaV2Backend`: requests to jobs, results to outputs, background
priority) is in `backend.py`; `cache_salt` isolation in `salt.py`.
This module loads the model and runs the thread.
"""

from __future__ import annotations

import dataclasses
import importlib
import logging
import os
from collections.abc import AsyncGenerator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from realtime.engine.base import EngineOutput, EngineRequest
from realtime.engine.exllamav2.backend import MIN_LOGPROB, BackgroundStats, ExLlamaV2Backend
from realtime.engine.exllamav2.salt import install_salted_hashing, salted_job_class
from realtime.engine.grammar import NOT_LOADED, GrammarSupport, bind_grammar
from realtime.engine.snapshot import EngineSnapshot, KvCacheSnapshot
from realtime.engine.threaded import CoreStats, ThreadedEngineCore
from realtime.model.info import ModelInfo

if TYPE_CHECKING:
    from realtime.constrain.tokenizer import TokenizerBinding

log = logging.getLogger("realtime.engine.exllamav2")

#: exllamav2's page size (`PAGED_PAGE_SIZE`): the cache and paged chunk sizes are multiples of it.
PAGE_SIZE = 256
CACHE_MODES = ("FP16", "Q4", "Q6", "Q8")
_CACHE_CLASSES = {
    "FP16": "ExLlamaV2Cache",
    "Q4": "ExLlamaV2Cache_Q4",
    "Q6": "ExLlamaV2Cache_Q6",
    "Q8": "ExLlamaV2Cache_Q8",
}
INSTALL_HINT = "the exllamav2 engine needs a CUDA GPU and `pip install 'realtime[exllamav2]'`"

__all__ = [
    "CACHE_MODES",
    "INSTALL_HINT",
    "MIN_LOGPROB",
    "PAGE_SIZE",
    "BackgroundStats",
    "ExLlamaV2Backend",
    "ExLlamaV2Engine",
    "ExLlamaV2LoadError",
]


class ExLlamaV2LoadError(RuntimeError):
    """The engine could not start: no CUDA, exllamav2 missing, or the model failed to load."""


@dataclass(frozen=True, slots=True)
class _LoadOptions:
    model_dir: str
    cache_size: int
    cache_mode: str
    gpu_split: tuple[float, ...] | None
    max_batch_size: int | None
    max_chunk_size: int | None
    paged: bool | None
    background_chunk_size: int


def _round_up(value: int, multiple: int) -> int:
    return -(-value // multiple) * multiple


class ExLlamaV2Engine:
    """Serves an EXL2 (or FP16 safetensors) model directory with exllamav2 on CUDA.

    The tokenizer, chat template (`chat_template` overrides it, as for the cpu
    engine), EOS ids and context length come from the model directory through the
    pipeline's own loader, so nothing needs CUDA until `start()`, which loads the
    weights on the engine thread. Without CUDA or exllamav2, `start()` raises
    `ExLlamaV2LoadError` with the reason.

    `cache_size` is the total number of tokens the KV cache holds across all running
    requests (default: the context length), rounded up to a multiple of 256.
    exllamav2 reserves pages for a request's prompt *and* its `max_tokens` when it
    starts it, so the cache size, not `max_batch_size`, is what usually limits how
    many requests run at once.

    Background-priority requests (speculative warm-ups) run only while no normal
    request is in the generator (`schedules_background`), in prefill chunks of
    `background_chunk_size` tokens (a multiple of 256), so a request that arrives
    meanwhile waits for at most one such chunk (see `backend.py`).

    Requests may carry a constraint (`ConstrainingEngine`): the tokenizer is bound to
    the grammar engine when the model loads, and a constrained job gets a grammar
    filter, which exllamav2 asks for a mask before each token it samples.
    """

    #: Background-priority work (speculative warm-ups) never holds up normal requests.
    schedules_background = True

    def __init__(
        self,
        model_dir: str | os.PathLike[str],
        *,
        model_name: str | None = None,
        cache_size: int | None = None,
        cache_mode: str = "FP16",
        gpu_split: Sequence[float] | None = None,
        max_batch_size: int | None = None,
        max_chunk_size: int | None = None,
        paged: bool | None = None,
        chat_template: str | None = None,
        background_chunk_size: int = PAGE_SIZE,
    ):
        mode = cache_mode.upper()
        if mode not in CACHE_MODES:
            raise ValueError(
                f"cache_mode must be one of {', '.join(CACHE_MODES)}, got {cache_mode!r}"
            )
        if cache_size is not None and cache_size < 1:
            raise ValueError(f"cache_size must be at least 1, got {cache_size}")
        if max_batch_size is not None and max_batch_size < 1:
            raise ValueError(f"max_batch_size must be at least 1, got {max_batch_size}")
        if max_chunk_size is not None and (max_chunk_size < 1 or max_chunk_size % PAGE_SIZE):
            raise ValueError(
                f"max_chunk_size must be a positive multiple of {PAGE_SIZE}, got {max_chunk_size}"
            )
        if background_chunk_size < 1 or background_chunk_size % PAGE_SIZE:
            raise ValueError(
                f"background_chunk_size must be a positive multiple of {PAGE_SIZE}, "
                f"got {background_chunk_size}"
            )
        split: tuple[float, ...] | None = None
        if gpu_split is not None:
            split = tuple(float(gb) for gb in gpu_split)
            if not split or any(not gb > 0 for gb in split):
                raise ValueError(f"gpu_split must list positive GB per GPU, got {list(gpu_split)}")
        from realtime.model.model_dir import load_model_dir

        model_dir = os.fspath(model_dir)
        info = load_model_dir(model_dir, chat_template=chat_template).model_info(name=model_name)
        # exllamav2 wants a multiple of its page size; rounding up keeps a full-context
        # request possible.
        size = _round_up(cache_size if cache_size is not None else info.context_length, PAGE_SIZE)
        self._info = dataclasses.replace(info, context_length=min(info.context_length, size))
        self._options = _LoadOptions(
            model_dir,
            size,
            mode,
            split,
            max_batch_size,
            max_chunk_size,
            paged,
            background_chunk_size,
        )
        self._core = ThreadedEngineCore(self._load_backend, name="exllamav2-engine")
        self._load_error: str | None = None
        self._started = False
        #: Set on the engine thread once loaded: whether the generator runs paged.
        self.paged: bool | None = None
        #: Set on the engine thread once loaded: whether cache_salt isolation is installed.
        self.salting: bool | None = None
        self.background = BackgroundStats()
        self._grammar: GrammarSupport = NOT_LOADED
        #: Set on the engine thread once loaded; read by `snapshot()` (lengths and ints).
        self._backend: ExLlamaV2Backend | None = None

    @property
    def info(self) -> ModelInfo:
        return self._info

    @property
    def grammar_binding(self) -> TokenizerBinding | None:
        return self._grammar.binding

    @property
    def grammar_unavailable_reason(self) -> str | None:
        return self._grammar.reason

    @property
    def cache_size(self) -> int:
        return self._options.cache_size

    @property
    def stats(self) -> CoreStats:
        return self._core.stats

    @property
    def core(self) -> ThreadedEngineCore:
        return self._core

    @property
    def ready(self) -> bool:
        return self.unavailable_reason is None

    @property
    def unavailable_reason(self) -> str | None:
        if self._load_error is not None:
            return self._load_error
        if not self._started:
            return "the engine has not started"
        if not self._core.running:
            return self._core.failure or "the engine thread has stopped"
        return None

    async def start(self) -> None:
        try:
            await self._core.start()
        except BaseException as exc:
            self._load_error = str(exc) or type(exc).__name__
            raise
        self._started = True

    async def close(self) -> None:
        await self._core.close()
        self._started = False

    def generate(self, request: EngineRequest) -> AsyncGenerator[EngineOutput, None]:
        return self._core.generate(request)

    def snapshot(self) -> EngineSnapshot:
        """Client jobs running and waiting in the generator (or for the engine thread to
        take them between steps), and its page table as the KV
        cache (a block is a page; pages kept only for prefix reuse are free). Prefix
        queries and hits are counted when exllamav2 reports a job's cached tokens, which
        it does when the job ends. A background job taken out of the generator for a
        client request, to start again later, counts as a preemption."""
        backend = self._backend
        if backend is None:
            return EngineSnapshot()
        pages = backend.pages()
        kv = None
        if pages is not None:
            size, total, used = pages
            kv = KvCacheSnapshot(
                block_size=size,
                total_blocks=total,
                used_blocks=used,
                prefix_caching=True,
                dtype=self._options.cache_mode.lower(),
            )
        return EngineSnapshot(
            running=backend.running,
            waiting=backend.waiting + self._core.queued,
            kv_cache=kv,
            prefix_cache_queries=backend.prefix_queries,
            prefix_cache_hits=backend.prefix_hits,
            preemptions=self.background.yields,
        )

    # --- on the engine thread ---

    def _load_backend(self) -> ExLlamaV2Backend:
        opts = self._options
        torch = _import_torch_with_cuda()
        try:
            # importlib, not `import`: exllamav2 has no type information to check against.
            exllamav2 = importlib.import_module("exllamav2")
            exl_attn = importlib.import_module("exllamav2.attn")
            exl_generator = importlib.import_module("exllamav2.generator")
            exl_dynamic = importlib.import_module("exllamav2.generator.dynamic")
        except Exception as exc:  # ImportError, or the CUDA extension failing to build
            raise ExLlamaV2LoadError(
                f"{INSTALL_HINT}: importing exllamav2 failed ({type(exc).__name__}: {exc})"
            ) from exc
        try:
            config = exllamav2.ExLlamaV2Config(opts.model_dir)
            config.arch_compat_overrides()
            if opts.max_chunk_size is not None:
                # The chunk size bounds one forward pass; exllamav2 sizes its buffers from these.
                config.max_input_len = opts.max_chunk_size
                config.max_attention_size = opts.max_chunk_size**2
            model = exllamav2.ExLlamaV2(config)
            cache_class = getattr(exllamav2, _CACHE_CLASSES[opts.cache_mode])
            if opts.gpu_split is None:
                cache = cache_class(model, max_seq_len=opts.cache_size, lazy=True)
                model.load_autosplit(cache)
            else:
                model.load(list(opts.gpu_split))
                cache = cache_class(model, max_seq_len=opts.cache_size)
            tokenizer = exllamav2.ExLlamaV2Tokenizer(config)
            paged = opts.paged
            if paged is None:
                paged = bool(exl_attn.has_flash_attn_with_paged) and not config.no_flash_attn
            if not getattr(exl_attn, "has_flash_attn", False) or config.no_flash_attn:
                _attention_without_per_length_setup(torch)
            batch = opts.max_batch_size
            if not paged:
                if batch is not None and batch > 1:
                    log.warning("exllamav2 runs unpaged (no flash-attn): max_batch_size is 1")
                batch = 1  # unpaged, the whole cache is one page: one job at a time
            generator = exl_generator.ExLlamaV2DynamicGenerator(
                model=model,
                cache=cache,
                tokenizer=tokenizer,
                max_batch_size=batch,
                max_chunk_size=opts.max_chunk_size,
                paged=paged,
            )
        except Exception as exc:
            raise ExLlamaV2LoadError(
                f"the exllamav2 engine could not load {opts.model_dir}: {type(exc).__name__}: {exc}"
            ) from exc
        self.paged = paged
        # The mask covers the model's vocabulary; exllamav2's logits are padded wider
        # (`padded_vocab_size`), and the filter excludes the padding.
        self._grammar = bind_grammar(self._info.tokenizer, logits_width=int(config.vocab_size))
        job_class = exl_generator.ExLlamaV2DynamicJob
        self.salting = _can_salt(job_class, generator) and install_salted_hashing(exl_dynamic)
        if self.salting:
            job_class = salted_job_class(job_class)
        else:
            log.warning(
                "exllamav2 %s hashes pages in a way realtime does not know: requests with a "
                "cache_salt will be refused",
                getattr(exllamav2, "__version__", "?"),
            )
        log.info(
            "exllamav2 %s: %s cache of %d tokens (%s), %s",
            getattr(exllamav2, "__version__", "?"),
            opts.cache_mode,
            opts.cache_size,
            "autosplit" if opts.gpu_split is None else f"gpu split {list(opts.gpu_split)} GB",
            "paged" if paged else "unpaged (install flash-attn for batching and page reuse)",
        )
        self._backend = ExLlamaV2Backend(
            generator,
            job_class=job_class,
            settings_class=exl_generator.ExLlamaV2Sampler.Settings,
            torch=torch,
            vocab_size=int(config.vocab_size),
            eos_token_ids=self._info.tokenizer.eos_token_ids,
            context_length=self._info.context_length,
            resources=(model, cache),
            salting=self.salting,
            background_chunk_size=opts.background_chunk_size,
            background_stats=self.background,
        )
        return self._backend


#: What `salt` overrides or reads; all present in exllamav2 0.3.x.
_SALT_JOB_METHODS = (
    "prepare_for_queue",
    "receive_sample",
    "prefill",
    "get_input_ids_list",
    "is_prefill_done",
)


def _can_salt(job_class: Any, generator: Any) -> bool:
    return all(callable(getattr(job_class, name, None)) for name in _SALT_JOB_METHODS) and (
        isinstance(getattr(generator, "all_pages", None), list)
    )


def _attention_without_per_length_setup(torch: Any) -> None:
    """Keep torch's SDPA off its cuDNN backend (exllamav2's attention without flash-attn).

    Without flash-attn, exllamav2 attends through `scaled_dot_product_attention` with a
    dense mask, for which torch picks cuDNN on Hopper; cuDNN builds a graph for every new
    key length (46.6 ms each on an H100, against 0.12 ms for the memory-efficient kernel),
    and a decode step has a new key length until a process has seen them all: a fresh
    server decoded 16 tokens/s instead of 175 (docs/benchmarks/gpu-proof-h100.md).
    """
    backends = getattr(getattr(torch, "backends", None), "cuda", None)
    disable = getattr(backends, "enable_cudnn_sdp", None)
    if callable(disable):
        disable(False)
        log.info("exllamav2 without flash-attn: torch's cuDNN attention is off (per-length setup)")


def _import_torch_with_cuda() -> Any:
    """torch, once CUDA is known to work: checked before importing exllamav2, whose
    import would otherwise try (for minutes) to build its CUDA extension and fail."""
    try:
        import torch
    except ImportError as exc:
        raise ExLlamaV2LoadError(f"{INSTALL_HINT}: torch is not installed") from exc
    if not torch.cuda.is_available():
        detail = (
            "this torch build has no CUDA support"
            if torch.version.cuda is None
            else "torch sees no CUDA device"
        )
        raise ExLlamaV2LoadError(f"{INSTALL_HINT}: {detail}")
    return torch
