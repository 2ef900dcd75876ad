"""`cache_salt` for exllamav2: a salted job never reuses KV made under another salt.

exllamav2 0.3.2's dynamic generator reuses cached KV two ways, both across every
job it runs (line numbers are exllamav2/generator/dynamic.py's):

1. Whole pages by hash. A prompt's full 256-token pages are hashed as a chain
   (`prepare_for_queue`, lines 2264-2272: each page's hash covers its ids and the
   previous page's hash, the first page's chain starting from None), and a page
   with that hash in the cache is taken as it is (`allocate_pages`, 2545-2566);
   pages a job fills while decoding are hashed the same way (`receive_sample`,
   1960-1971).
2. A partial page by content. When a prefill chunk starts on a page boundary,
   every page in the cache chained on the same previous page (on none, at a
   prompt's first page) is compared token by token with the chunk, and the longest
   match's KV is copied (`prefill`, 2374-2411). Unpaged, the one page's tokens up to
   `kv_position_revert` are matched against the next prompt (2413-2433).

Isolation here, one mechanism for each:

1. The hash chain of a salted job starts from a seed derived from its salt instead
   of None. `_tensor_hash_checksum` (line 51) is a module global the two hashing
   methods look up at call time, so it is replaced by a wrapper that puts the
   current job's seed in place of a None previous hash, and `SaltedJob` sets that
   seed around `prepare_for_queue` and `receive_sample`. Unsalted jobs hash exactly
   as before. Different salts then never produce the same page hash, so (1) can
   only find pages of the same salt, including every later page of the chain.
2. Each page remembers the seed of the KV written into it (`realtime_seed`, set
   after the job's `prefill` and `get_input_ids_list(add_to_cache=True)`, the two
   places KV is written: lines 2474-2505 and 1838-1853). Once any salted job has
   been enqueued, pages of other seeds are hidden from every job's partial match for
   the length of its prefill call, by a `prev_hash` no page can have, and put back
   after. Unpaged, a prompt may not match the page at all when another seed wrote it.

A freed page whose hash collides (`sub_ref`, lines 139-149) keeps its KV but loses
its chain: it looks like a prompt's first page to (2). Its `realtime_seed` stays,
so it is hidden like any other. All of this runs on the engine thread, as every
generator call does; the seed travels in a `ContextVar` so that no other thread
(exllamav2's sampling pool) could ever see it.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from types import ModuleType
from typing import Any

#: Page hashes are 16-byte blake2b digests or counters; this is neither, so no page's
#: `prev_hash` can equal it: a page carrying it never matches a partial-page lookup.
_HIDDEN = b"realtime: another cache_salt's page"
_SEED_DOMAIN = b"realtime cache_salt\x00"
_MARKER = "_realtime_salted"

_current_seed: ContextVar[bytes | None] = ContextVar("realtime_exllamav2_seed", default=None)


def salt_seed(salt: str | None) -> bytes | None:
    """The hash-chain seed of a salt (None: unsalted, exllamav2's own chain)."""
    if salt is None:
        return None
    return hashlib.blake2b(_SEED_DOMAIN + salt.encode("utf-8"), digest_size=16).digest()


def install_salted_hashing(dynamic: ModuleType) -> bool:
    """Wrap `dynamic._tensor_hash_checksum` to seed chains with the current job's salt.

    Idempotent. Returns False (and changes nothing) when the module does not have
    the function, so the caller can refuse salted requests rather than share.
    """
    original = getattr(dynamic, "_tensor_hash_checksum", None)
    if original is None or not callable(original):
        return False
    if getattr(original, _MARKER, False):
        return True

    def salted(tensor: Any, prev_hash: bytes | None) -> bytes:
        if prev_hash is None:
            prev_hash = _current_seed.get()
        digest: bytes = original(tensor, prev_hash)
        return digest

    setattr(salted, _MARKER, True)
    dynamic._tensor_hash_checksum = salted  # type: ignore[attr-defined]
    return True


@contextmanager
def _seeded(seed: bytes | None) -> Iterator[None]:
    token = _current_seed.set(seed)
    try:
        yield
    finally:
        _current_seed.reset(token)


def salted_job_class(base: Any) -> Any:
    """A subclass of exllamav2's `ExLlamaV2DynamicJob` that keeps to its salt's pages.

    Set `job.realtime_seed = salt_seed(salt)` before enqueueing it. A job without a
    seed behaves as the base class does, except that it, too, never reuses pages
    that salted jobs wrote.
    """

    class SaltedJob(base):  # type: ignore[misc]
        realtime_seed: bytes | None = None

        def prepare_for_queue(self, generator: Any, serial_number: int) -> Any:
            if self.realtime_seed is not None:
                generator.realtime_salted = True  # from now on, hide pages by seed
            with _seeded(self.realtime_seed):
                return super().prepare_for_queue(generator, serial_number)

        def receive_sample(self, *args: Any, **kwargs: Any) -> Any:
            with _seeded(self.realtime_seed):
                return super().receive_sample(*args, **kwargs)

        def prefill(self, results: list[Any]) -> Any:
            if self.is_prefill_done():  # called every iterate(); then it matches nothing
                return super().prefill(results)
            hidden = _hide_other_seeds(self)
            try:
                return super().prefill(results)
            finally:
                for page, prev_hash in hidden:
                    page.prev_hash = prev_hash
                _mark_written(self)

        def get_input_ids_list(
            self, draft_tokens: Any = None, idx: int = 0, add_to_cache: bool = False
        ) -> Any:
            ids = super().get_input_ids_list(draft_tokens, idx, add_to_cache)
            if add_to_cache:
                _mark_decode_write(self, ids)
            return ids

    SaltedJob.__name__ = SaltedJob.__qualname__ = f"Salted{base.__name__}"
    return SaltedJob


def _hide_other_seeds(job: Any) -> list[tuple[Any, bytes | None]]:
    """Before a prefill call: make pages of other seeds unmatchable; returns what to undo."""
    generator = job.generator
    if not getattr(generator, "realtime_salted", False):
        return []
    seed = job.realtime_seed
    if not generator.paged:
        page = generator.all_pages[0]
        if getattr(page, "realtime_seed", None) != seed:
            # The next prompt matches up to kv_position_revert; this job overwrites the
            # page anyway, so the other seed's tokens are simply forgotten.
            page.kv_position_revert = 0
        return []
    own = {id(page) for seq in job.sequences for page in seq.allocated_pages}
    hidden: list[tuple[Any, bytes | None]] = []
    for page in generator.all_pages:
        if page.kv_position and id(page) not in own:
            if getattr(page, "realtime_seed", None) != seed:
                hidden.append((page, page.prev_hash))
                page.prev_hash = _HIDDEN
    return hidden


def _mark_written(job: Any) -> None:
    """After a prefill call: every page of the job that holds KV holds this seed's."""
    seed = job.realtime_seed
    for seq in job.sequences:
        for page in seq.allocated_pages or ():
            if page.kv_position:
                page.realtime_seed = seed


def _mark_decode_write(job: Any, ids: list[Any]) -> None:
    """A decode step's input went into the pages from each sequence's kv_position on."""
    page_size = job.generator.page_size
    seed = job.realtime_seed
    for seq, seq_ids in zip(job.sequences, ids, strict=False):
        first = seq.kv_position // page_size
        last = (seq.kv_position + max(int(seq_ids.shape[-1]), 1) - 1) // page_size
        for page in seq.allocated_pages[first : last + 1]:
            page.realtime_seed = seed
