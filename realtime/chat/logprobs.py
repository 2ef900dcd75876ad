"""Engine logprobs -> OpenAI's `logprobs.content` entries."""

from __future__ import annotations

from typing import Any

from realtime.model.generation import TokenLogprob
from realtime.model.tokenizer import Tokenizer


def _entry(tokenizer: Tokenizer, token_id: int, logprob: float) -> dict[str, Any]:
    text = tokenizer.token_text(token_id)
    return {"token": text, "logprob": logprob, "bytes": list(text.encode("utf-8"))}


def format_logprobs(
    tokenizer: Tokenizer, entries: list[TokenLogprob], top_k: int
) -> list[dict[str, Any]]:
    out = []
    for e in entries:
        item = _entry(tokenizer, e.token_id, e.logprob)
        item["top_logprobs"] = [_entry(tokenizer, t, lp) for t, lp in e.top[:top_k]]
        out.append(item)
    return out
