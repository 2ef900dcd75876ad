"""A large text frame, decoded in the decode process before its dialect parses it.

The read loop sends frames of `DECODE_PROCESS_BYTES` or more here
(`pipeline/json_process.py` says why). Its own function, so that the decoded
document is dropped once the dialect has its command, not kept by the read loop
until the next large frame (the many-parts memory test caught that).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol, runtime_checkable

from realtime.pipeline.json_process import decode_frame
from realtime.protocol.input_limits import InputLimits
from realtime.protocol.json_input import decoded_as
from realtime.session.commands import Command
from realtime.session.dialect import Dialect, SessionView


@runtime_checkable
class ChecksLargeFrames(Protocol):
    """A dialect that can hand the decode process its validation of a frame's document
    (a module-level function, pickled by name), so that a large frame it refuses is
    refused there and the document never comes back (8 MiB of it cost the loop about
    30 ms of the interpreter lock: read from the process, unpickled twice)."""

    def large_frame_check(self) -> Callable[[Any], object]: ...


async def parse_large(
    dialect: Dialect, text: str, view: SessionView, limits: InputLimits
) -> Command:
    """`dialect.parse(text, view)`, its `parse_json` answered from the decode process."""
    check = dialect.large_frame_check() if isinstance(dialect, ChecksLargeFrames) else None
    decoded = await decode_frame(text, limits.max_json_depth, limits.max_json_values, parse=check)
    with decoded_as(text, decoded):
        return dialect.parse(text, view)
