"""Decoding large client JSON in a process of its own, so no client's input holds the loop.

A worker thread does not help here: orjson holds the GIL for the whole document,
so a body of four million small values (8 MiB of `[0,0,...]`, within the body
limit) stopped the event loop, and every other client, for 200 ms or more while
it was decoded and then refused by `--max-json-values`. Inputs of at least
`DECODE_PROCESS_BYTES` are therefore decoded and checked (depth, value count) in
a decode process, `json_input.decode_checked`. What comes back is the value of a
document within the limits (at most `--max-json-values` values, so taking it in
is bounded too), or the refusal with only the document's envelope.

One process per front-end process, started on the first large input; it exits
when the server does, however the server ends (`json_worker.exit_with_parent`). A flood of
large inputs queues there: it delays its senders, not the loop. If the process
dies (the machine ran out of memory), the input that was in it is decoded in a
worker thread instead and the next large input starts a new process.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import multiprocessing
import os
import pickle
import sys
import threading
import types
from collections.abc import Callable, Iterator
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from contextlib import contextmanager
from typing import Any

from realtime.pipeline.offload import off_loop
from realtime.protocol.json_input import Decoded, decode_checked
from realtime.protocol.json_worker import decode_pickled, exit_with_parent

log = logging.getLogger("realtime.pipeline")

#: Inputs at least this long (bytes of a body, characters of a frame) are decoded in the
#: decode process. Below it decoding takes at most a few milliseconds (the worst case,
#: small values, about 25 ms per MiB), less than a hop to the process and back saves.
DECODE_PROCESS_BYTES = 128 * 1024

_lock = threading.Lock()
_executor: ProcessPoolExecutor | None = None


def _pool() -> ProcessPoolExecutor:
    global _executor
    with _lock:
        if _executor is None:
            # spawn: a fresh interpreter, none of this process's threads or sockets.
            _executor = ProcessPoolExecutor(
                1,
                mp_context=multiprocessing.get_context("spawn"),
                initializer=exit_with_parent,
                initargs=(os.getpid(),),
            )
        return _executor


def _discard(broken: ProcessPoolExecutor) -> None:
    global _executor
    with _lock:
        if _executor is broken:
            _executor = None
    broken.shutdown(wait=False, cancel_futures=True)


@contextmanager
def _main_script_hidden() -> Iterator[None]:
    """No `__main__` for the decode process to run again. spawn runs the parent's main
    script in the child before anything else, so a script that calls
    `realtime.serve(...)` at its top level, without an `if __name__ == "__main__"`
    guard (as the embedding how-to shows), would start a second server in the decode
    process. The child needs nothing from it: its function lives in `json_worker`."""
    main = sys.modules.get("__main__")
    sys.modules["__main__"] = types.ModuleType("__main__")  # no __file__, no __spec__
    try:
        yield
    finally:
        if main is not None:
            sys.modules["__main__"] = main


async def decode(
    raw: bytes | str,
    max_depth: int,
    max_values: int | None,
    *,
    parse: Callable[[Any], object] | None = None,
) -> Decoded:
    """`decode_checked(raw, ...)`: in the decode process when `raw` is large, else here.

    `parse`, a module-level function (it is pickled by name), is the caller's own
    validation of the value: run in the decode process too, a large document it
    refuses comes back as its refusal (`json_worker.decode_pickled`), and the caller's
    own parse of the value raises the same error for a small one."""
    if len(raw) < DECODE_PROCESS_BYTES:
        return decode_checked(raw, max_depth, max_values)
    pool = _pool()
    try:
        with _main_script_hidden():  # the submit starts the process, the first time
            pending = asyncio.get_running_loop().run_in_executor(
                pool, decode_pickled, raw, max_depth, max_values, parse
            )
        data = await pending
    except BrokenProcessPool:
        log.warning("the JSON decode process died; decoding this input in a thread")
        _discard(pool)
        work = functools.partial(decode_checked, raw, max_depth, max_values)
        return await off_loop(work, len(raw))
    # Unpickled here, not in the executor's thread: objects a thread allocates come from
    # its own malloc arena, which kept megabytes of the server's RSS after each document.
    decoded: Decoded = pickle.loads(data)
    return decoded


async def decode_frame(
    text: str,
    max_depth: int,
    max_values: int | None,
    *,
    parse: Callable[[Any], object] | None = None,
) -> Decoded:
    """`decode` for a socket frame's text, sent to the decode process as UTF-8 bytes:
    pickling a `str` encodes it and copies it twice more (20 ms for 8 MiB, holding the
    GIL in the executor's feeder thread); encoding it here and pickling the bytes costs
    a fifth of that. orjson reads either."""
    return await decode(text.encode(), max_depth, max_values, parse=parse)
