"""`text_completion` chunks for /v1/completions, and their fold into one response.

OpenAI streams this endpoint with the same object type as the response
(`text_completion`), one choice per prompt, `finish_reason` on each choice's last
chunk and, with `stream_options.include_usage`, a final chunk with empty
`choices` and the usage. Logprobs use the completions shape: parallel lists of
tokens, their logprobs, `{token: logprob}` alternatives and character offsets.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Sequence
from typing import Any

from realtime.chat.delta import finish_reason_name
from realtime.model.generation import FinishReason, TokenLogprob
from realtime.model.tokenizer import Tokenizer


def new_text_completion_id() -> str:
    return f"cmpl-{uuid.uuid4().hex}"


class CompletionChunks:
    def __init__(
        self,
        *,
        model: str,
        prompt_tokens: list[int],
        include_usage: bool,
        logprobs: int | None,
        system_fingerprint: str | None,
        completion_id: str | None = None,
    ):
        self.id = completion_id or new_text_completion_id()
        self.created = int(time.time())
        self.model = model
        self.system_fingerprint = system_fingerprint
        self.prompt_tokens = prompt_tokens  # per choice
        self.completion_tokens = [0] * len(prompt_tokens)
        self.include_usage = include_usage
        self.logprobs = logprobs
        self._offsets = [0] * len(prompt_tokens)

    def usage(self) -> dict[str, Any]:
        prompt, completion = sum(self.prompt_tokens), sum(self.completion_tokens)
        return {
            "prompt_tokens": prompt,
            "completion_tokens": completion,
            "total_tokens": prompt + completion,
        }

    def text_chunk(
        self,
        index: int,
        text: str,
        *,
        token_ids: Sequence[int] = (),
        logprobs: list[TokenLogprob] | None = None,
        tokenizer: Tokenizer | None = None,
    ) -> dict[str, Any] | None:
        """A chunk for new text of choice `index` (None when there is nothing to send)."""
        self.completion_tokens[index] += len(token_ids)
        shaped = None
        if self.logprobs is not None and logprobs and tokenizer is not None:
            shaped = self._shape_logprobs(index, logprobs, tokenizer)
        if not text and shaped is None:
            return None
        return self._chunk(index, text, shaped, None)

    def echo_chunk(self, index: int, prompt_text: str) -> dict[str, Any]:
        self._offsets[index] += len(prompt_text)
        return self._chunk(index, prompt_text, None, None)

    def finish_chunk(self, index: int, reason: FinishReason) -> dict[str, Any]:
        return self._chunk(index, "", None, finish_reason_name(reason))

    def usage_chunk(self) -> dict[str, Any]:
        return {**self._base([]), "usage": self.usage()}

    def _shape_logprobs(
        self, index: int, entries: list[TokenLogprob], tokenizer: Tokenizer
    ) -> dict[str, Any]:
        tokens, token_logprobs, top, offsets = [], [], [], []
        k = self.logprobs or 0
        for entry in entries:
            token = tokenizer.token_text(entry.token_id)
            tokens.append(token)
            token_logprobs.append(entry.logprob)
            alternatives = {tokenizer.token_text(t): lp for t, lp in entry.top[:k]}
            top.append(alternatives if k else None)
            offsets.append(self._offsets[index])
            self._offsets[index] += len(token)
        return {
            "tokens": tokens,
            "token_logprobs": token_logprobs,
            "top_logprobs": top,
            "text_offset": offsets,
        }

    def _base(self, choices: list[dict[str, Any]]) -> dict[str, Any]:
        chunk: dict[str, Any] = {
            "id": self.id,
            "object": "text_completion",
            "created": self.created,
            "model": self.model,
            "system_fingerprint": self.system_fingerprint,
            "choices": choices,
        }
        if self.include_usage:
            chunk["usage"] = None
        return chunk

    def _chunk(
        self, index: int, text: str, logprobs: dict[str, Any] | None, finish: str | None
    ) -> dict[str, Any]:
        return self._base(
            [{"index": index, "text": text, "logprobs": logprobs, "finish_reason": finish}]
        )


def fold_completion_chunks(chunks: list[dict[str, Any]]) -> dict[str, Any]:
    """The non-streamed `text_completion` from the chunks a stream would carry."""
    if not chunks:
        raise ValueError("no chunks to fold")
    first = chunks[0]
    choices: dict[int, dict[str, Any]] = {}
    usage = None
    for chunk in chunks:
        usage = chunk.get("usage") or usage
        for piece in chunk["choices"]:
            choice = choices.setdefault(
                piece["index"],
                {"index": piece["index"], "text": "", "logprobs": None, "finish_reason": None},
            )
            choice["text"] += piece["text"]
            if piece["logprobs"] is not None:
                merged = choice["logprobs"] or {
                    "tokens": [],
                    "token_logprobs": [],
                    "top_logprobs": [],
                    "text_offset": [],
                }
                for key in merged:
                    merged[key] += piece["logprobs"][key]
                choice["logprobs"] = merged
            if piece["finish_reason"] is not None:
                choice["finish_reason"] = piece["finish_reason"]
    return {
        "id": first["id"],
        "object": "text_completion",
        "created": first["created"],
        "model": first["model"],
        "system_fingerprint": first["system_fingerprint"],
        "choices": [choices[i] for i in sorted(choices)],
        "usage": usage,
    }
