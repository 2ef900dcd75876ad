"""Prometheus metrics, one registry per app (so tests can run several servers in one process).

Counters are incremented where things happen; gauges that describe current
state (open sockets, queue depth, requests in flight) are computed at scrape time
from the live sessions, so they can never drift. Latency is measured in the
transports: time to first token from when a request was read to its first
content chunk, inter-token latency as the gap between consecutive content chunks.

The metrics touched once per token or per frame (the two latency histograms and
frames sent) are fast_metrics' lock-free ones, exported at scrape time in the same
format prometheus_client's classes use; their thread-safety contract is in that
module's docstring. In short: update them from the event loop's thread only;
scrape from anywhere.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable
from time import perf_counter
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from realtime.observability.fast_metrics import FastCounter, FastCounterChild, FastHistogram

__all__ = ["CONTENT_TYPE_LATEST", "Metrics", "RequestTimer", "close_code_label"]

_LATENCY_BUCKETS = (
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75,
    1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
)  # fmt: skip


def close_code_label(code: int) -> str:
    """The `code` label of `realtime_ws_closes_total`: the code itself for RFC 6455's codes
    (1000-1015), `3xxx` and `4xxx` for the registered and private ranges a client may send,
    `other` for anything else. A client picks its close code, so the label set must not be
    the client's to grow (every distinct value is a time series kept forever)."""
    if 1000 <= code <= 1015:
        return str(code)
    if 3000 <= code <= 3999:
        return "3xxx"
    if 4000 <= code <= 4999:
        return "4xxx"
    return "other"


