"""A tool-using agent loop, run over one /v1/realtime socket or over HTTP with the openai SDK.

The loop is the usual one: send the conversation with the tools, run every tool
call in the answer, append the assistant turn and one `tool` message per call, and
repeat until an answer has no calls (or `max_steps` runs out). Only `Transport`
differs between the two ways of talking to the server, so the per-turn latencies
they print compare like with like:

- `RealtimeTransport`: every turn on the one WebSocket of a `RealtimeClient`, opened
  once; nothing is set up per turn.
- `OpenAITransport`: every turn a streamed `POST /v1/chat/completions` with the
  `openai` SDK, exactly as against any OpenAI-compatible server.
- `ResponsesSocketTransport`: every turn a `response.create` on one Responses
  WebSocket (`client.responses.connect()` of the `openai` SDK), continuing the
  previous response by `previous_response_id` with only the new items.

Latency is measured from the moment the loop asks for a turn: `ttft` to the first
chunk carrying output (text or a tool call), `total` to the end of the answer.
"""

from __future__ import annotations

import asyncio
import statistics
import time
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, cast

from realtime.client import ClientEvent, RealtimeClient

from .tools import TOOLS, run_tool

if TYPE_CHECKING:
    import openai

SYSTEM_PROMPT = (
    "You are a careful assistant. Use the calculator for arithmetic and read_file for"
    " files in the workspace; then answer briefly, citing what the tools returned."
)
DEFAULT_QUESTION = "What is 17 * 23, and what does notes.txt say?"
#: The bundled example's directory for read_file (notes.txt lives there).
WORKSPACE = Path(__file__).resolve().parent / "workspace"
DEFAULT_MAX_STEPS = 6
DEFAULT_MAX_TOKENS = 512


@dataclass(frozen=True)
class Call:
    """One tool call of an answer: arguments as the model wrote them (JSON text)."""

    id: str
    name: str
    arguments: str


@dataclass
class Reply:
    """One model turn, with its latency in seconds (ttft None: nothing was generated)."""

    text: str
    calls: list[Call]
    finish_reason: str | None
    ttft: float | None
    total: float

    def as_message(self) -> dict[str, Any]:
        """The assistant turn, as the next request sends it back."""
        message: dict[str, Any] = {"role": "assistant", "content": self.text or None}
        if self.calls:
            message["tool_calls"] = [
                {
                    "id": c.id,
                    "type": "function",
                    "function": {"name": c.name, "arguments": c.arguments},
                }
                for c in self.calls
            ]
        return message


@dataclass
class Turn:
    step: int
    reply: Reply
    #: (call, what the tool returned), in the order the model made the calls.
    results: list[tuple[Call, str]]


@dataclass
class AgentRun:
    transport: str
    answer: str
    messages: list[dict[str, Any]]
    turns: list[Turn] = field(default_factory=list)
    #: Seconds for the whole run, connecting included.
    seconds: float = 0.0


class AgentError(Exception):
    """The agent could not run or ended without an answer (too many steps)."""


class Transport(Protocol):
    name: str

    async def complete(
        self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]
    ) -> Reply: ...


