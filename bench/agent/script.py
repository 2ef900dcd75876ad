"""The agent every transport replays: a long task, then one tool call and result per turn.

Why scripted calls: the benchmark model has random weights, so it cannot choose a
tool. Each turn the model writes its answer (sampled text, `answer_tokens` long),
and the client then acts as a tool-calling model's client does: it attaches the
turn's function call to that answer and sends the tool's output. So every turn
after the first adds an assistant turn (answer + call) and a ~150-token tool
result, and the context grows by ~200 tokens a turn, from the ~2k-token task on.
The texts come from `bench.multiturn.conversation` (seeded, so each repeat gets a
conversation no cache has seen, and every transport the same one).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from bench.multiturn.conversation import SYSTEM, build

#: The tools the agent declares (flat, as the Responses API writes them).
TOOLS: tuple[dict[str, Any], ...] = (
    {
        "type": "function",
        "name": "run_query",
        "description": "Rows from the metrics database.",
        "parameters": {
            "type": "object",
            "properties": {"sql": {"type": "string"}},
            "required": ["sql"],
        },
    },
    {
        "type": "function",
        "name": "read_log",
        "description": "The newest log lines of a host.",
        "parameters": {
            "type": "object",
            "properties": {"host": {"type": "string"}, "lines": {"type": "integer"}},
            "required": ["host"],
        },
    },
)


@dataclass(frozen=True)
class ToolStep:
    """The call the client attaches to the previous answer, and the tool's output."""

    call_id: str
    name: str
    arguments: str
    output: str


@dataclass(frozen=True)
class AgentScript:
    instructions: str
    task: str
    #: one per turn after the first
    steps: tuple[ToolStep, ...]

    @property
    def turns(self) -> int:
        return 1 + len(self.steps)


def script(seed: int, turns: int, runbook_lines: int) -> AgentScript:
    conversation = build(seed=seed, turns=turns, runbook_lines=runbook_lines)
    steps = []
    for index, result in enumerate(conversation.turns[1:], start=1):
        name = "run_query" if "(run_query)" in result.split("\n", 1)[0] else "read_log"
        arguments = (
            {"sql": f"select * from latency where step = {index}"}
            if name == "run_query"
            else {"host": f"host-{index}", "lines": 3}
        )
        steps.append(ToolStep(f"call_{seed}_{index}", name, json.dumps(arguments), result))
    return AgentScript(SYSTEM, conversation.turns[0], tuple(steps))


def chat_tools() -> list[dict[str, Any]]:
    """`TOOLS` as chat completions nest them."""
    return [
        {"type": "function", "function": {k: v for k, v in tool.items() if k != "type"}}
        for tool in TOOLS
    ]
