"""A request's work: what the glue runs for a dialect, so the glue knows no pipeline.

The core starts a request (`StartRequest`); the glue then asks the dialect for
the request's job (`Dialect.job(record)`) and, in the request's task:

    await job.prepare()                  # what must be awaited first
    async with aclosing(job.output(observe)) as outputs:
        async for item in outputs:       # each item: dialect.render_output -> frames
            observe(item)

`prepare` is where the I/O before any output goes: a store read (a Responses
continuation's history), the pipeline's prepare and constrain. A dialect never
does I/O while it parses; what it needs from a store it reads here, before its
request's first frame. Raising `RealtimeError` from either step fails the
request (the dialect's `render_error`).

Closing the output iterator early (the task was cancelled: a cancel, a close, the
peer gone) closes the generators under it, down to the engine's: that is how a
cancel stops generation. `observe` is the request's latency timer: the glue shows
it every item, and a job whose items are not the pipeline's chunks (Responses
events) shows it the chunks under them too.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Callable
from typing import Any, Protocol

#: Shown each chat chunk as it is produced (the request's time to first token, gaps).
Observe = Callable[[dict[str, Any]], None]


class Job(Protocol):
    """One running request's work, made by its dialect; see the module's docstring."""

    @property
    def output_kind(self) -> str:
        """The frames-sent metric's label of the frames rendered from its output
        ("chunk": they may fold under a slow reader; "completion")."""
        ...

    async def prepare(self) -> None:
        """Everything to await before the output: store reads, the pipeline's prepare."""
        ...

    def output(self, observe: Observe) -> AsyncGenerator[Any, None]:
        """The output, item by item, for the dialect's `render_output`; after `prepare`."""
        ...

    def usage(self) -> dict[str, Any] | None:
        """The token usage so far (None until the prompt was built)."""
        ...

    @property
    def answer_id(self) -> str | None:
        """The id the pipeline gave the answer (`chatcmpl-...`), for the log line."""
        ...
