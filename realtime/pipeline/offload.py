"""Preparing a large request in a worker thread, so the event loop keeps serving everyone else.

`ChatPipeline.prepare` renders the chat template and tokenizes the prompt. For a
normal request that takes well under a millisecond and a thread hop would cost
more than it saves; for a message of several megabytes (up to `--max-frame-bytes`)
it takes seconds (the echo tokenizer spends about 2 s on 8 MiB), and on the
event loop that stalls every socket, `/health` included. Requests whose frame is
at least `OFF_LOOP_CHARS` long are therefore prepared in a small dedicated pool:
the loop goes on serving while the offender waits for its own answer (usually a
`context_length_exceeded` error). Pure-Python tokenizers still hold the GIL in
that thread, but Python hands it back to the loop every switch interval, so
neighbours slow down instead of stopping. Two workers bound how much CPU a flood
of huge frames can take.

The switch interval. A worker thread holding the GIL keeps it until the
interpreter's switch interval (CPython's default: 5 ms) ends, and the event loop
waits that long for it after every system call it makes (each read, write and
poll). A neighbour's small request makes several, so rebuilding a 40,000-item
conversation in a worker put tens of milliseconds on every neighbour's request.
While the server runs (`loop_first_switching`, the app's lifespan), the interval
is `LOOP_SWITCH_INTERVAL` instead: the loop gets the GIL back ten times sooner,
and the worker (the offender's request) pays for the extra hand-offs. It only
matters while two threads want the GIL; the engine runs in a process of its own.

`prepare()` touches no event-loop state (it reads the engine's model info and
builds plain objects), which is what makes it safe to run in a thread.
"""

from __future__ import annotations

import asyncio
import functools
import sys
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import TYPE_CHECKING, TypeVar

if TYPE_CHECKING:
    from realtime.pipeline import ChatPipeline, PreparedChat
    from realtime.protocol.generation_request import GenerationRequest

T = TypeVar("T")

#: Frames at least this long (characters of JSON) are prepared off the event loop.
OFF_LOOP_CHARS = 64 * 1024
#: Threads that prepare large requests (shared by every socket of the process).
WORKERS = 2

#: The GIL switch interval while a server runs, in seconds (CPython's default is 0.005).
LOOP_SWITCH_INTERVAL = 0.0005

_executor: ThreadPoolExecutor | None = None
_switching_lock = threading.Lock()
#: Servers running in this process, and the interval to restore when the last stops.
_switching_users = 0
_switching_before = 0.005


@contextmanager
def loop_first_switching() -> Iterator[None]:
    """`LOOP_SWITCH_INTERVAL` while the block runs (the module says why); the interval
    from before the first such block comes back when the last one ends, so servers
    started and stopped in one process (tests, embedders) leave it as they found it."""
    global _switching_users, _switching_before
    with _switching_lock:
        if _switching_users == 0:
            _switching_before = sys.getswitchinterval()
            sys.setswitchinterval(LOOP_SWITCH_INTERVAL)
        _switching_users += 1
    try:
        yield
    finally:
        with _switching_lock:
            _switching_users -= 1
            if _switching_users == 0:
                sys.setswitchinterval(_switching_before)


def _pool() -> ThreadPoolExecutor:
    global _executor
    if _executor is None:
        _executor = ThreadPoolExecutor(max_workers=WORKERS, thread_name_prefix="realtime-prepare")
    return _executor


async def prepare_chat(
    pipeline: ChatPipeline,
    request: GenerationRequest,
    *,
    stream: bool,
    session_id: str | None,
    size: int,
    request_id: str | None = None,
) -> PreparedChat:
    """`pipeline.prepare(...)`, in a worker thread when the request's frame was `size` >=
    `OFF_LOOP_CHARS` characters. A cancel while the thread works returns at once; the
    thread finishes that one request and its result is dropped."""
    work = functools.partial(
        pipeline.prepare, request, stream=stream, session_id=session_id, request_id=request_id
    )
    return await off_loop(work, size)


async def off_loop(work: Callable[[], T], size: int) -> T:
    """`work()`, in a worker thread when its input was `size` >= `OFF_LOOP_CHARS`
    characters (or bytes), else right here."""
    if size < OFF_LOOP_CHARS:
        return work()
    return await asyncio.get_running_loop().run_in_executor(_pool(), work)
