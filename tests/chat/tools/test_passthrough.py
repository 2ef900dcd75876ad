"""passthrough: no parsing; every character is content, exactly as generated."""

from __future__ import annotations

import pytest

from realtime.chat.tools.passthrough import PassthroughToolParser
from tests.chat.tools.harness import run, specs, splits

TOOLS = specs("lookup", "add")


@pytest.mark.parametrize(
    "text", ['  <tool_call>{"name": "lookup", "arguments": {}}</tool_call>\n\n', "", " \n "]
)
def test_passthrough_keeps_every_character(text: str) -> None:
    for pieces in splits(text):
        _, parsed = run(PassthroughToolParser(TOOLS), pieces)
        assert parsed.content == text
        assert not parsed.tool_calls
