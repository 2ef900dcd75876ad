"""The baseline: exllamav2's own `ExLlamaV2DynamicGenerator` in a loop, no server in between.

The same model, cache (FP16, autosplit, the same size), paging and batch size as
the engine picks, and greedy sampling, so the only difference from the served
numbers is everything realtime adds: the engine thread, the pipeline, the
transports and the client.
"""

from __future__ import annotations

import importlib
import time
from dataclasses import dataclass
from typing import Any


@dataclass
class Decode:
    tokens: int
    ttft_s: float
    #: (tokens - 1) / (last token - first token): the decode rate, without the prefill
    tokens_per_s: float


@dataclass
class Aggregate:
    streams: int
    tokens: int
    seconds: float

    @property
    def tokens_per_s(self) -> float:
        return self.tokens / self.seconds if self.seconds > 0 else 0.0


class BareGenerator:
    """Loads the model the way the engine does, then runs jobs straight through `iterate()`."""

    def __init__(self, model_dir: str, *, cache_size: int, paged: bool | None = None):
        self._torch = importlib.import_module("torch")
        exl = importlib.import_module("exllamav2")
        attn = importlib.import_module("exllamav2.attn")
        gen = importlib.import_module("exllamav2.generator")
        config = exl.ExLlamaV2Config(model_dir)
        config.arch_compat_overrides()
        self.model = exl.ExLlamaV2(config)
        self.cache = exl.ExLlamaV2Cache(self.model, max_seq_len=cache_size, lazy=True)
        self.model.load_autosplit(self.cache)
        tokenizer = exl.ExLlamaV2Tokenizer(config)
        if paged is None:
            paged = bool(attn.has_flash_attn_with_paged) and not config.no_flash_attn
        self.paged = paged
        self.generator = gen.ExLlamaV2DynamicGenerator(
            model=self.model,
            cache=self.cache,
            tokenizer=tokenizer,
            max_batch_size=None if paged else 1,
            paged=paged,
        )
        self._job_class = gen.ExLlamaV2DynamicJob
        self._settings = _greedy(gen.ExLlamaV2Sampler.Settings())
        self._serial = 0

    def _job(self, prompt: list[int], max_new_tokens: int) -> Any:
        self._serial += 1
        return self._job_class(
            input_ids=self._torch.tensor([prompt], dtype=self._torch.long),
            max_new_tokens=max_new_tokens,
            gen_settings=self._settings,
            stop_conditions=[],  # ignore EOS, as the served requests do
            identifier=self._serial,
        )

    def _run(self, jobs: list[Any]) -> dict[int, list[float]]:
        """Enqueue `jobs`, iterate until all end; each job's token arrival times."""
        arrivals: dict[int, list[float]] = {job.identifier: [] for job in jobs}
        for job in jobs:
            self.generator.enqueue(job)
        remaining = len(jobs)
        while remaining:
            for result in self.generator.iterate():
                if result.get("stage") != "streaming":
                    continue
                now = time.perf_counter()
                ids = result.get("token_ids")
                count = int(ids.shape[-1]) if ids is not None else 0
                arrivals[result["identifier"]].extend([now] * count)
                if result.get("eos"):
                    remaining -= 1
        return arrivals

    def warm_up(self, prompt: list[int], tokens: int) -> Decode:
        """The first pass over each sequence length pays for kernel setup (without
        flash-attn, torch's attention sets up per new key length): a full-length run
        first, reported on its own as the first pass, so the decode numbers are steady."""
        return self.decode(prompt, tokens)

    def decode(self, prompt: list[int], tokens: int) -> Decode:
        start = time.perf_counter()
        (arrivals,) = self._run([self._job(prompt, tokens)]).values()
        span = arrivals[-1] - arrivals[0]
        rate = (len(arrivals) - 1) / span if span > 0 else 0.0
        return Decode(len(arrivals), arrivals[0] - start, rate)

    def aggregate(self, prompt: list[int], streams: int, tokens: int) -> Aggregate:
        start = time.perf_counter()
        arrivals = self._run([self._job(prompt, tokens) for _ in range(streams)])
        total = sum(len(times) for times in arrivals.values())
        return Aggregate(streams, total, time.perf_counter() - start)

    def close(self) -> None:
        self.generator.clear_queue()
        unload = getattr(self.model, "unload", None)
        if unload is not None:
            unload()
        del self.generator, self.cache, self.model  # the cache's GPU memory goes with them
        cuda = getattr(self._torch, "cuda", None)
        if cuda is not None and cuda.is_available() and hasattr(cuda, "empty_cache"):
            try:
                cuda.empty_cache()
            except RuntimeError:  # the dry run's fake CUDA
                pass


def _greedy(settings: Any) -> Any:
    """The sampler settings the engine uses for temperature 0 (see engine/exllamav2/backend.py)."""
    settings.temperature = 1.0
    settings.top_k = 1
    settings.top_p = 1.0
    settings.min_p = 0.0
    settings.top_a = 0.0
    settings.tfs = 0.0
    settings.typical = 0.0
    settings.skew = 0.0
    settings.smoothing_factor = 0.0
    settings.min_temp = 0.0
    settings.max_temp = 0.0
    settings.temperature_last = False
    settings.mirostat = False
    settings.xtc_probability = 0.0
    settings.dry_multiplier = 0.0
    settings.token_repetition_penalty = 1.0
    settings.token_presence_penalty = 0.0
    settings.token_frequency_penalty = 0.0
    return settings
