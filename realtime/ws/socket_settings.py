"""What a socket session is given by the app: typed values, built once from the
server's settings (`realtime.consumer_settings`), so the glue reads no setting by
name off the config."""

from __future__ import annotations

from dataclasses import dataclass

from realtime.protocol.input_limits import InputLimits
from realtime.session.core import CoreLimits


@dataclass(frozen=True, slots=True)
class SocketSettings:
    #: what the session core enforces: concurrency, queue, read-ahead, time limits
    core: CoreLimits
    #: JSON depth and size, stop strings: what every request frame is held to
    input_limits: InputLimits
    #: frames waiting to be written before generation pauses (backpressure)
    outbound_queue_frames: int

    @property
    def watchdog_tick(self) -> float | None:
        """How often the session's timer fires: a quarter of the shortest time limit,
        between 20 ms and 1 s; None when no time limit is set."""
        core = self.core
        limits = [
            s
            for s in (
                core.idle_timeout_seconds,
                core.max_session_seconds,
                core.slow_consumer_seconds,
            )
            if s > 0
        ]
        return min(1.0, max(0.02, min(limits) / 4)) if limits else None
