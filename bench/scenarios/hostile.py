"""Hostile neighbour: a small request's latency while another client sends hostile input.

One server process (the echo engine, operator defaults). A neighbour, in a process of its
own (`bench/neighbour.py`, so the sender's own work is never counted), sends
`GET /health` on its own keep-alive connection, one request after another, and
times each (request written -> whole response read). First on an idle server,
then while a hostile client repeats one of:

* `stop list`: a socket request with the most stop strings the server accepts
  (`--max-stop-strings` x `--max-stop-chars`: 64 x 256 characters, none matching)
  and a long answer, so every streamed token goes through the matcher. The echo
  engine streams it at 500 tokens/s (`--echo-delay 0.002`, faster than a real
  model); `stream, no stops` is the same request without stops, so the two
  together tell the matcher's cost from the stream's;
* `large body`: an HTTP chat body near the frame limit (8 MiB; 1 MiB in quick
  mode), a long string in one field, refused after it is read and decoded;
* `wide JSON body`: a body of the same size made of small JSON values (an array
  of zeros in a message), the most decoding work per byte;
* `large frame`: the `large body` as one WebSocket frame.

The stateful surfaces (issue 27), where a small input asks for input-sized work:

* `continuation`: a 130-byte `response.create` on a `/v1/responses` socket that
  continues a stored response of 40,000 input items (created before the
  neighbour records), so the server rebuilds 40,000 items;
* `item retrieve`: 20 `conversation.item.retrieve` events for one Realtime item of
  4,000,000 characters (created before the neighbour records);
* `out-of-band input`: a Realtime `response.create` out of band (`conversation:
  none`) whose own `input` is one message of about 7 MB.

Then the schema bombs (`schema_bombs.py`, issue 27): on a second server, the cpu
engine, a neighbour's 8-token chat request next to two clients sending hostile
`response_format` schemas, against the same request alone.

Then the engine's tokens/s (`engine_hostile.py`, issue 28): on a third server, the cpu
engine, four clients decoding next to large bodies and schema bombs, against the same
load alone.

Only neighbour requests sent while a hostile request is in flight count. The
goal (issue 13): the neighbour's p99 under each hostile load within 2x its idle
p99. Whatever the server does with each input (serve it, refuse it, or close the
socket) is what is measured, so the scenario also tracks fixes made elsewhere
(body limits, frame handling).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass

import orjson

from bench.client_loop import run as run_client
from bench.context import RunContext, rotated
from bench.machine_load import BACKGROUND, other_cores, snapshot
from bench.neighbour import Neighbour, read_response
from bench.payloads import MODEL, WS_PATH, answer_text
from bench.procs import running, start_realtime
from bench.results import Chart, Goal, ScenarioResult, Series, paired_ratios, percentile
from bench.scenarios import engine_hostile, schema_bombs
from bench.wire import WsClient, is_terminal
from realtime.protocol.input_limits import DEFAULT_MAX_STOP_CHARS, DEFAULT_MAX_STOP_STRINGS

NAME = "hostile"
TITLE = "Hostile neighbour (a small request's latency next to hostile input)"
SUMMARY = (
    "p99 latency of a neighbour's GET /health while another client sends a long stop list, a "
    "large body, a wide JSON body or a large WebSocket frame, against its p99 on an idle server; "
    "and of a neighbour's 8-token chat request on the cpu engine while two clients send hostile "
    "schemas (schema bombs), against the same request alone; and the cpu engine's tokens/s "
    "(four decoding clients, and the engine's own counter) next to large bodies and schema "
    "bombs, against the same load alone."
)

IDLE, PLAIN = "idle", "stream, no stops"
STOPS, LARGE_BODY = "stop list", "large body"
WIDE_BODY, LARGE_FRAME = "wide JSON body", "large frame"
CONTINUATION, RETRIEVE, OUT_OF_BAND = "continuation", "item retrieve", "out-of-band input"
HOSTILE = (STOPS, LARGE_BODY, WIDE_BODY, LARGE_FRAME, CONTINUATION, RETRIEVE, OUT_OF_BAND)
STATEFUL = (CONTINUATION, RETRIEVE, OUT_OF_BAND)
EVENTS_PATH = f"{WS_PATH}?model={MODEL}"
RESPONSES_PATH = "/v1/responses"
RESPONSES_TERMINAL = frozenset(
    ("response.completed", "response.incomplete", "response.failed", "error")
)
VARIANTS = (IDLE, PLAIN, *HOSTILE)
ECHO_DELAY = 0.002
BOUND = 2.0


@dataclass(frozen=True)
class Params:
    #: Hostile requests per run (the neighbour's samples come from their lifetimes).
    hostile_requests: int
    #: The same for the two streaming variants, whose requests last seconds.
    stream_requests: int
    #: Seconds the idle variant probes for.
    idle_seconds: float
    #: Size of the large and wide bodies and of the frame.
    body_bytes: int
    #: Tokens of the stop-list request's answer.
    answer_tokens: int
    #: Input items of the stored response the `continuation` continues.
    history_items: int
    #: Characters of the Realtime item `item retrieve` retrieves, and retrieves per request.
    item_chars: int
    retrieves: int
    #: Bytes of the `out-of-band input`'s message.
    input_bytes: int

    @classmethod
    def for_mode(cls, quick: bool) -> Params:
        if quick:
            return cls(hostile_requests=3, stream_requests=1, idle_seconds=0.3,
                       body_bytes=1 << 20, answer_tokens=100, history_items=4000,
                       item_chars=400_000, retrieves=20, input_bytes=1 << 20)  # fmt: skip
        # Just under the default --max-frame-bytes (8 MiB), so the frame is accepted.
        return cls(hostile_requests=10, stream_requests=2, idle_seconds=3.0,
                   body_bytes=(8 << 20) - 4096, answer_tokens=3000, history_items=40_000,
                   item_chars=4_000_000, retrieves=20, input_bytes=7_000_000)  # fmt: skip


# --- payloads ---------------------------------------------------------------------


def _stream_request(tokens: int, *, stops: bool) -> bytes:
    filler = "~" * (DEFAULT_MAX_STOP_CHARS - 3)
    body: dict[str, object] = {
        "model": MODEL,
        "request_id": "hostile",
        "messages": [{"role": "user", "content": answer_text(tokens)}],
    }
    if stops:
        body["stop"] = [f"{i:03d}{filler}" for i in range(DEFAULT_MAX_STOP_STRINGS)]
    return orjson.dumps(body)


def _padded_body(size: int) -> bytes:
    """A chat body of `size` bytes whose bulk is one string in a field the API lacks."""
    head = {"model": MODEL, "messages": [{"role": "user", "content": "x"}], "padding": ""}
    skeleton = orjson.dumps(head)
    return skeleton[:-2] + b"p" * (size - len(skeleton)) + b'"}'


def _wide_body(size: int) -> bytes:
    """A chat body of `size` bytes whose bulk is an array of zeros in a message key."""
    skeleton = b'{"model":"echo","messages":[{"role":"user","content":"x","zeros":[0]}]}'
    zeros = (size - len(skeleton)) // 2
    return skeleton.replace(b"[0]", b"[0" + b",0" * zeros + b"]")


def _http_post(path: str, body: bytes) -> bytes:
    head = (
        f"POST {path} HTTP/1.1\r\nHost: bench\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    )
    return head.encode() + body


# --- clients ----------------------------------------------------------------------


async def _hostile_http(port: int, request: bytes) -> int:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(request)
        await writer.drain()
        return await read_response(reader)
    finally:
        writer.close()


async def _hostile_ws(port: int, frame: bytes) -> bool:
    """Send one frame and read to its terminal frame; False if the socket was closed."""
    client = await WsClient.connect("127.0.0.1", port, WS_PATH)
    try:
        client.send_text(frame)
        while True:
            payload, _ = await client.recv(timeout=120)
            if is_terminal(payload):
                return True
    except (ConnectionError, asyncio.IncompleteReadError, EOFError):
        return False
    finally:
        client.abort()


Send = Callable[[], Awaitable[object]]


async def _http_json(port: int, path: str, body: bytes) -> tuple[int, dict[str, object]]:
    """POST `body` and read the JSON answer."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(_http_post(path, body))
        await writer.drain()
        head = await reader.readuntil(b"\r\n\r\n")
        length = next(
            int(line.split(b":", 1)[1])
            for line in head.split(b"\r\n")
            if line.lower().startswith(b"content-length:")
        )
        answer = orjson.loads(await reader.readexactly(length))
        return int(head.split(b" ", 2)[1]), answer
    finally:
        writer.close()


