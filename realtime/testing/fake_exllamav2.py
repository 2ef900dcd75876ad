"""A fake of the parts of exllamav2 the `exllamav2` engine uses, so it is tested without CUDA.

Follows exllamav2 0.3.2: generator/dynamic.py (ExLlamaV2DynamicGenerator,
ExLlamaV2DynamicJob), generator/sampler.py (ExLlamaV2Sampler.Settings and its
defaults), exllamav2_ext/ext_sampling.cpp and cpp/sampling.cpp (`sample_basic`),
config.py, model.py, cache.py, attn.py and tokenizer/tokenizer.py. Written from
reading that source; no code is copied. `install()` puts it into `sys.modules` as
"exllamav2", "exllamav2.generator", "exllamav2.generator.dynamic" (this module)
and "exllamav2.attn". It lives in the package, not under tests/, because the GPU
proof's dry run (`scripts/gpu-proof --dry-run`) serves it too.

Reproduced, as the source does it:
- job construction checks: input_ids must be CPU tensors of shape (1, n) with
  n > 0 (AssertionError), stop_conditions items must be int or str (ValueError),
  a fresh `random.Random(seed)` per job drawing one number per sampled token;
- generator construction checks: paged mode needs flash-attn with paged
  attention and `config.no_flash_attn` False, the 8-bit cache is refused,
  `max_batch_size * max_q_size` within the model's input size, cache batch size 1
  and length a multiple of 256, `max_chunk_size` at most `max_input_len` and, when
  paged, a multiple of the page size; the default `max_batch_size`;
- `enqueue` hashing the prompt's full pages (blake2b chained over int64 ids) and
  asserting the job fits the cache ("Job requires N pages"), returning the serial;
- `iterate()`: start pending jobs that fit the batch and the free pages (with
  `max_skips`), one prefill chunk per started job (chunks end on page bounds;
  full pages already in the cache are skipped and counted as cached), then one
  decode step for every job whose prefill is done, in the same call, as one batch;
  result dicts per stage with the source's keys and types ("started",
  "prefill" with curr/max_progress, "streaming" with token_ids (1, n) long,
  token_probs (1, n) float, top_k_tokens / top_k_probs (1, n, k), and at eos
  eos_reason, eos_triggering_token_id/_str, full_completion, new_tokens,
  prompt_tokens, time_*, cached_pages, cached_tokens and "held");
- hold-back: tokens whose text has an incomplete UTF-8 character are held (the
  result carries no tokens) until the text decodes; at a stop token nothing is
  emitted and the held tokens plus the stop token are reported under "held"; at
  max_new_tokens everything held is emitted;
- min_new_tokens banning every stop token (logit -1e30) until enough tokens exist;
- the page table (`CachePage`, dynamic.py lines 60-169): a prompt's full pages
  are allocated by hash (`_tensor_hash_checksum`, looked up in this module at call
  time), so a later job with the same prefix reuses them; pages a job fills while
  decoding are hashed when complete; free pages are taken least recently used
  first; a page taken for new tokens is backed up and reverts if the job never
  wrote it; a freed page whose hash is taken loses its chain (`prev_hash` None)
  but keeps its KV; prefill copies the longest matching start of any page chained
  on the same previous page (none, at the start of a prompt) into a partial page
  (the "partial last page" copy); unpaged, the one page's tokens up to
  `kv_position_revert` are matched against the next prompt;
- `cancel(job)`: a pending job is dropped, an active job's pages are freed; no
  result ever names it again; `clear_queue()`, `reset_page_table()`,
  `num_remaining_jobs()`;
- sampling: repetition / presence / frequency penalties over the whole sequence,
  banned stop tokens, `token_bias` (must be the padded vocabulary's size), logits
  past the tokenizer's vocabulary masked, temperature < 0.01 meaning top_k = 1,
  softmax, top_k, top_p (largest tokens whose mass stays within top_p), min_p,
  top-k outputs sorted with zero-probability filler ids, multinomial draw at
  `random * 0.9998`, the chosen token's final probability;
- filters (`ExLlamaV2Filter`'s API, called as generator/dynamic.py and
  generator/sampler.py call them; see `_sample` and `receive_sample`): before a
  job's first sample `background_drop()` then `begin("")`; after the blocked
  tokens and the token bias, either every filter's prepared mask
  (`get_next(mask=True)` must be True, then `mask_logits` on the job's flat
  logits row) when all `can_mask_logits()`, or the intersection of their
  `get_next()` pass tokens and the union of their end tokens (a single passing
  token is taken without sampling when no top tokens are asked for;
  `filter_prefer_eos`), and `end_filter` when the sampled token is an end token;
  then `feed` with the sampled token as a (1, 1) tensor, and the filters queued
  for `background_prepare_logit_mask` (or `background_next`) on the generator's
  filter pool, started right after the next decode pass is launched; a job ends
  with `eos_reason` "end_filter" after the stop-token and length checks.

Not reproduced (using them raises NotImplementedError, so a test cannot silently
rely on them): stop strings and banned strings, token healing, CFG,
embeddings, logits output, draft models and n-gram drafting, and the samplers
typical, tfs, top_a, mirostat, XTC, DRY, smoothing, skew, dynamic temperature and
temperature_last. Also not modelled: defragmentation (it moves KV between pages
and renumbers them; pages keep their identity) and the timing of a real GPU.

The "model" is `state.logits_fn(sequence, prompt_length)`, a deterministic
function tests can replace; `state.forwards` counts every forward
pass per job identifier, `state.copies` every partial page copied, each job's
`reused` (pages and their writers then) say whose KV was reused by whom,
`state.fail_next` makes the next forward pass raise, and `state.step_gate` holds
the engine thread at the end of each `iterate()`.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import random
import sys
import threading
import time
import types
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import torch

__version__ = "0.3.2"
PAGED_PAGE_SIZE = 256

LogitsFn = Callable[[list[int], int], list[float]]


def default_logits(sequence: list[int], prompt_length: int) -> list[float]:
    """A deterministic stand-in model over a 512-token vocabulary: a peaked distribution."""
    favourite = (sum(sequence[-2:]) * 31 + 7) % 256
    logits = [0.0] * 512
    logits[favourite] = 6.0
    logits[(favourite + 1) % 256] = 4.0
    return logits


@dataclass
class FakeState:
    """Everything the fake built or did, for tests to inspect and steer."""

    paged_attention: bool = True
    cuda: bool = True
    logits_fn: LogitsFn = default_logits
    #: (stage, identifier, number of tokens) for every forward pass: "prefill" or "gen".
    forwards: list[tuple[str, Any, int]] = field(default_factory=list)
    #: (stage, exception): the next forward pass of that stage raises it.
    fail_next: tuple[str, BaseException] | None = None
    #: When set, every iterate() takes a permit after its work, before returning: a
    #: test holds the engine thread between two steps and releases it when it wants.
    step_gate: threading.Semaphore | None = None
    #: (identifier, source page index, tokens) for every partial page copied in prefill.
    copies: list[tuple[Any, int, int]] = field(default_factory=list)
    generators: list[ExLlamaV2DynamicGenerator] = field(default_factory=list)
    models: list[ExLlamaV2] = field(default_factory=list)
    caches: list[ExLlamaV2CacheBase] = field(default_factory=list)
    jobs: list[ExLlamaV2DynamicJob] = field(default_factory=list)

    def work_for(self, identifier: Any) -> int:
        """Forward passes that included the job with this identifier."""
        return sum(1 for _, ident, _ in self.forwards if ident == identifier)

    def open_gate(self) -> None:
        """Stop gating steps, and let a step waiting at the gate return."""
        gate, self.step_gate = self.step_gate, None
        if gate is not None:
            gate.release(1000)

    @property
    def generator(self) -> ExLlamaV2DynamicGenerator:
        assert self.generators, "no generator was built"
        return self.generators[-1]


state = FakeState()


# --- exllamav2.attn ---


def assert_paged_attn() -> None:
    assert state.paged_attention, "Paged attention required Flash Attention 2.5.7 or later"


# --- exllamav2.config / model / cache ---


class ExLlamaV2Config:
    def __init__(self, model_dir: str | None = None):
        self.max_batch_size = 1
        self.max_input_len = 2048
        self.max_attention_size = 2048**2
        self.no_flash_attn = "EXLLAMA_NO_FLASH_ATTN" in os.environ
        self.compat_overrides_applied = False
        self.model_dir: str | None
        if model_dir is not None:
            self.model_dir = model_dir
            self.prepare()
        else:
            self.model_dir = None

    def prepare(self) -> None:
        assert self.model_dir is not None, "No model_dir specified in ExLlamaV2Config"
        assert os.path.exists(self.model_dir), "Can't find " + self.model_dir
        with open(os.path.join(self.model_dir, "config.json"), encoding="utf-8") as f:
            config = json.load(f)
        self.vocab_size = int(config.get("vocab_size", 32000))
        self.max_seq_len = 2048
        for key in (
            "max_sequence_length",
            "model_max_length",
            "max_position_embeddings",
            "max_seq_len",
            "n_positions",
        ):
            if key in config:
                self.max_seq_len = int(config[key])
                break
        eos = config.get("eos_token_id")
        self.eos_token_id = eos[0] if isinstance(eos, list) else eos
        self.bos_token_id = config.get("bos_token_id")

    def arch_compat_overrides(self, quiet: bool = False, warn_only: bool = False) -> None:
        self.compat_overrides_applied = True


class ExLlamaV2:
    def __init__(self, config: ExLlamaV2Config, lazy_load: bool = False):
        self.config = config
        self.loaded = False
        self.gpu_split: list[float] | None = None
        self.autosplit_cache: ExLlamaV2CacheBase | None = None
        state.models.append(self)

    def load(self, gpu_split: list[float] | None = None, lazy: bool = False, **kwargs: Any) -> None:
        self.gpu_split = gpu_split
        self.loaded = True

    def load_autosplit(self, cache: ExLlamaV2CacheBase, **kwargs: Any) -> None:
        # The source's docstring: the cache must be constructed with lazy = True.
        assert cache.lazy, "load_autosplit needs a cache constructed with lazy = True"
        self.config.max_input_len = min(self.config.max_input_len, self.config.max_seq_len)
        self.autosplit_cache = cache
        self.loaded = True

    def unload(self) -> None:
        self.loaded = False


class ExLlamaV2CacheBase:
    def __init__(self, model: ExLlamaV2, batch_size: int, max_seq_len: int, lazy: bool):
        self.model = model
        self.max_seq_len = max_seq_len if max_seq_len != -1 else model.config.max_seq_len
        self.batch_size = batch_size
        self.lazy = lazy
        state.caches.append(self)


class ExLlamaV2Cache(ExLlamaV2CacheBase):
    def __init__(
        self,
        model: ExLlamaV2,
        batch_size: int = 1,
        max_seq_len: int = -1,
        copy_from: Any = None,
        lazy: bool = False,
        **kwargs: Any,
    ):
        super().__init__(model, batch_size, max_seq_len, lazy)


class ExLlamaV2Cache_8bit(ExLlamaV2Cache):
    pass


class ExLlamaV2Cache_Q(ExLlamaV2Cache):
    pass


class ExLlamaV2Cache_Q4(ExLlamaV2Cache_Q):
    pass


class ExLlamaV2Cache_Q6(ExLlamaV2Cache_Q):
    pass


class ExLlamaV2Cache_Q8(ExLlamaV2Cache_Q):
    pass


# --- exllamav2.tokenizer ---


class ExLlamaV2Tokenizer:
    """A byte-level vocabulary: ids 0-255 are bytes, higher ids are named tokens.

    Config EOS/BOS ids are special: their piece is "" unless special tokens are
    included, as for the real tokenizer. A lone byte >= 0x80 decodes to U+FFFD,
    which is what makes the generator hold incomplete characters back.
    """

    def __init__(self, config: ExLlamaV2Config, lazy_init: bool = True, **kwargs: Any):
        self.config = config
        self.eos_token_id = config.eos_token_id
        self.bos_token_id = config.bos_token_id
        self.special = {t for t in (config.eos_token_id, config.bos_token_id) if t is not None}

    def get_vocab_size(self) -> int:
        return int(self.config.vocab_size)

    def _piece(self, token_id: int, include_special: bool) -> str:
        if token_id < 256:
            return bytes([token_id]).decode("utf-8", errors="replace")
        if token_id in self.special and not include_special:
            return ""
        return f"<|{token_id}|>"

    def get_id_to_piece_list(self, include_special_tokens: bool = False) -> list[str]:
        return [self._piece(t, include_special_tokens) for t in range(self.get_vocab_size())]

    def decode(self, ids: torch.Tensor, decode_special_tokens: bool = False) -> Any:
        if ids.dim() > 1:
            return [self.decode(row, decode_special_tokens) for row in ids]
        data = b""
        for t in ids.tolist():
            if t < 256:
                data += bytes([t])
            else:
                data += self._piece(t, decode_special_tokens).encode()
        return data.decode("utf-8", errors="replace")


# --- exllamav2.generator.sampler ---


class ExLlamaV2Sampler:
    @dataclass
    class Settings:
        # exllamav2 0.3.2's defaults, which are not OpenAI's.
        token_repetition_penalty: float = 1.025
        token_repetition_range: int = -1
        token_repetition_decay: int = 0
        token_frequency_penalty: float = 0.0
        token_presence_penalty: float = 0.0
        temperature: float = 0.8
        smoothing_factor: float = 0.0
        min_temp: float = 0
        max_temp: float = 0.0
        temp_exponent: float = 1.0
        top_k: int = 50
        top_p: float = 0.8
        top_a: float = 0.0
        min_p: float = 0
        tfs: float = 0
        typical: float = 0
        skew: float = 0
        temperature_last: bool = False
        mirostat: bool = False
        mirostat_tau: float = 1.5
        mirostat_eta: float = 0.1
        mirostat_mu: float | None = None
        token_bias: torch.Tensor | None = None
        cfg_scale: float | None = None
        post_sampling_hooks: list[Any] = field(default_factory=list)
        dry_allowed_length: int = 2
        dry_base: float = 1.75
        dry_multiplier: float = 0.0
        dry_sequence_breakers: set[int] | None = None
        dry_range: int = 0
        dry_max_ngram: int = 20
        xtc_probability: float = 0.0
        xtc_threshold: float = 0.1
        xtc_ignore_tokens: frozenset[int] | None = None

        @staticmethod
        def greedy(**kwargs: Any) -> ExLlamaV2Sampler.Settings:
            defaults: dict[str, Any] = {
                "temperature": 1.0,
                "token_repetition_penalty": 1.0,
                "top_p": 0.0,
                "top_k": 1,
            }
            defaults.update(kwargs)
            return ExLlamaV2Sampler.Settings(**defaults)


def _check_modelled(s: ExLlamaV2Sampler.Settings) -> None:
    unmodelled = {
        "typical": 0.0 < s.typical < 1.0,
        "tfs": 0.0 < s.tfs < 1.0,
        "top_a": s.top_a > 0.0,
        "mirostat": s.mirostat,
        "xtc_probability": s.xtc_probability > 0.0,
        "dry_multiplier": s.dry_multiplier > 0.0,
        "smoothing_factor": s.smoothing_factor > 0.0,
        "skew": s.skew != 0.0,
        "max_temp": s.max_temp > s.min_temp,
        "temperature_last": s.temperature_last,
        "cfg_scale": s.cfg_scale is not None,
        "token_repetition_decay": s.token_repetition_decay != 0,
        "post_sampling_hooks": bool(s.post_sampling_hooks),
    }
    used = [name for name, on in unmodelled.items() if on]
    if used:
        raise NotImplementedError(f"the fake sampler does not model {used}")


def _sample(
    logits: list[float],
    s: ExLlamaV2Sampler.Settings,
    sequence: list[int],
    rand: float,
    tokenizer_vocab: int,
    return_top_tokens: int,
    blocked_tokens: list[int] | None,
    filters: list[Any] | None = None,
    filter_prefer_eos: bool = False,
    eos_token_id: int | None = None,
) -> tuple[int, list[int], list[float], float, bool]:
    """`ExLlamaV2Sampler.sample` + `sample_basic` for one row: token, top-k ids/probs,
    prob, and whether a filter ended (sampler.py, 0.3.2)."""
    _check_modelled(s)
    logits = list(logits)
    vocab = len(logits)
    if (
        s.token_repetition_penalty != 1.0
        or s.token_frequency_penalty != 0.0
        or s.token_presence_penalty != 0.0
    ):
        sustain = len(sequence) if s.token_repetition_range == -1 else s.token_repetition_range
        seen: set[int] = set()
        for t in reversed(sequence[max(len(sequence) - sustain, 0) :]):
            if t >= vocab:
                continue
            if t not in seen:
                if logits[t] > 0.0:
                    logits[t] /= s.token_repetition_penalty
                else:
                    logits[t] *= s.token_repetition_penalty
                logits[t] -= s.token_presence_penalty
                seen.add(t)
            logits[t] -= s.token_frequency_penalty
    if blocked_tokens:
        for t in blocked_tokens:
            logits[t] = -1e30
    if s.token_bias is not None:
        assert tuple(s.token_bias.shape) == (vocab,), (
            f"token_bias has shape {tuple(s.token_bias.shape)}, logits have {vocab} entries"
        )
        logits = [a + b for a, b in zip(logits, s.token_bias.tolist(), strict=True)]
    end_tokens: set[int] | None = None
    if filters and all(f.can_mask_logits() for f in filters):
        # sampler.py 436-444: each filter's precomputed mask, on the (1, 1, vocab) row.
        row = torch.tensor(logits, dtype=torch.float).view(1, 1, -1)
        for f in filters:
            assert f.get_next(mask=True) is True, (
                "Attempting to use precomputed logit mask, but filter is not precomputing mask"
            )
            flat = row[0][0]
            row = f.mask_logits(flat).view(1, 1, -1)
        logits = row.view(-1).tolist()
    elif filters:
        # sampler.py 446-491: intersect the pass tokens, unite the end tokens.
        pass_tokens: set[int] | None = None
        for f in filters:
            pt, et = f.get_next()
            if pt is not None:
                pass_tokens = set(pt) if pass_tokens is None else pass_tokens & set(pt)
                end_tokens = set(et) if end_tokens is None else end_tokens | set(et)
        if pass_tokens is not None:
            assert len(pass_tokens), "Filter excluded all tokens"
            if len(pass_tokens) == 1 and return_top_tokens == 0:
                (single,) = pass_tokens
                return single, [], [], 1.0, single in (end_tokens or set())
            if filter_prefer_eos and eos_token_id in pass_tokens:
                pass_tokens = {eos_token_id}
            logits = [v if t in pass_tokens else -math.inf for t, v in enumerate(logits)]
    for t in range(tokenizer_vocab, vocab):
        logits[t] = -math.inf

    temperature, top_k = s.temperature, s.top_k
    if temperature < 0.01:
        temperature, top_k = 1.0, 1
    top = max(logits)
    exps = [math.exp((v - top) / temperature) if v != -math.inf else 0.0 for v in logits]
    total = sum(exps)
    # (prob, id) candidates, kept in descending order of probability, ties by id.
    cands = sorted(((e / total, i) for i, e in enumerate(exps)), key=lambda c: (-c[0], c[1]))

    def normalize(kept: list[tuple[float, int]]) -> list[tuple[float, int]]:
        mass = sum(p for p, _ in kept)
        return [(p / mass, i) for p, i in kept]

    if 0 < top_k < vocab:
        cands = normalize(cands[:top_k])
    if len(cands) > 1 and 0.0 < s.top_p < 1.0:
        kept: list[tuple[float, int]] = []
        mass = 0.0
        for p, i in cands:
            if p < 1e-6 or (kept and mass + p > s.top_p):
                break
            kept.append((p, i))
            mass += p
        cands = normalize(kept or cands[:1])
    if len(cands) > 1 and 0.0 < s.min_p < 1.0:
        threshold = cands[0][0] * s.min_p
        cands = normalize([c for c in cands if c[0] >= threshold])

    top_ids: list[int] = []
    top_probs: list[float] = []
    if return_top_tokens:
        for p, i in cands[:return_top_tokens]:
            if p == 0.0:
                break
            top_ids.append(i)
            top_probs.append(p)
        candidate_ids = {i for _, i in cands}
        filler = 0
        while len(top_ids) < return_top_tokens:
            while filler in candidate_ids:
                filler += 1
            top_ids.append(filler)
            top_probs.append(0.0)
            filler += 1

    target = rand * 0.9998
    index, accum = 0, cands[0][0]
    while accum < target and index < len(cands) - 1:
        index += 1
        accum += cands[index][0]
    while index > 0 and cands[index][0] == 0.0:
        index -= 1
    prob, token = cands[index]
    end_filter = bool(filters) and end_tokens is not None and token in end_tokens
    return token, top_ids, top_probs, prob, end_filter


# --- exllamav2.generator.dynamic ---
#
# Line numbers below are exllamav2 0.3.2's exllamav2/generator/dynamic.py.


def _tensor_blake2b_checksum(tensor: torch.Tensor, prev_hash: bytes | None) -> bytes:
    """A page's hash, chained on the previous page's (lines 35-40)."""
    hasher = hashlib.blake2b(digest_size=16)
    if prev_hash is not None:
        hasher.update(prev_hash)
    hasher.update(tensor.numpy().tobytes())
    return hasher.digest()


#: Line 51. The job methods below call it through this module's globals, at call time,
#: as the source does: replacing the module attribute changes every later hash.
_tensor_hash_checksum = _tensor_blake2b_checksum

_uniquehash = 0


def _randomhash() -> bytes:
    """A unique placeholder hash for a page that holds no complete page (lines 53-57)."""
    global _uniquehash
    _uniquehash += 1
    return _uniquehash.to_bytes(16, byteorder="big")


def _count_match(page_tokens: list[int], ids: list[int], limit: int) -> int:
    """`ext_c.count_match`: leading tokens of `ids` equal to the page's first `limit`."""
    n = 0
    for a, b in zip(page_tokens[:limit], ids, strict=False):
        if a != b:
            break
        n += 1
    return n


