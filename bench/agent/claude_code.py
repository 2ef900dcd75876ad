"""A Claude-Code-shaped agent, over the Messages API and over chat completions.

What makes it Claude Code's shape (as Claude Code 2.1 sends it): a long system
prompt in text blocks after a billing line (`x-anthropic-billing-header`) that
the server leaves out, `cache_control` markers, custom tools with `input_schema`,
a `system` turn after the first user turn (the environment), `thinking`
adaptive, `context_management`, `output_config.effort`, `metadata`, the session
header `x-claude-code-session-id`, and the whole history resent every turn as
content blocks: the answer's `text` and the turn's `tool_use`, then a
`tool_result`. The model has random weights and cannot choose a tool, so the
client attaches each turn's call to the answer it received (`bench/agent/script.py`).

`ClaudeCodeMessages` sends that to `/v1/messages` (SSE); `ClaudeCodeChat` sends the
same conversation to `/v1/chat/completions`, the system blocks joined as the
server joins them, so both render the same prompt and differ only in the API.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass
from typing import Any

import httpx
import orjson

from bench.agent.script import TOOLS, AgentScript, chat_tools
from bench.agent.transports import Settings, TurnFailed, TurnTiming

BILLING = "x-anthropic-billing-header: cc_version=2.1.332.bench; cc_entrypoint=sdk-cli;"
ENVIRONMENT = "# Environment\n - Primary working directory: /srv/ops\n - Platform: linux"


@dataclass(frozen=True)
class ClaudeCodeShape:
    """The system prompt's two texts, and the short task the user types."""

    head: str
    body: str
    task: str
    #: a system-role message after the first user turn, where Claude Code puts one
    system_turn: bool = True


def shape(
    script: AgentScript,
    task: str = "Find out why the p99 write latency doubled.",
    *,
    system_turn: bool = True,
) -> ClaudeCodeShape:
    """Claude Code's instructions stand-in: the script's long runbook as the system prompt."""
    return ClaudeCodeShape(script.instructions, script.task, task, system_turn)


def messages_tools() -> list[dict[str, Any]]:
    return [
        {"name": t["name"], "description": t["description"], "input_schema": t["parameters"]}
        for t in TOOLS
    ]


class ClaudeCodeMessages:
    name = "messages (HTTP, Claude Code's shape)"

    def __init__(
        self, base_url: str, script: AgentScript, settings: Settings, form: ClaudeCodeShape
    ) -> None:
        self.client = httpx.AsyncClient(base_url=base_url, timeout=600)
        self.script, self.settings, self.form = script, settings, form
        self.session = str(uuid.uuid4())
        self.messages: list[dict[str, Any]] = [
            {"role": "user", "content": [{"type": "text", "text": form.task}]}
        ]
        if form.system_turn:
            self.messages.append(
                {"role": "system", "content": [{"type": "text", "text": ENVIRONMENT}]}
            )

    async def turn(self, index: int) -> TurnTiming:
        if index:
            step = self.script.steps[index - 1]
            call = {
                "type": "tool_use",
                "id": step.call_id,
                "name": step.name,
                "input": orjson.loads(step.arguments),
            }
            self.messages[-1]["content"].append(call)  # the answer's assistant turn
            result = {"type": "tool_result", "tool_use_id": step.call_id, "content": step.output}
            self.messages.append({"role": "user", "content": [result]})
        ephemeral = {"type": "ephemeral"}
        body = {
            "model": self.settings.model,
            "max_tokens": self.settings.answer_tokens,
            "stream": True,
            "system": [
                {"type": "text", "text": BILLING},
                {"type": "text", "text": self.form.head, "cache_control": ephemeral},
                {"type": "text", "text": self.form.body, "cache_control": ephemeral},
            ],
            "tools": messages_tools(),
            "messages": self.messages,
            "thinking": {"type": "adaptive"},
            "context_management": {"edits": [{"type": "clear_thinking_20251015"}]},
            "output_config": {"effort": "high"},
            "metadata": {"user_id": f'{{"session_id": "{self.session}"}}'},
        }
        headers = {
            "x-claude-code-session-id": self.session,
            "anthropic-version": "2023-06-01",
            "content-type": "application/json",
        }
        sent = time.perf_counter()
        first = 0.0
        texts: list[str] = []
        usage: dict[str, Any] = {}
        async with self.client.stream(
            "POST", "/v1/messages?beta=true", content=orjson.dumps(body), headers=headers
        ) as response:
            if response.status_code != 200:
                raise TurnFailed(f"messages turn {index}: {(await response.aread())[:300]!r}")
            async for line in response.aiter_lines():
                if not line.startswith("data: "):
                    continue
                event = orjson.loads(line[6:])
                kind = event["type"]
                if kind == "content_block_delta":
                    first = first or time.perf_counter()
                    texts.append(event["delta"].get("text", ""))
                elif kind == "message_start":
                    usage = event["message"]["usage"]
                elif kind == "message_delta":
                    usage = event["usage"]
                elif kind == "error":
                    raise TurnFailed(f"messages turn {index}: {event['error']}")
        done = time.perf_counter()
        self.messages.append(
            {"role": "assistant", "content": [{"type": "text", "text": "".join(texts)}]}
        )
        cached = usage.get("cache_read_input_tokens", 0)
        return TurnTiming(
            index,
            (first or done) - sent,
            done - sent,
            usage.get("input_tokens", 0) + cached,
            cached,
            usage.get("output_tokens", 0),
        )

    async def aclose(self) -> None:
        await self.client.aclose()


class ClaudeCodeChat:
    name = "chat completions (HTTP, the same conversation)"

    def __init__(
        self, base_url: str, script: AgentScript, settings: Settings, form: ClaudeCodeShape
    ) -> None:
        self.client = httpx.AsyncClient(base_url=base_url, timeout=600)
        self.script, self.settings = script, settings
        self.messages: list[dict[str, Any]] = [
            # the server joins a message's text parts one per line, and leaves the
            # billing line out: the same system text
            {"role": "system", "content": form.head + "\n" + form.body},
            {"role": "user", "content": form.task},
        ]
        if form.system_turn:
            self.messages.append({"role": "system", "content": ENVIRONMENT})

    async def turn(self, index: int) -> TurnTiming:
        if index:
            step = self.script.steps[index - 1]
            call = {
                "id": step.call_id,
                "type": "function",
                "function": {"name": step.name, "arguments": step.arguments},
            }
            self.messages[-1]["tool_calls"] = [call]
            self.messages.append(
                {"role": "tool", "tool_call_id": step.call_id, "content": step.output}
            )
        body = {
            "model": self.settings.model,
            "messages": self.messages,
            "tools": chat_tools(),
            "max_tokens": self.settings.answer_tokens,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        sent = time.perf_counter()
        first = 0.0
        pieces: list[str] = []
        usage: dict[str, Any] = {}
        async with self.client.stream(
            "POST", "/v1/chat/completions", content=orjson.dumps(body)
        ) as response:
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