class RealtimeTransport:
    """Turns as concurrent-capable requests on one open `RealtimeClient` socket."""

    name = "ws"

    def __init__(self, client: RealtimeClient, *, max_tokens: int = DEFAULT_MAX_TOKENS):
        self.client = client
        self.max_tokens = max_tokens

    async def complete(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> Reply:
        started = time.monotonic()
        stream = self.client.chat(messages, tools=tools, max_tokens=self.max_tokens)
        result = await stream.collect()  # folds text and tool-call pieces
        total = time.monotonic() - started
        first = stream.first_token_at
        calls = [
            Call(call.id or f"call_{call.index}", call.name, call.arguments)
            for call in result.tool_calls
        ]
        ttft = None if first is None else first - started
        return Reply(result.text, calls, result.finish_reason, ttft, total)


class OpenAITransport:
    """Turns as streamed HTTP requests with the `openai` SDK."""

    name = "http"

    def __init__(
        self, client: openai.AsyncOpenAI, model: str, *, max_tokens: int = DEFAULT_MAX_TOKENS
    ):
        self.client = client
        self.model = model
        self.max_tokens = max_tokens

    async def complete(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> Reply:
        started = time.monotonic()
        first: float | None = None
        text: list[str] = []
        pieces: dict[int, dict[str, str]] = {}  # tool calls arrive in parts, by index
        finish: str | None = None
        stream = await self.client.chat.completions.create(
            model=self.model,
            messages=cast(Any, messages),  # plain dicts; the SDK's TypedDicts are the same shape
            tools=cast(Any, tools),
            max_tokens=self.max_tokens,
            stream=True,
        )
        async for chunk in stream:
            for choice in chunk.choices:
                delta = choice.delta
                if first is None and (delta.content or delta.tool_calls):
                    first = time.monotonic()
                if delta.content:
                    text.append(delta.content)
                for piece in delta.tool_calls or []:
                    call = pieces.setdefault(piece.index, {"id": "", "name": "", "arguments": ""})
                    call["id"] = piece.id or call["id"]
                    if piece.function is not None:
                        call["name"] += piece.function.name or ""
                        call["arguments"] += piece.function.arguments or ""
                finish = choice.finish_reason or finish
        total = time.monotonic() - started
        calls = [
            Call(p["id"] or f"call_{i}", p["name"], p["arguments"])
            for i, p in sorted(pieces.items())
        ]
        ttft = None if first is None else first - started
        return Reply("".join(text), calls, finish, ttft, total)


class ResponsesSocketTransport:
    """Turns on one Responses WebSocket: the server keeps the conversation, so each turn
    sends only what is new since the last (the tool results), plus the instructions
    and tools (a response never inherits those)."""

    name = "resp"

    def __init__(
        self,
        connection: openai.resources.responses.responses.AsyncResponsesConnection,
        model: str,
        *,
        max_tokens: int = DEFAULT_MAX_TOKENS,
    ):
        self.connection = connection
        self.model = model
        self.max_tokens = max_tokens
        self.previous: str | None = None
        #: messages of the loop's list the server already has
        self.known = 0

    async def complete(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> Reply:
        started = time.monotonic()
        new = messages[self.known :]  # `known` counts the server's own answer too
        instructions = "\n".join(m["content"] for m in messages if m["role"] == "system")
        items: list[dict[str, Any]] = []
        for message in new:
            if message["role"] == "tool":
                items.append(
                    {
                        "type": "function_call_output",
                        "call_id": message["tool_call_id"],
                        "output": message["content"],
                    }
                )
            elif message["role"] != "system":
                items.append({"role": message["role"], "content": message["content"]})
        event: dict[str, Any] = {
            "type": "response.create",
            "model": self.model,
            "instructions": instructions or None,
            "input": items,
            "tools": [{"type": "function", **tool["function"]} for tool in tools],
            "max_output_tokens": self.max_tokens,
        }
        if self.previous is not None:
            event["previous_response_id"] = self.previous
        await self.connection.send(cast(Any, event))
        first: float | None = None
        async for received in self.connection:
            server_event: Any = received  # a union of ~60 event models; read by `type`
            kind = server_event.type
            if first is None and kind in (
                "response.output_text.delta",
                "response.function_call_arguments.delta",
            ):
                first = time.monotonic()
            if kind == "error":
                raise AgentError(f"the server refused the turn: {server_event.error.message}")
            if kind in ("response.completed", "response.incomplete", "response.failed"):
                response = server_event.response
                break
        else:
            raise AgentError("the socket closed before the response ended")
        if response.status == "failed":
            raise AgentError(f"the response failed: {response.error}")
        total = time.monotonic() - started
        self.previous = response.id
        self.known = len(messages) + 1  # and the assistant turn the loop appends next
        calls = [
            Call(call.call_id, call.name, call.arguments)
            for call in (cast(Any, item) for item in response.output)
            if call.type == "function_call"
        ]
        finish = "length" if response.status == "incomplete" else "tool_calls" if calls else "stop"
        ttft = None if first is None else first - started
        return Reply(response.output_text, calls, finish, ttft, total)


async def run_agent(
    transport: Transport,
    question: str,
    *,
    root: Path,
    max_steps: int = DEFAULT_MAX_STEPS,
    on_turn: Callable[[Turn], None] | None = None,
) -> AgentRun:
    """Ask `question`, running tool calls (files under `root`) until a plain answer."""
    started = time.monotonic()
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": SYSTEM_PROMPT},
        {"role": "user", "content": question},
    ]
    run = AgentRun(transport.name, "", messages)
    for step in range(1, max_steps + 1):
        reply = await transport.complete(messages, TOOLS)
        messages.append(reply.as_message())
        results = [(call, run_tool(call.name, call.arguments, root=root)) for call in reply.calls]
        for call, output in results:
            messages.append({"role": "tool", "tool_call_id": call.id, "content": output})
        turn = Turn(step, reply, results)
        run.turns.append(turn)
        if on_turn is not None:
            on_turn(turn)
        if not reply.calls:
            run.answer = reply.text
            run.seconds = time.monotonic() - started
            return run
    raise AgentError(f"no answer without tool calls after {max_steps} steps")


# --- the two transports end to end: connect, run, close ---


def first_model(ids: list[str]) -> str:
    """The model to ask when none was named: the server's first (it serves one)."""
    if not ids:
        raise AgentError("the server lists no models; pass --model")
    return ids[0]


def endpoints(url: str) -> tuple[str, str]:
    """(WebSocket URL, openai base URL) for a server URL such as http://127.0.0.1:8000."""
    parts = urllib.parse.urlsplit(url.rstrip("/"))
    path = parts.path.removesuffix("/v1")
    ws_scheme = "wss" if parts.scheme == "https" else "ws"
    ws_url = urllib.parse.urlunsplit((ws_scheme, parts.netloc, path + "/v1/realtime", "", ""))
    http_url = urllib.parse.urlunsplit((parts.scheme, parts.netloc, path + "/v1", "", ""))
    return ws_url, http_url


async def run_over_socket(
    url: str,
    question: str,
    *,
    root: Path,
    model: str | None = None,
    api_key: str | None = None,
    max_steps: int = DEFAULT_MAX_STEPS,
    on_turn: Callable[[Turn], None] | None = None,
    on_event: Callable[[ClientEvent], None] | None = None,
) -> AgentRun:
    """The agent with every turn on one /v1/realtime socket."""
    started = time.monotonic()
    ws_url, _ = endpoints(url)
    async with RealtimeClient(ws_url, api_key=api_key, model=model, on_event=on_event) as client:
        if client.model is None:  # ask now, so the first turn's latency does not include it
            client.model = first_model([card.id for card in await client.models()])
        run = await run_agent(
            RealtimeTransport(client), question, root=root, max_steps=max_steps, on_turn=on_turn
        )
    run.seconds = time.monotonic() - started
    return run


async def run_over_http(
    url: str,
    question: str,
    *,
    root: Path,
    model: str | None = None,
    api_key: str | None = None,
    max_steps: int = DEFAULT_MAX_STEPS,
    on_turn: Callable[[Turn], None] | None = None,
) -> AgentRun:
    """The agent with every turn a streamed POST /v1/chat/completions (openai SDK)."""
    import openai  # only this transport needs it: pip install openai

    started = time.monotonic()
    _, base_url = endpoints(url)
    # The SDK insists on a key; a server without keys ignores it.
    client = openai.AsyncOpenAI(base_url=base_url, api_key=api_key or "unused", max_retries=0)
    try:
        if model is None:
            model = first_model([card.id for card in (await client.models.list()).data])
        run = await run_agent(
            OpenAITransport(client, model),
            question,
            root=root,
            max_steps=max_steps,
            on_turn=on_turn,
        )
    finally:
        await client.close()
    run.seconds = time.monotonic() - started
    return run


async def run_over_responses_socket(
    url: str,
    question: str,
    *,
    root: Path,
    model: str | None = None,
    api_key: str | None = None,
    max_steps: int = DEFAULT_MAX_STEPS,
    on_turn: Callable[[Turn], None] | None = None,
) -> AgentRun:
    """The agent with every turn on one Responses WebSocket (openai SDK, WebSocket mode)."""
    import openai  # pip install 'openai[realtime]' (the SDK's WebSocket support)

    started = time.monotonic()
    _, base_url = endpoints(url)
    client = openai.AsyncOpenAI(base_url=base_url, api_key=api_key or "unused", max_retries=0)
    try:
        if model is None:
            model = first_model([card.id for card in (await client.models.list()).data])
        async with client.responses.connect() as connection:
            run = await run_agent(
                ResponsesSocketTransport(connection, model),
                question,
                root=root,
                max_steps=max_steps,
                on_turn=on_turn,
            )
    finally:
        await client.close()
    run.seconds = time.monotonic() - started
    return run


# --- printing ---


def _ms(seconds: float | None) -> str:
    return "     -  " if seconds is None else f"{seconds * 1000:7.1f} ms"


def _short(text: str, limit: int = 60) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def turn_printer(transport: str, write: Callable[[str], None] = print) -> Callable[[Turn], None]:
    """An `on_turn` callback printing one line per turn and one per tool call."""

    def show(turn: Turn) -> None:
        reply = turn.reply
        head = f"[{transport:4}] turn {turn.step}  ttft {_ms(reply.ttft)}  total {_ms(reply.total)}"
        if not turn.results:
            cut = " (cut short: max_tokens)" if reply.finish_reason == "length" else ""
            write(f"{head}  answer: {_short(reply.text)!r}{cut}")
            return
        pad = " " * len(head)
        for n, (call, output) in enumerate(turn.results):
            write(f"{head if n == 0 else pad}  {call.name}({call.arguments}) -> {_short(output)!r}")

    return show


def comparison(runs: list[AgentRun]) -> str:
    """A table of the runs: turns, mean time to first token, mean turn time, whole run."""
    lines = [f"{'transport':10} {'turns':>5} {'mean ttft':>11} {'mean turn':>11} {'whole run':>11}"]
    for run in runs:
        ttfts = [t.reply.ttft for t in run.turns if t.reply.ttft is not None]
        totals = [t.reply.total for t in run.turns]
        mean_ttft = statistics.fmean(ttfts) if ttfts else None
        mean_total = statistics.fmean(totals) if totals else None
        lines.append(
            f"{run.transport:10} {len(run.turns):5} {_ms(mean_ttft):>11} {_ms(mean_total):>11}"
            f" {_ms(run.seconds):>11}"
        )
    return "\n".join(lines)


async def compare(
    url: str,
    question: str,
    *,
    root: Path,
    transports: list[str],
    model: str | None = None,
    api_key: str | None = None,
    max_steps: int = DEFAULT_MAX_STEPS,
    write: Callable[[str], None] = print,
) -> list[AgentRun]:
    """Run the agent over each transport in turn, printing turns, answers and a comparison."""
    runs: list[AgentRun] = []
    for name in transports:
        on_turn = turn_printer(name, write)
        if name == "ws":
            run = await run_over_socket(
                url,
                question,
                root=root,
                model=model,
                api_key=api_key,
                max_steps=max_steps,
                on_turn=on_turn,
            )
        elif name == "resp":
            run = await run_over_responses_socket(
                url,
                question,
                root=root,
                model=model,
                api_key=api_key,
                max_steps=max_steps,
                on_turn=on_turn,
            )
        elif name == "http":
            run = await run_over_http(
                url,
                question,
                root=root,
                model=model,
                api_key=api_key,
                max_steps=max_steps,
                on_turn=on_turn,
            )
        else:
            raise ValueError(f"unknown transport {name!r}: ws, resp or http")
        write(f"[{name:4}] answer: {run.answer}")
        write("")
        runs.append(run)
    if len(runs) > 1:
        write(comparison(runs))
    return runs


def main(argv: list[str] | None = None) -> int:
    """`python -m clients.agent`: see clients/agent/README.md."""
    import argparse
    import os
    import sys

    from realtime.client import RealtimeClientError

    parser = argparse.ArgumentParser(
        prog="python -m clients.agent",
        description="A tool-using agent over /v1/realtime, over HTTP and over the Responses"
        " API's WebSocket mode, with per-turn latency.",
    )
    parser.add_argument("question", nargs="?", default=DEFAULT_QUESTION)
    parser.add_argument("--url", default="http://127.0.0.1:8000", help="the server")
    parser.add_argument(
        "--transport",
        choices=["ws", "http", "resp", "both", "all"],
        default="both",
        help="ws: /v1/realtime; http: chat completions; resp: the Responses API's WebSocket"
        " mode; both: ws and http; all: the three",
    )
    parser.add_argument("--model", help="model to ask (default: the server's first)")
    parser.add_argument(
        "--api-key",
        default=os.environ.get("REALTIME_API_KEY"),
        help="the server's API key (default: $REALTIME_API_KEY)",
    )
    parser.add_argument(
        "--root", type=Path, default=WORKSPACE, help="read_file's directory (default %(default)s)"
    )
    parser.add_argument("--max-steps", type=int, default=DEFAULT_MAX_STEPS)
    args = parser.parse_args(argv)
    choices = {"both": ["ws", "http"], "all": ["ws", "http", "resp"]}
    transports = choices.get(args.transport, [args.transport])
    failures: tuple[type[Exception], ...] = (AgentError, RealtimeClientError, OSError)
    try:
        import openai

        failures += (openai.APIError,)  # includes "connection refused"
    except ImportError:
        pass
    try:
        asyncio.run(
            compare(
                args.url,
                args.question,
                root=args.root,
                transports=transports,
                model=args.model,
                api_key=args.api_key,
                max_steps=args.max_steps,
            )
        )
    except ImportError as exc:
        print(f"agent: {exc} (the http transport needs `pip install openai`)", file=sys.stderr)
        return 1
    except failures as exc:
        print(f"agent: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    return 0
