"""A request's work: what the glue runs for a dialect, so the glue knows no pipeline.

The core starts a request (`StartRequest`); the glue then asks the dialect for
the request's job (`Dialect.job(record)`) and, in the request's task:

    await job.prepare()                  # what must be awaited first
    observe = job.observer(timer)        # how the latency timer sees the output
    async with aclosing(job.output()) as outputs:
        async for item in outputs:       # each item: dialect.render_output -> frames
            observe(item)

`prepare` is where the I/O before any output goes: a store read (a Responses
continuation's history), the pipeline's prepare and constrain. A dialect never
does I/O while it parses; what it needs from a store it reads here, before its
request's first frame. Raising `RealtimeError` from either step fails the
request (the dialect's `render_error`).

Closing the output early (the task was cancelled: a cancel, a close, the peer
gone) closes the generators under it, down to the engine's: that is how a cancel
stops generation. A job whose output is the pipeline's own generator adds no
layer to the per-token path: its dialect renders each typed event inline.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Callable
from typing import Any, Protocol

#: Shown each output item as it is produced (the request's time to first token, gaps).
Observe = Callable[[Any], None]


class Timer(Protocol):
    """The request's latency timer, as the glue keeps it (`RequestTimer`)."""

    def chunk(self, chunk: dict[str, Any]) -> None:
        """A chat chunk was made: a token if it carries output."""
        ...

    def step(self, step: Any) -> None:
        """A pipeline event was made (`Step`, `Finish`): a token if it carries output."""
        ...


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

    def observer(self, timer: Timer) -> Observe:
        """How `timer` sees each output item (called before `output`): `timer.step` for
        the pipeline's events; a job whose items are not the pipeline's (Responses
        events) shows the timer the chunks under them itself and returns a no-op."""
        ...

    def output(self) -> AsyncGenerator[Any, None]:
        """The output, item by item, for the dialect's `render_output`; after `prepare`."""
        ...

    def usage(self) -> dict[str, Any] | None:
        """The token usage so far (None until the prompt was built)."""
        ...

    @property
    def answer_id(self) -> str | None:
        """The answer's id as its client got it (`chatcmpl-...`, `resp_...`), for the log
        line (a `Submit.response_id` the dialect knew at once wins over it)."""
        ...
