"""What generation produces, in the terms every layer shares: why it ended, a token's logprobs.

Engines report these, and the chat logic turns them into OpenAI fields
(`chat/delta.py`, `chat/logprobs.py`); both read them from here.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field


class FinishReason(str, enum.Enum):
    EOS = "eos"  # the model emitted an end-of-sequence token
    STOP = "stop"  # a stop token id or stop string matched
    LENGTH = "length"  # max_tokens or the context window was reached
    CANCELLED = "cancelled"
    ERROR = "error"


@dataclass(slots=True)
class TokenLogprob:
    token_id: int
    logprob: float
    top: list[tuple[int, float]] = field(default_factory=list)