async def _until(client: WsClient, done: Callable[[bytes], bool]) -> bytes:
    while True:
        payload, _ = await client.recv(timeout=120)
        if done(payload):
            return payload


def _responses_terminal(payload: bytes) -> bool:
    return orjson.loads(payload).get("type") in RESPONSES_TERMINAL


class Stateful:
    """A hostile client of the stateful surfaces: what it needs is set up (`setup`)
    before the neighbour records; `send` is one hostile request."""

    def __init__(self, variant: str, port: int, p: Params) -> None:
        self.variant, self.port, self.p = variant, port, p
        self.previous = ""
        self.socket: WsClient | None = None

    async def setup(self) -> None:
        if self.variant == CONTINUATION:
            items = [{"role": "user", "content": "m"}] * self.p.history_items
            body = {"model": MODEL, "input": items, "max_output_tokens": 1}
            status, answer = await _http_json(self.port, RESPONSES_PATH, orjson.dumps(body))
            if status != 200:
                raise RuntimeError(f"creating the stored response answered {status}: {answer}")
            self.previous = str(answer["id"])
        elif self.variant == RETRIEVE:
            self.socket = await self._events_socket()
            text = "x" * self.p.item_chars
            item = {
                "id": "huge",
                "type": "message",
                "role": "user",
                "content": [{"type": "input_text", "text": text}],
            }
            self.socket.send_text(orjson.dumps({"type": "conversation.item.create", "item": item}))
            done = await _until(
                self.socket,
                lambda f: b"conversation.item.done" in f[:64] or f.startswith(b'{"type":"error"'),
            )
            if b"error" in done[:32]:
                raise RuntimeError(f"creating the huge item failed: {done[:300]!r}")

    async def _events_socket(self) -> WsClient:
        client = await WsClient.connect("127.0.0.1", self.port, EVENTS_PATH)
        await client.recv(timeout=30)  # session.created
        return client

    async def send(self) -> object:
        if self.variant == CONTINUATION:
            client = await WsClient.connect("127.0.0.1", self.port, RESPONSES_PATH)
            try:
                create = {
                    "type": "response.create",
                    "model": MODEL,
                    "input": "next",
                    "previous_response_id": self.previous,
                    "max_output_tokens": 1,
                }
                client.send_text(orjson.dumps(create))
                return await _until(client, _responses_terminal)
            finally:
                client.abort()
        if self.variant == RETRIEVE:
            assert self.socket is not None
            retrieve = orjson.dumps({"type": "conversation.item.retrieve", "item_id": "huge"})
            for _ in range(self.p.retrieves):
                self.socket.send_text(retrieve)
            for _ in range(self.p.retrieves):
                await self.socket.recv(timeout=120)
            return None
        client = await self._events_socket()
        try:
            text = "many words " * (self.p.input_bytes // 11)
            message = {
                "type": "message",
                "role": "user",
                "content": [{"type": "input_text", "text": text}],
            }
            create = {
                "type": "response.create",
                "response": {"conversation": "none", "input": [message], "max_output_tokens": 1},
            }
            client.send_text(orjson.dumps(create))
            return await _until(client, is_terminal)
        finally:
            client.abort()

    def close(self) -> None:
        if self.socket is not None:
            self.socket.abort()


def _hostile(variant: str, port: int, payloads: dict[str, bytes]) -> Send:
    if variant in (STOPS, PLAIN):
        return lambda: _hostile_ws(port, payloads[variant])
    if variant == LARGE_FRAME:
        return lambda: _hostile_ws(port, payloads[LARGE_BODY])
    path = "/v1/chat/completions"
    return lambda: _hostile_http(port, _http_post(path, payloads[variant]))


async def _one(port: int, p: Params, variant: str, payloads: dict[str, bytes]) -> dict[str, float]:
    neighbour = Neighbour(port)
    await neighbour.start()
    await asyncio.sleep(0.05)  # the connection is open and warm
    busy, count = 0.0, 1
    stateful = Stateful(variant, port, p) if variant in STATEFUL else None
    if stateful is not None:
        await stateful.setup()  # before the neighbour's samples count
    try:
        if variant == IDLE:
            neighbour.open_window()
            await asyncio.sleep(p.idle_seconds)
            neighbour.close_window()
        else:
            send = stateful.send if stateful is not None else _hostile(variant, port, payloads)
            count = p.stream_requests if variant in (STOPS, PLAIN) else p.hostile_requests
            for _ in range(count):
                t0 = time.perf_counter()
                neighbour.open_window()
                await send()
                neighbour.close_window()
                busy += time.perf_counter() - t0
                await asyncio.sleep(0.05)
    finally:
        samples = await neighbour.stop()
        if stateful is not None:
            stateful.close()
    ms = [s * 1000 for s in samples]
    return {
        "p50": percentile(ms, 50),
        "p99": percentile(ms, 99),
        "max": max(ms, default=float("nan")),
        "samples": float(len(ms)),
        "hostile_s": busy / count if variant != IDLE else float("nan"),
    }


def run(ctx: RunContext) -> ScenarioResult:
    p = Params.for_mode(ctx.quick)
    result = ScenarioResult(NAME, TITLE, SUMMARY, asdict(p))
    payloads = {
        STOPS: _stream_request(p.answer_tokens, stops=True),
        PLAIN: _stream_request(p.answer_tokens, stops=False),
        LARGE_BODY: _padded_body(p.body_bytes),
        WIDE_BODY: _wide_body(p.body_bytes),
    }
    with running(start_realtime(ctx.scratch, echo_delay=ECHO_DELAY)) as server:
        for repeat in range(ctx.repeats):
            for variant in rotated(VARIANTS, repeat):
                before = snapshot()
                m = run_client(_one(server.port, p, variant, payloads))
                result.metric(variant, BACKGROUND, "cores").runs.append(
                    other_cores(before, snapshot())
                )
                for name in ("p50", "p99", "max"):
                    result.metric(variant, f"{name} neighbour latency", "ms").runs.append(m[name])
                result.metric(variant, "neighbour samples", "requests").runs.append(m["samples"])
                if variant != IDLE:
                    result.metric(variant, "hostile request", "s").runs.append(m["hostile_s"])
                ctx.log(
                    NAME,
                    f"run {repeat + 1}/{ctx.repeats} {variant}: neighbour p99 {m['p99']:.2f} ms "
                    f"max {m['max']:.2f} ms over {m['samples']:.0f} requests",
                )
            if not server.alive():
                raise RuntimeError(f"the server died: {server.log_tail()}")
    _judge(result)
    schema_bombs.run_into(ctx, result, NAME)
    engine_hostile.run_into(ctx, result, NAME)
    return result


def _judge(result: ScenarioResult) -> None:
    idle = result.metric(IDLE, "p99 neighbour latency", "ms").runs
    matcher = result.metric("ratio", f"{STOPS} / {PLAIN} (p99)", "x")
    matcher.runs = paired_ratios(
        result.metric(STOPS, "p99 neighbour latency", "ms").runs,
        result.metric(PLAIN, "p99 neighbour latency", "ms").runs,
    )
    for variant in HOSTILE:
        ratio = result.metric("ratio", f"{variant} / idle (p99)", "x")
        ratio.runs = paired_ratios(result.metric(variant, "p99 neighbour latency", "ms").runs, idle)
        result.goals.append(
            Goal.judge(
                f"neighbour p99 next to a {variant}",
                f"<= {BOUND:g}x idle p99",
                ratio.median,
                "x",
                ratio.median <= BOUND,
            )
        )
    result.charts.append(
        Chart(
            "neighbour GET /health latency",
            "ms",
            "bars",
            [
                Series(
                    q,
                    [
                        (v, m.median, m.low, m.high)
                        for v in VARIANTS
                        for m in [result.metric(v, f"{q} neighbour latency", "ms")]
                    ],
                )
                for q in ("p50", "p99")
            ],
        )
    )
