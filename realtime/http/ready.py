"""Take what an awaitable has ready without waiting for it: how the SSE writer batches.

An SSE response writes each event as it comes, and each write is a system call.
When events come faster than one a pass of the event loop (an engine that runs
ahead, a step that renders several chunks, the finish, the usage chunk and
`[DONE]` together), the writer should gather those that are ready and write them
at once, but write at once as soon as the next one is not ready: an event is
never held back waiting for another. Knowing whether the next one is ready is
knowing whether awaiting it would suspend, which is what `start` finds out.

`start(awaitable)` runs it until it first suspends, exactly as a task's step
would. Finished: its value is returned. Suspended: the caller gets a `Suspended`,
writes what it gathered, then awaits the `Suspended`, which resumes the
awaitable as if the task had awaited it from the start (cancellation included).
Should the write itself fail or be cancelled, `Suspended.cancel` cancels the
awaitable, so what it runs (the chunks, and the engine's iterator below them)
unwinds as it would have had the task been cancelled while awaiting it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Generator
from typing import Any, Generic, TypeVar

T = TypeVar("T")


class Suspended(Generic[T]):
    """An awaitable that was started and has suspended; awaiting this resumes it."""

    __slots__ = ("_iterator", "_yielded")

    def __init__(self, iterator: Generator[Any, Any, T], yielded: Any) -> None:
        self._iterator = iterator
        #: What it suspended on (a future, or None for a bare `sleep(0)`), not yet
        #: handed to the task: awaiting this hands it over.
        self._yielded = yielded

    def __await__(self) -> Generator[Any, Any, T]:
        return _drive(self._iterator, self._yielded, None)

    async def cancel(self) -> None:
        """Cancel it as a task's cancellation would (the future it waits on is
        cancelled, CancelledError is raised where it waits) and let it unwind, which
        may await in its own cleanup. How it ends is dropped: the caller gave it up."""
        if asyncio.isfuture(self._yielded):
            self._yielded.cancel()
        try:
            await _Thrown(self._iterator, self._yielded, asyncio.CancelledError())
        except BaseException:  # given up: whatever it ends with is dropped
            pass


class _Thrown:
    __slots__ = ("_error", "_iterator", "_yielded")

    def __init__(self, iterator: Generator[Any, Any, Any], yielded: Any, error: BaseException):
        self._iterator, self._yielded, self._error = iterator, yielded, error

    def __await__(self) -> Generator[Any, Any, Any]:
        return _drive(self._iterator, self._yielded, self._error)


def start(awaitable: Awaitable[T]) -> T | Suspended[T]:
    """Run `awaitable` until it finishes (its value) or first suspends (a `Suspended`
    to await or cancel). What it raises before suspending is raised here."""
    iterator = awaitable.__await__()
    try:
        yielded = iterator.send(None)
    except StopIteration as stop:
        return stop.value  # type: ignore[no-any-return]
    return Suspended(iterator, yielded)


def _drive(
    iterator: Generator[Any, Any, T], yielded: Any, error: BaseException | None
) -> Generator[Any, Any, T]:
    """`yield from iterator`, for an iterator already past its first suspension (and
    with `error` to raise in it first): the task waits on what it yields and sends
    or throws back into it."""
    value = yielded
    while True:
        if error is None:
            try:
                sent = yield value
            except GeneratorExit:
                iterator.close()
                raise
            except BaseException as exc:  # handed to the iterator, as `yield from` does
                error = exc
                continue
            try:
                value = iterator.send(sent)
            except StopIteration as stop:
                return stop.value  # type: ignore[no-any-return]
        else:
            thrown, error = error, None
            try:
                value = iterator.throw(thrown)
            except StopIteration as stop:
                return stop.value  # type: ignore[no-any-return]
