"""Random ids for responses and their items: a prefix and 128 random bits.

Ids are never sequential or derived from anything a client sends, so knowing one
response's id says nothing about another's (stored responses are fetched by id).
"""

from __future__ import annotations

import secrets


def new_id(prefix: str) -> str:
    """`prefix_` followed by 32 hex digits (128 bits from the OS's CSPRNG)."""
    return f"{prefix}_{secrets.token_hex(16)}"


def response_id() -> str:
    return new_id("resp")


def message_id() -> str:
    return new_id("msg")


def function_call_id() -> str:
    return new_id("fc")


def function_call_output_id() -> str:
    return new_id("fco")


def reasoning_id() -> str:
    return new_id("rs")


def custom_tool_call_id() -> str:
    return new_id("ctc")


def custom_tool_call_output_id() -> str:
    return new_id("ctco")