@dataclass(eq=False)
class CachePage:
    """One page of the paged cache and its bookkeeping (lines 60-169).

    `sequence` holds the page's token ids (the source keeps a (1, page_size) tensor).
    `writers` is the fake's own record, for tests: the identifiers of the jobs whose
    KV the page holds. It follows the KV: cleared when the page is cleared, kept by
    backup and restored by revert.
    """

    generator: ExLlamaV2DynamicGenerator
    page_index: int
    phash: bytes
    phash_revert: bytes
    prev_hash: bytes | None
    prev_hash_revert: bytes | None
    sequence: list[int]
    ref_count: int = 0
    access_serial: int = 0
    access_serial_revert: int = 0
    kv_position: int = 0
    kv_position_revert: int = 0
    can_revert: bool = False
    writers: frozenset[Any] = frozenset()
    writers_revert: frozenset[Any] = frozenset()

    def backup(self) -> None:
        self.phash_revert = self.phash
        self.prev_hash_revert = self.prev_hash
        self.access_serial_revert = self.access_serial
        self.kv_position_revert = self.kv_position
        self.writers_revert = self.writers
        self.can_revert = True

    def revert(self) -> None:
        assert self.can_revert
        self.phash = self.phash_revert
        self.prev_hash = self.prev_hash_revert
        self.access_serial = self.access_serial_revert
        self.kv_position = self.kv_position_revert
        self.writers = self.writers_revert
        self.can_revert = False

    def add_ref(self, serial: int) -> None:
        gen = self.generator
        if self.ref_count == 0:
            del gen.unreferenced_pages[self.phash]
            assert self.phash not in gen.referenced_pages
            gen.referenced_pages[self.phash] = self
        self.ref_count += 1
        self.access_serial = max(serial, self.access_serial)
        self.can_revert = False

    def add_ref_clear(self, serial: int, newhash: bytes) -> None:
        gen = self.generator
        assert self.ref_count == 0
        del gen.unreferenced_pages[self.phash]
        self.phash = newhash
        assert self.phash not in gen.referenced_pages
        gen.referenced_pages[self.phash] = self
        self.ref_count += 1
        self.access_serial = serial
        self.prev_hash = None
        self.can_revert = False
        self.kv_position = 0
        self.writers = frozenset()

    def add_ref_unique(self, serial: int) -> None:
        gen = self.generator
        self.backup()
        assert self.ref_count == 0
        del gen.unreferenced_pages[self.phash]
        self.phash = _randomhash()
        assert self.phash not in gen.referenced_pages
        gen.referenced_pages[self.phash] = self
        self.ref_count += 1
        self.access_serial = serial
        self.prev_hash = None
        self.kv_position = 0
        self.writers = frozenset()

    def sub_ref(self) -> None:
        gen = self.generator
        self.ref_count -= 1
        if self.ref_count == 0:
            del gen.referenced_pages[self.phash]
            if self.can_revert:
                self.revert()
            if self.phash in gen.referenced_pages or self.phash in gen.unreferenced_pages:
                # The source keeps kv_position here: the page keeps its KV, now unchained.
                self.phash = _randomhash()
                self.prev_hash = None
            assert self.phash not in gen.unreferenced_pages
            gen.unreferenced_pages[self.phash] = self

    def clear(self) -> None:
        gen = self.generator
        assert self.ref_count == 0
        del gen.unreferenced_pages[self.phash]
        self.phash = _randomhash()
        self.prev_hash = None
        self.kv_position = 0
        self.can_revert = False
        self.sequence[:] = [0] * len(self.sequence)
        self.writers = frozenset()
        assert self.phash not in gen.unreferenced_pages
        gen.unreferenced_pages[self.phash] = self

    def update_hash(self, newhash: bytes) -> None:
        gen = self.generator
        assert self.ref_count > 0
        assert self.kv_position == gen.page_size
        del gen.referenced_pages[self.phash]
        self.phash = newhash
        self.can_revert = False
        assert self.phash not in gen.referenced_pages
        gen.referenced_pages[self.phash] = self

    def write(self, start: int, ids: list[int], writer: Any) -> None:
        """The fake's KV write: tokens at page offsets start.. (what the forward pass fills)."""
        self.sequence[start : start + len(ids)] = ids
        self.writers = self.writers | {writer}


