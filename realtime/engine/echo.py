"""The echo model: a deterministic engine that streams back the last user message.

It is a complete model in the pipeline's sense - a tokenizer, a chat template and
a token-level engine - so requests to it travel the same path a real model's do:
template rendering, tokenization, generation, incremental detokenization, stop
strings, delta generation. Its chat template renders only the last user message,
and its engine "generates" the prompt's tokens back one per step (or
`tokens_per_step` per pass of the event loop).

Tokenizer: text is split into pieces of at most 6 UTF-8 bytes (a piece starts at
whitespace or continues a word) and a piece's id is its bytes read as a big-endian
integer behind a 0x01 marker byte. That round-trips without a vocabulary and keeps
every id below 2**49, safe as a JavaScript number.

The engine counts what it does (`stats`) so tests can prove that cancelling a
request or dropping a socket really stopped generation, and it has two fault
switches for tests and demos: `unavailable` (every request fails as if the engine
were down) and `fail_after_tokens` (a request fails mid-stream).
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncGenerator
from dataclasses import dataclass, field

from realtime.engine.base import EngineOutput, EngineRequest
from realtime.engine.errors import (
    EngineFailure,
    EngineRequestError,
    EngineUnavailable,
    RequestPart,
)
from realtime.engine.recent import RecentDict
from realtime.engine.snapshot import EngineSnapshot
from realtime.model.generation import FinishReason, TokenLogprob
from realtime.model.info import ModelInfo
from realtime.model.template import ChatTemplate

ECHO_TEMPLATE = (
    "{%- set ns = namespace(text='') -%}"
    "{%- for message in messages if message.role == 'user' -%}"
    "{%- if message.content is string -%}{%- set ns.text = message.content -%}"
    "{%- else -%}{%- set ns.text = message.content | selectattr('type', 'equalto', 'text')"
    " | map(attribute='text') | join('') -%}{%- endif -%}"
    "{%- endfor -%}"
    "{{- ns.text -}}"
)

_PIECE_BYTES = 6
_WORDS = re.compile(r"\s*\S+|\s+")


class _EchoDecodeStream:
    def __init__(self, tokenizer: EchoTokenizer):
        self._tokenizer = tokenizer

    def step(self, token_id: int) -> str | None:
        return self._tokenizer.token_text(token_id)


class EchoTokenizer:
    """A vocabulary-free reversible tokenizer (see the module docstring)."""

    #: The echo model never emits EOS as a token; it finishes with FinishReason.EOS.
    eos_token_ids: frozenset[int] = frozenset()
    #: The most characters one token stands for: a piece is at most 6 bytes.
    chars_per_token: int = _PIECE_BYTES

    def encode(self, text: str) -> list[int]:
        if text.isascii():  # one byte per character: pieces are plain slices
            return [
                int.from_bytes(b"\x01" + word[i : i + _PIECE_BYTES].encode(), "big")
                for word in _WORDS.findall(text)
                for i in range(0, len(word), _PIECE_BYTES)
            ]
        ids: list[int] = []
        for word in _WORDS.findall(text):
            piece = b""
            for char in word:
                encoded = char.encode("utf-8")
                if piece and len(piece) + len(encoded) > _PIECE_BYTES:
                    ids.append(int.from_bytes(b"\x01" + piece, "big"))
                    piece = b""
                piece += encoded
            if piece:
                ids.append(int.from_bytes(b"\x01" + piece, "big"))
        return ids

    def fewest_tokens(self, text: str) -> int:
        """A floor on `len(self.encode(text))`: a piece is at most 6 bytes, a character
        at least one."""
        return len(text) // _PIECE_BYTES

    def token_text(self, token_id: int) -> str:
        raw = token_id.to_bytes((token_id.bit_length() + 7) // 8, "big")
        return raw[1:].decode("utf-8", errors="replace")

    def decode(self, token_ids: list[int], *, skip_special_tokens: bool = True) -> str:
        return "".join(self.token_text(t) for t in token_ids)

    def is_special(self, text: str) -> bool:
        return False

    def decode_stream(self, *, skip_special_tokens: bool = True) -> _EchoDecodeStream:
        # The echo vocabulary has no special tokens, so there is nothing to skip.
        return _EchoDecodeStream(self)


def check_context(request: EngineRequest, context_length: int) -> None:
    """Refuse a prompt that leaves no room for one token (the pipeline checks it first;
    an engine driven directly must too)."""
    if len(request.prompt_token_ids) >= context_length:
        raise EngineRequestError(
            f"the prompt is {len(request.prompt_token_ids)} tokens; the model's context is "
            f"{context_length} tokens",
            part=RequestPart.PROMPT,
            exceeds_context=True,
        )


@dataclass
class EchoStats:
    """Counters a test can read to prove generation started and stopped."""

    requests_started: int = 0
    requests_finished: int = 0
    requests_cancelled: int = 0
    tokens_generated: int = 0
    active: int = 0
    #: client warm-ups answered without a reply (the scripted engine's)
    warm_ups: int = 0
    #: tokens generated per request id, for per-request assertions (the most recent
    #: requests only: an entry per request kept forever is a leak)
    tokens_by_request: RecentDict[str, int] = field(default_factory=RecentDict)


class EchoEngine:
    def __init__(
        self,
        *,
        model_name: str = "echo",
        delay: float = 0.0,
        context_length: int = 32768,
        tokens_per_step: int = 1,
    ):
        """`delay`: seconds before each token. Without one, `tokens_per_step` tokens are
        generated per pass of the event loop: 1 hands the loop back after every token;
        more stands for an engine faster than the front end (each token is still its
        own output, so its own chunk), as NVIDIA Dynamo's zero-delay echo engine is."""
        if tokens_per_step < 1:
            raise ValueError("tokens_per_step must be at least 1")
        self.delay = delay
        self.tokens_per_step = tokens_per_step
        self.stats = EchoStats()
        self.unavailable: str | None = None
        self.fail_after_tokens: int | None = None
        self._tokenizer = EchoTokenizer()
        self._info = ModelInfo(
            name=model_name,
            context_length=context_length,
            tokenizer=self._tokenizer,
            chat_template=ChatTemplate(ECHO_TEMPLATE),
            owned_by="realtime",
        )
        self._started = False

    @property
    def info(self) -> ModelInfo:
        return self._info

    @property
    def ready(self) -> bool:
        return self._started and self.unavailable is None

    @property
    def unavailable_reason(self) -> str | None:
        if self.unavailable is not None:
            return self.unavailable
        return None if self._started else "the engine has not started"

    async def start(self) -> None:
        self._started = True

    async def close(self) -> None:
        self._started = False

    def snapshot(self) -> EngineSnapshot:
        """Its requests all run at once (nothing waits) and it keeps no KV cache."""
        return EngineSnapshot(running=self.stats.active)

    async def generate(self, request: EngineRequest) -> AsyncGenerator[EngineOutput, None]:
        if self.unavailable is not None:
            raise EngineUnavailable(f"engine unavailable: {self.unavailable}")
        check_context(request, self._info.context_length)
        stats = self.stats
        stats.requests_started += 1
        stats.active += 1
        stats.tokens_by_request[request.request_id] = 0
        finished = False
        try:
            limit = request.stop.max_tokens
            stop_ids = set(request.stop.stop_token_ids)
            prompt = request.prompt_token_ids
            want_logprobs = request.logprobs is not None
            per_step = self.tokens_per_step
            for n, token_id in enumerate(prompt, start=1):
                if self.delay:
                    await asyncio.sleep(self.delay)
                elif per_step == 1 or n % per_step == 1:
                    await asyncio.sleep(0)  # one step: let other sockets run
                if self.fail_after_tokens is not None and n > self.fail_after_tokens:
                    raise EngineFailure("echo engine: injected failure")
                stats.tokens_generated += 1
                stats.tokens_by_request[request.request_id] = n
                logprobs = (
                    [TokenLogprob(token_id, 0.0, [(token_id, 0.0)])] if want_logprobs else None
                )
                reason: FinishReason | None = None
                on_token = token_id in stop_ids and n > request.stop.min_tokens
                if on_token:
                    reason = FinishReason.STOP
                elif limit is not None and n >= limit:
                    reason = FinishReason.LENGTH
                elif n == len(prompt):
                    reason = FinishReason.EOS
                # Mark completion before the last yield: the consumer closes us right after it.
                finished = reason is not None
                yield EngineOutput(
                    [token_id],
                    logprobs,
                    reason,
                    cached_tokens=0 if n == 1 else None,
                    stopped_on_token=on_token,
                )
                if finished:
                    return
            finished = True
            yield EngineOutput([], None, FinishReason.EOS, cached_tokens=0)
        finally:
            stats.active -= 1
            if finished:
                stats.requests_finished += 1
            else:
                stats.requests_cancelled += 1
