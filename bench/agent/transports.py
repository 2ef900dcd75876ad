"""One agent turn over each API, timed on the client.

* `ChatHttp`: `POST /v1/chat/completions` (SSE). The client keeps the conversation
  and resends all of it every turn: the answer it received (with the turn's tool
  call) and the tool's output are appended to its messages.
* `ResponsesHttp`: `POST /v1/responses` (SSE) with `previous_response_id` and only
  the new items (the call and its output); the server rebuilds the rest.
* `ResponsesSocket`: the same `response.create` over one WebSocket to
  `/v1/responses` (WebSocket mode), events read until the lane's terminal one.

Each turn records the time from sending the request to the first output event (the
first `response.output_item.added`; in chat the first chunk with content or a tool
call), the time to the terminal event, and the usage the server reported. HTTP
clients keep one connection alive (httpx), so no turn pays a TCP handshake.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Protocol

import httpx
import orjson
from websockets.asyncio.client import ClientConnection, connect

from bench.agent.script import TOOLS, AgentScript, chat_tools

RESPONSES_PATH = "/v1/responses"
CHAT_PATH = "/v1/chat/completions"
#: The lane the socket variant runs on (any name the SDK allows).
LANE = "agent"
TERMINAL = frozenset({"response.completed", "response.incomplete", "response.failed"})
HINT = {"agent_hints": {"speculative_prefill": True}}


@dataclass(frozen=True)
class TurnTiming:
    turn: int
    ttft_s: float
    total_s: float
    input_tokens: int
    cached_tokens: int
    output_tokens: int


@dataclass(frozen=True)
class Settings:
    model: str
    answer_tokens: int
    #: Responses variants ask the server to warm the next turn
    #: (`nvext.agent_hints.speculative_prefill`); the chat baseline does not.
    warm: bool = True


class AgentTransport(Protocol):
    name: str

    async def turn(self, index: int) -> TurnTiming: ...

    async def aclose(self) -> None: ...


class TurnFailed(RuntimeError):
    pass


class ChatHttp:
    name = "chat completions (HTTP, whole history)"

    def __init__(self, base_url: str, script: AgentScript, settings: Settings) -> None:
        self.client = httpx.AsyncClient(base_url=base_url, timeout=600)
        self.script = script
        self.settings = settings
        self.messages: list[dict[str, Any]] = [
            {"role": "system", "content": script.instructions},
            {"role": "user", "content": script.task},
        ]

    async def turn(self, index: int) -> TurnTiming:
        if index:
            step = self.script.steps[index - 1]
            call = {
                "id": step.call_id,
                "type": "function",
                "function": {"name": step.name, "arguments": step.arguments},
            }
            self.messages[-1]["tool_calls"] = [call]  # the answer's assistant message
            if not self.messages[-1]["content"]:
                self.messages[-1]["content"] = None
            self.messages.append(
                {"role": "tool", "tool_call_id": step.call_id, "content": step.output}
            )
        body = {
            "model": self.settings.model,
            "messages": self.messages,
            "tools": chat_tools(),
            "max_completion_tokens": self.settings.answer_tokens,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        sent = time.perf_counter()
        first = 0.0
        pieces: list[str] = []
        usage: dict[str, Any] = {}
        async with self.client.stream("POST", CHAT_PATH, content=orjson.dumps(body)) as response:
            if response.status_code != 200:
                raise TurnFailed(f"chat turn {index}: {(await response.aread())[:300]!r}")
            async for line in response.aiter_lines():
                if not line.startswith("data: ") or line == "data: [DONE]":
                    continue
                chunk = orjson.loads(line[6:])
                if "error" in chunk:
                    raise TurnFailed(f"chat turn {index}: {chunk['error']}")
                usage = chunk.get("usage") or usage
                for choice in chunk.get("choices") or ():
                    delta = choice.get("delta") or {}
                    if delta.get("content") or delta.get("tool_calls"):
                        first = first or time.perf_counter()
                        pieces.append(delta.get("content") or "")
        done = time.perf_counter()
        self.messages.append({"role": "assistant", "content": "".join(pieces)})
        details = usage.get("prompt_tokens_details") or {}
        return TurnTiming(
            index,
            (first or done) - sent,
            done - sent,
            usage.get("prompt_tokens", 0),
            details.get("cached_tokens", 0) or 0,
            usage.get("completion_tokens", 0),
        )

    async def aclose(self) -> None:
        await self.client.aclose()


def responses_body(
    script: AgentScript, settings: Settings, index: int, previous_id: str | None
) -> dict[str, Any]:
    """Turn `index`'s request: the task, or the turn's call and output after the previous."""
    if index == 0:
        items: list[dict[str, Any]] = [{"role": "user", "content": script.task}]
    else:
        step = script.steps[index - 1]
        items = [
            {
                "type": "function_call",
                "call_id": step.call_id,
                "name": step.name,
                "arguments": step.arguments,
            },
            {"type": "function_call_output", "call_id": step.call_id, "output": step.output},
        ]
    body: dict[str, Any] = {
        "model": settings.model,
        "instructions": script.instructions,  # never carried over, so sent every turn
        "input": items,
        "tools": list(TOOLS),
        "max_output_tokens": settings.answer_tokens,
    }
    if previous_id is not None:
        body["previous_response_id"] = previous_id
    if settings.warm:
        body["nvext"] = HINT
    return body


class _ResponsesTurn:
    """The events of one response, folded into its timing."""

    def __init__(self, index: int) -> None:
        self.index = index
        self.sent = time.perf_counter()
        self.first = 0.0
        self.final: dict[str, Any] | None = None

    def feed(self, event: dict[str, Any]) -> bool:
        """True at the terminal event."""
        kind = event.get("type")
        if kind == "error":
            raise TurnFailed(f"responses turn {self.index}: {event}")
        if kind == "response.output_item.added" and not self.first:
            self.first = time.perf_counter()
        if kind in TERMINAL:
            if kind == "response.failed":
                raise TurnFailed(f"responses turn {self.index}: {event['response'].get('error')}")
            self.final = event["response"]
            return True
        return False

    def timing(self) -> tuple[str, TurnTiming]:
        done = time.perf_counter()
        if self.final is None:
            raise TurnFailed(f"responses turn {self.index}: the stream ended without a response")
        usage = self.final.get("usage") or {}
        return self.final["id"], TurnTiming(
            self.index,
            (self.first or done) - self.sent,
            done - self.sent,
            usage.get("input_tokens", 0),
            (usage.get("input_tokens_details") or {}).get("cached_tokens", 0),
            usage.get("output_tokens", 0),
        )


class ResponsesHttp:
    name = "responses (HTTP, previous_response_id)"

    def __init__(
        self,
        base_url: str,
        script: AgentScript,
        settings: Settings,
        headers: dict[str, str] | None = None,
    ) -> None:
        """`headers`: sent with every turn (a session header, for a proxy's affinity)."""
        self.client = httpx.AsyncClient(base_url=base_url, timeout=600, headers=headers)
        self.script = script
        self.settings = settings
        self.previous: str | None = None

    async def turn(self, index: int) -> TurnTiming:
        body = responses_body(self.script, self.settings, index, self.previous)
        body["stream"] = True
        turn = _ResponsesTurn(index)
        async with self.client.stream(
            "POST", RESPONSES_PATH, content=orjson.dumps(body)
        ) as response:
            if response.status_code != 200:
                raise TurnFailed(f"responses turn {index}: {(await response.aread())[:300]!r}")
            async for line in response.aiter_lines():
                if line.startswith("data: ") and turn.feed(orjson.loads(line[6:])):
                    break
        self.previous, timing = turn.timing()
        return timing

    async def aclose(self) -> None:
        await self.client.aclose()


class ResponsesSocket:
    """WebSocket mode: one socket for the whole loop, every event on lane `LANE`."""

    name = "responses (WebSocket mode, previous_response_id)"

    def __init__(self, ws: ClientConnection, script: AgentScript, settings: Settings) -> None:
        self.ws = ws
        self.script = script
        self.settings = settings
        self.previous: str | None = None

    @classmethod
    async def open(cls, ws_url: str, script: AgentScript, settings: Settings) -> ResponsesSocket:
        ws = await connect(ws_url + RESPONSES_PATH, compression=None, max_size=None)
        return cls(ws, script, settings)

    async def turn(self, index: int) -> TurnTiming:
        body = responses_body(self.script, self.settings, index, self.previous)
        body.update(type="response.create", stream_id=LANE)
        turn = _ResponsesTurn(index)
        await self.ws.send(orjson.dumps(body).decode())
        while True:
            event = orjson.loads(await self.ws.recv())
            if event.get("stream_id") != LANE:
                raise TurnFailed(f"socket turn {index}: an event without the lane: {event}")
            if turn.feed(event):
                break
        self.previous, timing = turn.timing()
        return timing

    async def aclose(self) -> None:
        await self.ws.close()


async def socket_mode_available(ws_url: str) -> str | None:
    """None when the server accepts a WebSocket at /v1/responses; else why not."""
    try:
        ws = await connect(ws_url + RESPONSES_PATH, compression=None, open_timeout=10)
    except Exception as exc:  # any refusal means "not available"
        return f"{type(exc).__name__}: {exc}"[:200]
    await ws.close()
    return None