class _Sequence:
    """`ExLlamaV2DynamicJob.Sequence` (lines 1517-1527), token ids as lists."""

    def __init__(self, ids: list[int]):
        self.input_ids = list(ids)
        self.sequence_ids = list(ids)
        self.kv_position = 0
        self.page_hashes: list[bytes] = []
        self.new_unique_pages = 0
        self.allocated_pages: list[CachePage] = []
        self.prefill_complete = False


class ExLlamaV2DynamicJob:
    def __init__(
        self,
        input_ids: Any,
        max_new_tokens: int,
        min_new_tokens: int = 0,
        max_skips: int | None = 4,
        gen_settings: ExLlamaV2Sampler.Settings | None = None,
        seed: int | None = None,
        stop_conditions: list[Any] | tuple[Any, ...] | set[Any] | None = None,
        decode_special_tokens: bool = False,
        return_top_tokens: int = 0,
        return_logits: bool = False,
        return_probs: bool = False,
        filters: list[Any] | None = None,
        filter_prefer_eos: bool = False,
        token_healing: bool = False,
        identifier: object | None = None,
        banned_strings: list[str] | None = None,
        embeddings: list[Any] | None = None,
        **kwargs: Any,
    ):
        # The source's first check, on whatever it was given (a list of ints fails here too).
        assert all(ids.device.type == "cpu" for ids in input_ids), (
            "input_ids must reside in system memory"
        )
        unmodelled = {
            "token_healing": token_healing,
            "banned_strings": bool(banned_strings),
            "embeddings": bool(embeddings),
            "return_logits": return_logits,
            "CFG (a list of input_ids)": isinstance(input_ids, list) and len(input_ids) != 1,
        }
        used = [name for name, on in unmodelled.items() if on]
        if used:
            raise NotImplementedError(f"the fake job does not model {used}")
        ids = input_ids[0] if isinstance(input_ids, list) else input_ids
        assert ids.shape[-1] > 0, "Input IDs cannot be empty."
        assert ids.shape[0] == 1, (
            "input_ids must be [1, seq_len] tensor or list of [1, seq_len] tensors"
        )

        self.generator: ExLlamaV2DynamicGenerator | None = None
        self.serial_number: int | None = None
        self.identifier = identifier
        self.max_skips = max_skips
        self.sequences = [_Sequence([int(t) for t in ids[0].tolist()])]
        self.max_new_tokens = max_new_tokens
        self.min_new_tokens = min_new_tokens
        self.new_tokens = 0
        self.gen_settings = (
            gen_settings if gen_settings is not None else ExLlamaV2Sampler.Settings()
        )
        self.seed = seed
        self.rng = random.Random() if seed is None else random.Random(seed)
        self.decode_special_tokens = decode_special_tokens
        self.return_top_tokens = return_top_tokens
        self.return_probs = return_probs

        self.stop_tokens: set[int] = set()
        self.stop_strings: set[str] = set()
        if stop_conditions is not None:
            for t in stop_conditions:
                if isinstance(t, int):
                    self.stop_tokens.add(t)
                elif isinstance(t, str):
                    self.stop_strings.add(t)
                else:
                    raise ValueError("Unsupported type in stop_conditions")
        if self.stop_strings:
            raise NotImplementedError("the fake job does not model stop strings")
        self.stop_tokens_list = list(self.stop_tokens)
        # Lines 1799-1802.
        self.filters: list[Any] = filters if filters is not None else []
        self.filter_prefer_eos = filter_prefer_eos

        self.time_enqueue: float | None = None
        self.time_first_prefill: float | None = None
        self.time_first_token: float | None = None
        self.cached_pages = 0
        self.cached_tokens = 0
        self.all_unique_hashes: list[bytes] = []
        #: The fake's record, for tests: every page whose KV this job used without
        #: computing it (whole pages found by hash, and partial pages copied from),
        #: with the page's writers at that moment.
        self.reused: list[tuple[CachePage, frozenset[Any]]] = []
        state.jobs.append(self)

    def __repr__(self) -> str:
        if self.serial_number is None:
            return "ExLlamaV2DynamicJob (new)"
        return f"ExLlamaV2DynamicJob #{self.serial_number}"

    # The one sequence's fields, for tests (a real job has `sequences` only).

    @property
    def input_ids(self) -> list[int]:
        return self.sequences[0].input_ids

    @property
    def sequence_ids(self) -> list[int]:
        return self.sequences[0].sequence_ids

    # --- queueing and pages ---

    def prepare_for_queue(self, generator: ExLlamaV2DynamicGenerator, serial_number: int) -> None:
        """Lines 2244-2318: hash the prompt's full pages, check the job can ever fit."""
        self.serial_number = serial_number
        self.generator = generator
        self.skips = 0
        page_size = generator.page_size
        unique: set[bytes] = set()
        seq = self.sequences[0]
        max_len = len(seq.sequence_ids) + self.max_new_tokens
        context_pages = (len(seq.sequence_ids) - 1) // page_size
        total_pages = (max_len + page_size - 1) // page_size
        seq.page_hashes = []
        r_hash = None
        for i in range(context_pages):
            page_ids = torch.tensor(
                [seq.sequence_ids[i * page_size : (i + 1) * page_size]], dtype=torch.long
            )
            r_hash = _tensor_hash_checksum(page_ids, r_hash)
            seq.page_hashes.append(r_hash)
            unique.add(r_hash)
        seq.new_unique_pages = total_pages - context_pages
        self.all_unique_hashes = list(unique)
        needed = len(self.all_unique_hashes) + seq.new_unique_pages
        assert needed <= generator.max_pages, (
            f"Job requires {needed} pages (only {generator.max_pages} available) and cannot "
            f"be enqueued. Total cache allocated is {generator.max_pages} * {page_size} = "
            f"{generator.max_total_tokens} tokens"
        )
        self.held_text = ""
        self.held_tokens: list[int] = []
        self.held_probs: list[float] = []
        self.held_k_tokens: list[list[int]] = []
        self.held_k_probs: list[list[float]] = []
        self.full_completion = ""

    def current_new_pages_required(self) -> int:
        assert self.generator is not None
        new_pages = sum(
            1 for h in self.all_unique_hashes if h not in self.generator.referenced_pages
        )
        return new_pages + sum(seq.new_unique_pages for seq in self.sequences)

    def allocate_pages(self) -> None:
        """Lines 2534-2629: pages by hash (cached or cleared for this job), then new ones."""
        gen = self.generator
        assert gen is not None
        page_size = gen.page_size
        for seq in self.sequences:
            seq.allocated_pages = []
            for h in seq.page_hashes:
                gen.access_serial += 1
                page = gen.referenced_pages.get(h) or gen.unreferenced_pages.get(h)
                if page is not None:
                    page.add_ref(gen.access_serial)
                else:
                    page = gen.oldest_unreferenced_page()
                    page.add_ref_clear(gen.access_serial, h)
                seq.allocated_pages.append(page)
            for _ in range(seq.new_unique_pages):
                gen.access_serial += 1
                page = gen.oldest_unreferenced_page()
                page.add_ref_unique(gen.access_serial)
                seq.allocated_pages.append(page)
            for page in seq.allocated_pages:
                if page.kv_position != page_size:
                    break
                seq.kv_position += page_size
                self.cached_pages += 1
                self.reused.append((page, page.writers))

    def deallocate_pages(self) -> None:
        """Lines 2631-2642. Unpaged, the one page keeps what it holds for the next job."""
        gen = self.generator
        assert gen is not None
        if not gen.paged:
            gen.all_pages[0].backup()
        for seq in self.sequences:
            for page in seq.allocated_pages:
                page.sub_ref()
            seq.allocated_pages = []

    # --- prefill and decode ---

    def is_prefill_done(self) -> bool:
        return all(seq.kv_position == len(seq.sequence_ids) - 1 for seq in self.sequences)

    def prefill(self, results: list[dict[str, Any]]) -> None:
        """Lines 2330-2519: one chunk of the prompt, reusing what the cache holds."""
        gen = self.generator
        assert gen is not None
        page_size = gen.page_size
        if self.time_first_prefill is None:
            self.time_first_prefill = time.time()
        progress = 0
        for seq in self.sequences:
            if seq.prefill_complete:
                continue
            end_of_prompt = len(seq.sequence_ids) - 1
            if gen.paged:
                start = seq.kv_position
                end = (start + gen.max_chunk_size) // page_size * page_size
                end = min(end, end_of_prompt)
                p0, p1 = start // page_size, (end + page_size - 1) // page_size
                # Whole pages at the start of the chunk another job completed: cached.
                for index in range(p0, p1):
                    page = seq.allocated_pages[index]
                    if page.kv_position != page_size:
                        break
                    start = (index + 1) * page_size
                    seq.kv_position = start
                    self.cached_pages += 1
                    self.reused.append((page, page.writers))
                    page.can_revert = False
                # ... and the chunk stops at the next one.
                for index in range(start // page_size, p1):
                    if seq.allocated_pages[index].kv_position == page_size:
                        end = index * page_size
                        break
                if end <= start:
                    continue
                ids = seq.sequence_ids[start:end]
                p0, p1 = start // page_size, end // page_size
                if start == p0 * page_size:
                    # A partial page: any page in the cache chained on the same previous
                    # page (or, at the start, on none) whose tokens begin the same way.
                    prev_hash = None if p0 == 0 else seq.allocated_pages[p0 - 1].phash
                    best, best_page = 0, None
                    for page in gen.all_pages:
                        if page.prev_hash != prev_hash or page is seq.allocated_pages[p0]:
                            continue
                        match = _count_match(page.sequence, ids, page.kv_position)
                        if match > best:
                            best, best_page = match, page
                    if best_page is not None and best > 1:
                        page = seq.allocated_pages[p0]
                        page.prev_hash = best_page.prev_hash
                        page.sequence[:best] = ids[:best]
                        page.writers = best_page.writers  # the KV copied is theirs
                        page.kv_position = best
                        page.can_revert = False
                        state.copies.append((self.identifier, best_page.page_index, best))
                        self.reused.append((best_page, best_page.writers))
                        ids = ids[best:]
                        start += best
                        seq.kv_position += best
                        self.cached_tokens += best
                        progress += best
            else:
                start = seq.kv_position
                progress = start
                page = gen.all_pages[0]
                ids = seq.sequence_ids[start:end_of_prompt]
                if start == 0:
                    match = _count_match(
                        page.sequence, ids, min(page.kv_position_revert, end_of_prompt)
                    )
                    if match:
                        # The KV kept is the previous job's (the backup's), now this job's too.
                        self.reused.append((page, page.writers_revert))
                        page.writers = page.writers_revert
                    ids = ids[match:]
                    seq.kv_position = page.kv_position = start = match
                    self.cached_tokens += match
                    progress += match
                end = min(seq.kv_position + gen.max_chunk_size, end_of_prompt)
                if end <= start:
                    seq.prefill_complete = True
                    continue
                assert page.can_revert
                ids = ids[: gen.max_chunk_size]
                p0 = p1 = 0

            if end > start:
                gen.forward("prefill", [self], end - start)
                seq.kv_position = end
                if gen.paged:
                    for index in range(p0, min(p1 + 1, len(seq.allocated_pages))):
                        page = seq.allocated_pages[index]
                        page.kv_position = min(max(end - index * page_size, 0), page_size)
                        previous = seq.allocated_pages[index - 1] if index else None
                        page.prev_hash = previous.phash if previous is not None else None
                        a = max(index * page_size, start)
                        b = min(index * page_size + page_size, end)
                        if b > a:
                            offset = a - index * page_size
                            page.write(offset, seq.sequence_ids[a:b], self.identifier)
                        page.can_revert = False
                else:
                    page = seq.allocated_pages[0]
                    page.kv_position = end
                    page.prev_hash = None
                    page.write(start, seq.sequence_ids[start:end], self.identifier)
                progress += end - start
                if progress >= end_of_prompt:
                    seq.prefill_complete = True
                    if not gen.paged:
                        seq.allocated_pages[0].can_revert = False
        if progress:
            seq = self.sequences[0]
            r: dict[str, Any] = {
                "job": self,
                "stage": "prefill",
                "eos": False,
                "curr_progress": seq.kv_position,
                "max_progress": len(seq.sequence_ids) - 1,
                "serial": self.serial_number,
            }
            if self.identifier is not None:
                r["identifier"] = self.identifier
            results.append(r)

    def get_input_ids_list(
        self, draft_tokens: Any = None, idx: int = 0, add_to_cache: bool = False
    ) -> list[torch.Tensor]:
        """Lines 1832-1854: the decode step's input; with add_to_cache its KV goes into
        the page *before* the forward pass."""
        gen = self.generator
        assert gen is not None
        assert draft_tokens is None, "the fake does not model drafting"
        out = []
        for seq in self.sequences:
            ids = seq.sequence_ids[seq.kv_position :]
            out.append(torch.tensor([ids], dtype=torch.long))
            if add_to_cache:
                position = seq.kv_position
                while ids:
                    page = seq.allocated_pages[position // gen.page_size]
                    assert page.ref_count == 1
                    n = min(len(ids), gen.page_size - page.kv_position)
                    page.write(page.kv_position, ids[:n], self.identifier)
                    page.kv_position += n
                    position += n
                    ids = ids[n:]
                    page.can_revert = False
        return out

    def receive_logits(
        self, logits: list[float]
    ) -> tuple[int, list[int], list[float], float, bool]:
        """Lines 1855-1902: start the filters before the first sample, ban stop tokens
        before min_new_tokens, sample (with the filters)."""
        gen = self.generator
        assert gen is not None
        if self.new_tokens == 0:
            for f in self.filters:
                f.background_drop()
                f.begin("")
        blocked = self.stop_tokens_list if self.new_tokens < self.min_new_tokens else None
        return _sample(
            logits,
            self.gen_settings,
            self.sequence_ids,
            self.rng.random(),
            gen.tokenizer.get_vocab_size(),
            self.return_top_tokens,
            blocked,
            self.filters,
            self.filter_prefer_eos,
            gen.tokenizer.eos_token_id,
        )

    def receive_sample(
        self,
        token: int,
        top_ids: list[int],
        top_probs: list[float],
        prob: float,
        results: list[Any],
        filter_eos: bool = False,
    ) -> bool:
        """Lines 1905-2003 (the fake takes the sampled token as ints): feed the filters
        and queue them for the next mask, accept the token, hash a page it completes,
        then stream (the `emit` closure)."""
        gen = self.generator
        assert gen is not None
        page_size = gen.page_size
        # Lines 1918-1935: feed, then queue a background mask (or pass list) per filter.
        all_mask = True
        for f in self.filters:
            f.feed(torch.tensor([[token]], dtype=torch.long))
            if not f.can_mask_logits() or not f.use_background_worker():
                all_mask = False
        if gen.filter_queue is not None:
            for f in self.filters:
                if all_mask:
                    gen.filter_queue.append((f, True))
                elif f.use_background_worker():
                    gen.filter_queue.append((f, False))
        self.new_tokens += 1
        for seq in self.sequences:
            seq.sequence_ids.append(token)
            page_before = seq.kv_position // page_size
            seq.kv_position += 1
            page_after = seq.kv_position // page_size
            if page_after > page_before:
                page = seq.allocated_pages[page_before]
                last_hash = seq.allocated_pages[page_before - 1].phash if page_before else None
                page_ids = torch.tensor(
                    [seq.sequence_ids[page_before * page_size : page_after * page_size]],
                    dtype=torch.long,
                )
                new_hash = _tensor_hash_checksum(page_ids, last_hash)
                if new_hash in gen.referenced_pages:
                    # Another job holds the same page: share it and free this one.
                    serial = page.access_serial
                    page.sub_ref()
                    page = gen.referenced_pages[new_hash]
                    assert page.kv_position == page_size
                    seq.allocated_pages[page_before] = page
                    page.add_ref(serial)
                else:
                    if new_hash in gen.unreferenced_pages:
                        gen.unreferenced_pages[new_hash].clear()
                    page.update_hash(new_hash)
                following = seq.allocated_pages[page_after]
                following.prev_hash = new_hash
                following.can_revert = False

        pieces = gen.tokenizer.get_id_to_piece_list(self.decode_special_tokens)
        new_text = pieces[token]
        self.held_text += new_text
        self.held_tokens.append(token)
        if self.return_probs:
            self.held_probs.append(prob)
        if self.return_top_tokens > 0:
            self.held_k_tokens.append(top_ids)
            self.held_k_probs.append(top_probs)

        if token in self.stop_tokens:
            return self._emit(results, eos=True, reason="stop_token", stop_token=token)
        if self.new_tokens >= self.max_new_tokens:
            return self._emit(results, eos=True, emit_held=True, reason="max_new_tokens")
        if filter_eos:  # lines 2130-2133
            return self._emit(results, eos=True, emit_held=True, reason="end_filter")
        if 1 <= self.held_text.count("\ufffd") < 5:
            decoded = gen.tokenizer.decode(
                torch.tensor([self.held_tokens], dtype=torch.long), self.decode_special_tokens
            )[0]
            if "\ufffd" in decoded:
                return self._emit(results)
            self.held_text = decoded
        return self._emit(results, emit_held=True)

    def _held_tensors(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if self.held_text:
            out["text"] = self.held_text
        if self.held_tokens:
            out["token_ids"] = torch.tensor([self.held_tokens], dtype=torch.long)
        if self.held_probs:
            out["token_probs"] = torch.tensor([self.held_probs], dtype=torch.float)
        if self.held_k_tokens:
            out["top_k_tokens"] = torch.tensor([self.held_k_tokens], dtype=torch.long)
            out["top_k_probs"] = torch.tensor([self.held_k_probs], dtype=torch.float)
        return out

    def _emit(
        self,
        results: list[dict[str, Any]],
        *,
        eos: bool = False,
        reason: str | None = None,
        emit_held: bool = False,
        stop_token: int | None = None,
    ) -> bool:
        gen = self.generator
        assert gen is not None
        r: dict[str, Any] = {
            "job": self,
            "stage": "streaming",
            "eos": eos,
            "serial": self.serial_number,
        }
        if reason is not None:
            r["eos_reason"] = reason
            if reason == "stop_token":
                assert stop_token is not None
                r["eos_triggering_token_id"] = stop_token
                r["eos_triggering_token_str"] = gen.tokenizer.get_id_to_piece_list(True)[stop_token]
        if emit_held:
            held = self._held_tensors()
            self.full_completion += held.get("text", "")
            r.update(held)
            self.held_text = ""
            self.held_tokens, self.held_probs = [], []
            self.held_k_tokens, self.held_k_probs = [], []
        if eos:
            now = time.time()
            assert self.time_first_prefill is not None and self.time_enqueue is not None
            first_token = self.time_first_token if self.time_first_token is not None else now
            r.update(
                {
                    "full_completion": self.full_completion,
                    "new_tokens": self.new_tokens,
                    "prompt_tokens": len(self.input_ids),
                    "time_enqueued": self.time_first_prefill - self.time_enqueue,
                    "time_prefill": first_token - self.time_first_prefill,
                    "time_generate": now - first_token,
                    "cached_pages": self.cached_pages,
                    "cached_tokens": self.cached_pages * gen.page_size + self.cached_tokens,
                }
            )
            held = self._held_tensors()
            if held:
                r["held"] = held
        if self.identifier is not None:
            r["identifier"] = self.identifier
        results.append(r)
        return eos


class ExLlamaV2DynamicGenerator:
    def __init__(
        self,
        model: ExLlamaV2,
        cache: ExLlamaV2CacheBase,
        tokenizer: ExLlamaV2Tokenizer,
        max_batch_size: int | None = None,
        max_seq_len: int | None = None,
        max_chunk_size: int | None = None,
        max_q_size: int = 8,
        draft_model: Any = None,
        draft_cache: Any = None,
        num_draft_tokens: int = 4,
        use_ngram_draft: bool = False,
        paged: bool = True,
        filter_background_eval: bool = True,
        **kwargs: Any,
    ):
        if draft_model is not None or use_ngram_draft:
            raise NotImplementedError("the fake generator does not model drafting")
        self.model = model
        self.cache = cache
        self.tokenizer = tokenizer
        cfg = model.config
        self.padded_vocab_size = ((cfg.vocab_size + 31) // 32) * 32
        self.num_draft_tokens = 0
        if paged:
            assert_paged_attn()
            assert not cfg.no_flash_attn, (
                "Paged mode requires flash-attn, but flash-attn is disabled in model config."
            )
        assert not isinstance(cache, ExLlamaV2Cache_8bit), (
            "Dynamic generator does not currently work with 8-bit cache. Use either FP16 or Q4."
        )
        if not max_batch_size:
            self.max_batch_size = cfg.max_input_len // max_q_size
        else:
            model_max_q = cfg.max_batch_size * cfg.max_input_len
            assert max_q_size * max_batch_size <= model_max_q, (
                f"Model has max_batch_size * max_input_len = {cfg.max_batch_size} * "
                f"{cfg.max_input_len} tokens, generator requires max_batch_size * max_q_size = "
                f"{max_batch_size} * {max_q_size} tokens."
            )
            self.max_batch_size = max_batch_size
        if max_seq_len is not None:
            assert max_seq_len <= cfg.max_seq_len
            self.max_seq_len = max_seq_len
        else:
            self.max_seq_len = cfg.max_seq_len
        self.paged = paged
        self.page_size = PAGED_PAGE_SIZE if paged else cache.max_seq_len
        assert cache.batch_size == 1, (
            f"DynamicGenerator requires cache to have batch_size = 1, got {cache.batch_size}"
        )
        assert cache.max_seq_len % PAGED_PAGE_SIZE == 0, (
            f"cache.max_seq_len must be multiple of {PAGED_PAGE_SIZE}, received {cache.max_seq_len}"
        )
        self.max_pages = max(cache.max_seq_len // self.page_size, 1)
        self.max_total_tokens = cache.max_seq_len
        self.reset_page_table()
        if max_chunk_size is not None:
            assert max_chunk_size <= cfg.max_input_len, (
                f"max_chunk_size must be less than model max_input_len ({cfg.max_input_len}), "
                f"received {max_chunk_size}"
            )
            self.max_chunk_size = max_chunk_size
        else:
            self.max_chunk_size = cfg.max_input_len
        if paged:
            assert self.max_chunk_size % self.page_size == 0, (
                f"max_chunk_size must be multiple of {self.page_size}, received {max_chunk_size}"
            )
        # Lines 457-462: filters' masks are computed on a pool while the GPU works.
        self.filter_pool: ThreadPoolExecutor | None = None
        self.filter_queue: list[tuple[Any, bool]] | None = None
        if filter_background_eval:
            self.filter_pool = ThreadPoolExecutor(max_workers=16)
            self.filter_queue = []
        self.job_serial = 0
        self.pending_jobs: list[ExLlamaV2DynamicJob] = []
        self.active_jobs: list[ExLlamaV2DynamicJob] = []
        self.iterate_calls = 0
        self.page_table_resets = 0
        state.generators.append(self)

    # --- page table ---

    def reset_page_table(self) -> None:
        """Lines 483-511: every page free, empty and unhashed."""
        self.referenced_pages: dict[bytes, CachePage] = {}
        self.unreferenced_pages: dict[bytes, CachePage] = {}
        self.all_pages: list[CachePage] = []
        for index in range(self.max_pages):
            h = _randomhash()
            page = CachePage(
                generator=self,
                page_index=index,
                phash=h,
                phash_revert=h,
                prev_hash=None,
                prev_hash_revert=None,
                sequence=[0] * self.page_size,
                access_serial=index,
            )
            self.all_pages.append(page)
            self.unreferenced_pages[h] = page
        self.access_serial = self.max_pages
        self.page_table_resets = getattr(self, "page_table_resets", -1) + 1

    def oldest_unreferenced_page(self) -> CachePage:
        """What `allocate_pages` takes for a page it must fill: the least recently used."""
        return min(self.unreferenced_pages.values(), key=lambda p: p.access_serial)

    # --- queue ---

    def num_remaining_jobs(self) -> int:
        return len(self.pending_jobs) + len(self.active_jobs)

    def enqueue(self, job: ExLlamaV2DynamicJob) -> int:
        job.prepare_for_queue(self, self.job_serial)
        self.job_serial += 1
        self.pending_jobs.append(job)
        job.time_enqueue = time.time()
        assert job.serial_number is not None
        return job.serial_number

    def cancel(self, job: ExLlamaV2DynamicJob) -> None:
        if job in self.pending_jobs:
            self.pending_jobs.remove(job)
        elif job in self.active_jobs:
            job.deallocate_pages()
            self.active_jobs.remove(job)

    def clear_queue(self) -> None:
        for job in self.active_jobs + self.pending_jobs:
            job.deallocate_pages()
        self.active_jobs.clear()
        self.pending_jobs.clear()

    # --- work ---

    def forward(self, stage: str, jobs: list[ExLlamaV2DynamicJob], tokens: int) -> None:
        assert self.model.loaded, "the fake model was never loaded"
        if state.fail_next is not None and state.fail_next[0] == stage:
            exc = state.fail_next[1]
            state.fail_next = None
            raise exc
        for job in jobs:
            state.forwards.append((stage, job.identifier, tokens))

    def iterate(self) -> list[dict[str, Any]]:
        self.iterate_calls += 1
        results: list[dict[str, Any]] = []
        self.iterate_start_jobs(results)
        for job in self.active_jobs:
            job.prefill(results)
        self.iterate_gen(results)
        gate = state.step_gate
        if gate is not None and not gate.acquire(timeout=30):
            raise RuntimeError("fake exllamav2: the test never released the step gate")
        return results

    def iterate_start_jobs(self, results: list[dict[str, Any]]) -> None:
        """Lines 1296-1347: start pending jobs that fit the batch and the free pages."""
        current = len(self.active_jobs)
        if not (self.unreferenced_pages and self.pending_jobs and current < self.max_batch_size):
            return
        skipped: list[ExLlamaV2DynamicJob] = []
        for job in list(self.pending_jobs):
            if current + 1 > self.max_batch_size or job.current_new_pages_required() > len(
                self.unreferenced_pages
            ):
                skipped.append(job)
                continue
            if any(j.max_skips is not None and j.skips >= j.max_skips for j in skipped):
                return
            for j in skipped:
                j.skips += 1
            self.pending_jobs.remove(job)
            self.active_jobs.append(job)
            job.allocate_pages()
            current += 1
            r: dict[str, Any] = {
                "job": job,
                "stage": "started",
                "eos": False,
                "serial": job.serial_number,
            }
            if job.identifier is not None:
                r["identifier"] = job.identifier
            results.append(r)

    def iterate_gen(self, results: list[dict[str, Any]]) -> None:
        """Lines 1139-1294: one decode step for every job whose prefill is done, batched."""
        batch = [job for job in self.active_jobs if job.is_prefill_done()]
        if not batch:
            return
        for job in batch:
            if job.time_first_token is None:
                job.time_first_token = time.time()
            job.get_input_ids_list(add_to_cache=True)
        self.forward("gen", batch, len(batch))
        # Lines 1211-1220: the pass is launched; start the queued filters' work.
        if self.filter_queue:
            assert self.filter_pool is not None
            for f, mask in self.filter_queue:
                if mask:
                    f.background_prepare_logit_mask(self.filter_pool)
                else:
                    f.background_next(self.filter_pool)
            self.filter_queue.clear()
        completed = []
        for job in batch:
            # The model's head is as wide as the padded vocabulary.
            logits = list(state.logits_fn(list(job.sequence_ids), len(job.input_ids)))
            logits = logits[: self.padded_vocab_size]
            logits += [0.0] * (self.padded_vocab_size - len(logits))
            token, top_ids, top_probs, prob, filter_eos = job.receive_logits(logits)
            if job.receive_sample(token, top_ids, top_probs, prob, results, filter_eos):
                completed.append(job)
        for job in completed:
            job.deallocate_pages()
            self.active_jobs.remove(job)


# --- installation ---

#: The modules `install` provides, and what each is in exllamav2.
MODULES = ("exllamav2", "exllamav2.generator", "exllamav2.generator.dynamic", "exllamav2.attn")


def install(
    monkeypatch: Any = None, *, paged_attention: bool = True, cuda: bool = True
) -> FakeState:
    """Make `import exllamav2` (.generator, .generator.dynamic, .attn) load this fake.

    Returns its fresh state. With pytest's `monkeypatch` everything is undone after
    the test; without one (a process that serves the fake, like the GPU proof's dry
    run) it stays. `cuda=True` also makes `torch.cuda.is_available()` answer True, as
    the engine checks it before importing exllamav2; the fake never touches CUDA.
    "exllamav2.generator.dynamic" is this module itself, so code that replaces one of
    its functions (as the engine does `_tensor_hash_checksum`) changes what the fake's
    jobs call, as it would in the real module.
    """
    global state
    state = FakeState(paged_attention=paged_attention, cuda=cuda)
    package = types.ModuleType("exllamav2")
    package.__path__ = []
    for name in (
        "ExLlamaV2",
        "ExLlamaV2Config",
        "ExLlamaV2CacheBase",
        "ExLlamaV2Cache",
        "ExLlamaV2Cache_8bit",
        "ExLlamaV2Cache_Q4",
        "ExLlamaV2Cache_Q6",
        "ExLlamaV2Cache_Q8",
        "ExLlamaV2Tokenizer",
    ):
        setattr(package, name, globals()[name])
    package.__version__ = __version__  # type: ignore[attr-defined]
    generator = types.ModuleType("exllamav2.generator")
    generator.__path__ = []
    generator.ExLlamaV2DynamicGenerator = ExLlamaV2DynamicGenerator  # type: ignore[attr-defined]
    generator.ExLlamaV2DynamicJob = ExLlamaV2DynamicJob  # type: ignore[attr-defined]
    generator.ExLlamaV2Sampler = ExLlamaV2Sampler  # type: ignore[attr-defined]
    dynamic = sys.modules[__name__]
    generator.dynamic = dynamic  # type: ignore[attr-defined]
    attn = types.ModuleType("exllamav2.attn")
    attn.has_flash_attn_with_paged = paged_attention  # type: ignore[attr-defined]
    attn.has_flash_attn = paged_attention  # type: ignore[attr-defined]
    attn.assert_paged_attn = assert_paged_attn  # type: ignore[attr-defined]
    package.generator = generator  # type: ignore[attr-defined]
    package.attn = attn  # type: ignore[attr-defined]
    modules = dict(zip(MODULES, (package, generator, dynamic, attn), strict=True))
    if monkeypatch is None:
        sys.modules.update(modules)
        globals()["_tensor_hash_checksum"] = _tensor_blake2b_checksum
        torch.cuda.is_available = lambda: cuda
        return state
    for name, module in modules.items():
        monkeypatch.setitem(sys.modules, name, module)
    # A test that replaced the hash function gets the original back afterwards.
    monkeypatch.setattr(dynamic, "_tensor_hash_checksum", _tensor_blake2b_checksum)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: cuda)
    return state


def chatty_logits(sequence: list[int], prompt_length: int) -> list[float]:
    """Sure of every next token, printable ASCII (never held back), never EOS by itself,
    over the vocabulary of the model the fake loaded last."""
    size = state.generators[-1].model.config.vocab_size if state.generators else 512
    out = [0.0] * size
    out[33 + len(sequence) % 90] = 10.0
    return out


def install_chatty() -> None:
    """An engine process's preload hook (`EngineSpec.preload`): serve the fake, chatty."""
    install()
    state.logits_fn = chatty_logits


def forwards() -> list[tuple[str, Any, int]]:
    """Every forward pass so far (a probe the tests call inside the engine process)."""
    return list(state.forwards)