class Metrics:
    """Every metric the server exports. Label values are small fixed sets."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.ws_open = Gauge("realtime_ws_connections_open", "Open WebSockets", registry=r)
        self.ws_handshakes = Counter(
            "realtime_ws_handshakes",
            "WebSocket handshakes by outcome (accepted, or the refusal's error code)",
            ["outcome"],
            registry=r,
        )
        self.ws_closes = Counter(
            "realtime_ws_closes", "WebSockets closed, by close code", ["code"], registry=r
        )
        self.frames_in = Counter(
            "realtime_ws_frames_received",
            "Frames received, by kind (request, cancel, session_close, rejected, binary,"
            " malformed)",
            ["kind"],
            registry=r,
        )
        # One .inc() per frame sent: a lock-free counter (see fast_metrics).
        self.frames_out = FastCounter(
            "realtime_ws_frames_sent",
            "Frames sent, by kind (chunk, completion, done, error, expiring)",
            ["kind"],
            registry=r,
        )
        self.queue_depth = Gauge(
            "realtime_ws_queued_requests",
            "Requests waiting in socket request queues (all sockets)",
            registry=r,
        )
        self.background = Gauge(
            "realtime_background_responses",
            "Background responses (background: true) queued or running",
            registry=r,
        )
        self.in_flight = Gauge(
            "realtime_requests_in_flight",
            "Requests read and not yet answered, by transport",
            ["transport"],
            registry=r,
        )
        self.requests = Counter(
            "realtime_requests",
            "Requests by transport and final status (completed, cancelled, error, rejected)",
            ["transport", "status"],
            registry=r,
        )
        self.http_responses = Counter(
            "realtime_http_responses",
            "HTTP responses by route and status code",
            ["route", "status"],
            registry=r,
        )
        # Observed by RequestTimer, the ITL once per token: lock-free (see fast_metrics).
        self.ttft = FastHistogram(
            "realtime_time_to_first_token_seconds",
            "From a streamed request being read to its first content chunk",
            ["transport"],
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.itl = FastHistogram(
            "realtime_inter_token_latency_seconds",
            "Gap between consecutive content chunks of one streamed request",
            ["transport"],
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.prompt_tokens = Counter(
            "realtime_prompt_tokens", "Prompt tokens processed", ["transport"], registry=r
        )
        self.completion_tokens = Counter(
            "realtime_completion_tokens", "Tokens generated", ["transport"], registry=r
        )
        self.cached_tokens = Counter(
            "realtime_cached_tokens",
            "Prompt tokens served from the engine's cache (usage.prompt_tokens_details)",
            ["transport"],
            registry=r,
        )
        self.engine_errors = Counter(
            "realtime_engine_errors",
            "Requests that failed in the engine, by error code",
            ["code"],
            registry=r,
        )
        self.cancellations = Counter(
            "realtime_cancellations",
            "Requests cancelled, by cause (client, disconnect, shutdown, server_close)",
            ["transport", "cause"],
            registry=r,
        )
        self.state_violations = Counter(
            "realtime_state_violations",
            "Transitions the documented state machine does not allow (a bug if not 0)",
            ["machine"],
            registry=r,
        )
        # Per-kind children resolved once: the hot path only calls .inc().
        self.sent: dict[str, FastCounterChild] = {
            kind: self.frames_out.labels(kind)
            for kind in ("chunk", "completion", "done", "error", "expiring")
        }

    def track(self, gauge: Gauge, read: Callable[[], float]) -> None:
        """Make `gauge` read its value from `read` at scrape time."""
        gauge.set_function(read)

    def render(self) -> bytes:
        return generate_latest(self.registry)

    def usage(self, transport: str, usage: dict[str, Any] | None) -> None:
        if not usage:
            return
        self.prompt_tokens.labels(transport).inc(usage.get("prompt_tokens", 0))
        self.completion_tokens.labels(transport).inc(usage.get("completion_tokens", 0))
        details = usage.get("prompt_tokens_details") or {}
        self.cached_tokens.labels(transport).inc(details.get("cached_tokens", 0) or 0)


class RequestTimer:
    """Time to first token and inter-token gaps of one streamed request.

    `chunk` runs once per streamed chunk on the event loop, so it is kept lean: the
    content test reads the common case (a chat delta with content) first, and the
    inter-token gap goes straight into the histogram child's cells (the same update
    as `FastHistogramChild.observe`, without the call). `step` does the same for a
    typed pipeline event, where a socket's dialect renders the chunks itself.
    """

    __slots__ = ("_bounds", "_first_bound", "_itl", "_last", "_ttft", "first_token_at", "started")

    def __init__(self, metrics: Metrics, transport: str, started: float | None = None):
        self.started = perf_counter() if started is None else started
        self.first_token_at: float | None = None
        self._last: float | None = None
        self._ttft = metrics.ttft.labels(transport)
        itl = metrics.itl.labels(transport)
        self._itl = itl.cells
        self._bounds = itl.bounds
        self._first_bound = itl.bounds[0]

    def chunk(self, chunk: dict[str, Any]) -> None:
        choices = chunk.get("choices")
        if not choices:
            # An Anthropic Messages event: a block's delta is output.
            if chunk.get("type") != "content_block_delta":
                return
        else:
            # A chat chunk's delta, or a text completion's text.
            choice = choices[0]
            delta = choice.get("delta")
            if not (
                (
                    delta
                    and (
                        delta.get("content")
                        or delta.get("reasoning_content")
                        or delta.get("tool_calls")
                    )
                )
                or choice.get("text")
            ):
                return
        now = perf_counter()
        last = self._last
        self._last = now
        if last is None:
            self.first_token_at = now
            self._ttft.observe(now - self.started)
            return
        gap = now - last
        cells = self._itl
        # Bucket first, then the sum in the last cell (the order fast_metrics relies on).
        # The first bucket (<= 1 ms) is tested before the bisect: it is where the gaps
        # go when tokens stream fastest, which is when this line runs most often.
        if gap <= self._first_bound:
            cells[0] += 1
        else:
            cells[bisect_left(self._bounds, gap)] += 1
        cells[-1] += gap

    def step(self, step: Any) -> None:
        """A pipeline event (`realtime.pipeline.events`): a `Step` with visible text or
        any parsed output (what its chunks would carry) is a token; a `Finish` is not.
        The socket's per-token path: the same update as `chunk`, inline too."""
        if not (step.text or step.events):  # a `Finish` has neither
            return
        now = perf_counter()
        last = self._last
        self._last = now
        if last is None:
            self.first_token_at = now
            self._ttft.observe(now - self.started)
            return
        gap = now - last
        cells = self._itl
        if gap <= self._first_bound:
            cells[0] += 1
        else:
            cells[bisect_left(self._bounds, gap)] += 1
        cells[-1] += gap

    @property
    def ttft_ms(self) -> float | None:
        if self.first_token_at is None:
            return None
        return round((self.first_token_at - self.started) * 1000, 3)
