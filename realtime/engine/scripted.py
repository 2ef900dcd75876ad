"""The scripted model: an engine that replays replies written in advance.

Why it exists: demos and tests of tool-using clients need a model that calls tools,
deterministically, on any machine - and neither the echo model nor a random-weight
model can be made to. This engine "generates" scripted text instead, one token per
step, through the normal pipeline: the chat template renders the prompt, the
server's tool parser (`--tool-parser hermes`) turns `<tool_call>` markup in a reply
into real tool calls, and stop tokens, `max_tokens` and cancellation behave as they
do with any model.

The script is a JSON list (a file, or the same list in Python). An entry is either

- a string: a reply given once, in order, to a request no `match` entry claims, or
- an object `{"match": "text", "reply": "..."}`: the reply to every request whose
  prompt contains `text`. When several match, the one whose text occurs nearest the
  end of the prompt wins (ties: the earlier entry), so it is the newest message -
  the user's question, or the tool results just sent back - that decides. Match
  entries are never used up, so a scripted conversation can run again and again
  (the agent example runs it once per transport). `{"reply": "..."}` without
  `match` is the same as a plain string; `"comment"` is ignored (JSON has no comments).

A request that no entry answers fails with an `EngineFailure` saying the script ran
out; only that request fails. A client's warm-up (`EngineRequest.warm_up`, the
Responses API's `generate: false`) is answered at once with no token and uses no
reply.

Tokenizer and template: with `model_dir`, the model's own (prompts look as that
model would see them, and replies end on its EOS token). Without one, the echo
model's tokenizer, so no model download and no torch is needed, with
`SCRIPTED_TEMPLATE`, which renders the whole conversation as plain text: the echo
template renders only the last user message, which would hide tool results from
`match`. Like the echo engine it counts what it does (`stats`) so tests can prove
a cancelled request stopped, and it records every prompt (`prompts`).
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import AsyncGenerator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from realtime.engine.base import EngineOutput, EngineRequest
from realtime.engine.echo import EchoStats, EchoTokenizer, check_context
from realtime.engine.errors import EngineFailure
from realtime.engine.recent import RecentList
from realtime.engine.snapshot import EngineSnapshot
from realtime.model.generation import FinishReason, TokenLogprob
from realtime.model.info import ModelInfo
from realtime.model.model_dir import load_model_dir
from realtime.model.template import ChatTemplate

#: Prompts and replies remembered: a demo looks back a few turns; prompts can be long.
RECENT_PROMPTS = 64

#: The no-model prompt: every message as `role: text`, tool calls in hermes markup,
#: so `match` can see tool results and `prompts` show the whole conversation.
SCRIPTED_TEMPLATE = (
    "{%- macro text(content) -%}"
    "{%- if content is string -%}{{- content -}}"
    "{%- elif content is iterable and content is not mapping -%}"
    "{{- content | selectattr('type', 'equalto', 'text') | map(attribute='text') | join('') -}}"
    "{%- endif -%}"
    "{%- endmacro -%}"
    "{%- if tools -%}"
    "{{- 'tools: ' + (tools | map(attribute='function') | map(attribute='name') | join(', '))"
    " + '\\n' -}}"
    "{%- endif -%}"
    "{%- for message in messages -%}"
    "{{- message.role -}}"
    "{%- if message.tool_call_id is defined -%}{{- ' ' + message.tool_call_id -}}{%- endif -%}"
    "{{- ': ' + text(message.content) -}}"
    "{%- for call in message.tool_calls or [] -%}"
    "{{- '\\n<tool_call>\\n' -}}"
    "{{- {'name': call.function.name, 'arguments': call.function.arguments} | tojson -}}"
    "{{- '\\n</tool_call>' -}}"
    "{%- endfor -%}"
    "{{- '\\n' -}}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- 'assistant: ' -}}{%- endif -%}"
)

#: The context length reported without a model (as the echo model's).
DEFAULT_CONTEXT_LENGTH = 32768

ScriptSource = str | os.PathLike[str] | Sequence[str | Mapping[str, Any]]


class ScriptError(ValueError):
    """The script is not a list of replies; the message names the file and the entry."""


@dataclass(frozen=True, slots=True)
class ScriptEntry:
    reply: str
    #: None: a plain reply, given once in order; else the text a prompt must contain.
    match: str | None = None


def load_script(source: ScriptSource) -> list[ScriptEntry]:
    """The entries of a script file (a path) or of a list given directly."""
    if isinstance(source, (str, os.PathLike)):
        label = os.fspath(source)
        try:
            data: Any = json.loads(Path(source).read_text(encoding="utf-8"))
        except OSError as exc:
            raise ScriptError(f"script {label}: cannot be read ({exc.strerror or exc})") from None
        except ValueError as exc:
            raise ScriptError(f"script {label}: not valid JSON: {exc}") from None
    else:
        label, data = "script", source
    if not isinstance(data, Sequence) or isinstance(data, str):
        raise ScriptError(f"{label}: expected a JSON list of replies, got {type(data).__name__}")
    return [_entry(item, f"{label}[{index}]") for index, item in enumerate(data)]


def _entry(item: Any, where: str) -> ScriptEntry:
    if isinstance(item, str):
        return ScriptEntry(item)
    if not isinstance(item, Mapping):
        raise ScriptError(f"{where}: expected a string or an object, got {type(item).__name__}")
    unknown = set(item) - {"reply", "match", "comment"}
    if unknown:  # a typo such as "mach" must not silently turn an entry into a plain one
        raise ScriptError(
            f"{where}: unknown keys {sorted(unknown)}; an entry has 'reply', 'match', 'comment'"
        )
    reply, match = item.get("reply"), item.get("match")
    if not isinstance(reply, str):
        raise ScriptError(f"{where}: 'reply' must be a string")
    if match is not None and (not isinstance(match, str) or not match):
        raise ScriptError(f"{where}: 'match' must be a non-empty string")
    return ScriptEntry(reply, match)


class ScriptedEngine:
    """`Engine` that answers from a script (see the module docstring for the format).

    `model_dir` (optional) lends its tokenizer, chat template and EOS token;
    `chat_template` overrides the template (a file or inline Jinja, or with a model
    directory also one of its named templates); `delay` is the pause between tokens
    in seconds, so streaming and latency are visible in demos.
    """

    def __init__(
        self,
        script: ScriptSource,
        *,
        model_dir: str | os.PathLike[str] | None = None,
        model_name: str = "scripted",
        delay: float = 0.0,
        chat_template: str | None = None,
        context_length: int = DEFAULT_CONTEXT_LENGTH,
    ):
        """`context_length` is the built-in model's (a model directory brings its own)."""
        self.script = load_script(script)
        self.delay = delay
        self.stats = EchoStats()
        #: The latest prompts received, decoded with special tokens, in arrival order.
        self.prompts: RecentList[str] = RecentList(RECENT_PROMPTS)
        #: The latest replies given, in order (`replies_total` counts them all).
        self.replies_given: RecentList[str] = RecentList(RECENT_PROMPTS)
        self.replies_total = 0
        self._plain = [entry.reply for entry in self.script if entry.match is None]
        self._eos: int | None
        if model_dir is not None:
            files = load_model_dir(Path(model_dir), chat_template=chat_template)
            self._info = files.model_info(name=model_name)
            named = files.special_tokens.get("eos_token")
            named_id = files.tokenizer.token_to_id(named) if named else None
            if named_id is not None and named_id in files.eos_token_ids:
                self._eos = named_id
            else:
                self._eos = min(files.eos_token_ids) if files.eos_token_ids else None
        else:
            template = _template_source(chat_template) if chat_template else SCRIPTED_TEMPLATE
            self._info = ModelInfo(
                name=model_name,
                context_length=context_length,
                tokenizer=EchoTokenizer(),
                chat_template=ChatTemplate(template),
            )
            self._eos = None
        self._started = False

    @property
    def info(self) -> ModelInfo:
        return self._info

    @property
    def ready(self) -> bool:
        return self._started

    @property
    def unavailable_reason(self) -> str | None:
        return None if self._started else "the engine has not started"

    def snapshot(self) -> EngineSnapshot:
        """Its requests all run at once (nothing waits) and it keeps no KV cache."""
        return EngineSnapshot(running=self.stats.active)

    @property
    def remaining(self) -> list[str]:
        """Plain replies not given yet (match entries never run out)."""
        return list(self._plain)

    async def start(self) -> None:
        self._started = True

    async def close(self) -> None:
        self._started = False

    def choose(self, prompt: str) -> str:
        """The reply for `prompt` (using up a plain entry); EngineFailure when none is left."""
        best: tuple[int, str] | None = None
        for entry in self.script:
            if entry.match is None:
                continue
            at = prompt.rfind(entry.match)
            if at >= 0 and (best is None or at > best[0]):
                best = (at, entry.reply)
        if best is not None:
            return best[1]
        if self._plain:
            return self._plain.pop(0)
        tail = prompt[-120:]
        raise EngineFailure(
            f"scripted engine: the script ran out: no reply left after "
            f"{self.replies_total} given, and no 'match' entry found in the prompt, "
            f"which ends {tail!r}"
        )

    async def generate(self, request: EngineRequest) -> AsyncGenerator[EngineOutput, None]:
        check_context(request, self._info.context_length)
        tokenizer = self._info.tokenizer
        prompt = tokenizer.decode(request.prompt_token_ids, skip_special_tokens=False)
        self.prompts.append(prompt)
        if request.warm_up:  # nothing to prefill here, and no script reply is used up
            self.stats.warm_ups += 1
            yield EngineOutput([], None, FinishReason.LENGTH, cached_tokens=0)
            return
        reply = self.choose(prompt)
        self.replies_given.append(reply)
        self.replies_total += 1
        ids = tokenizer.encode(reply)
        if self._eos is not None:
            ids.append(self._eos)  # ends as a model does: on EOS, counted but not shown
        stats = self.stats
        stats.requests_started += 1
        stats.active += 1
        stats.tokens_by_request[request.request_id] = 0
        limit = request.stop.max_tokens
        stop_ids = set(request.stop.stop_token_ids)
        finished = False
        try:
            for n, token_id in enumerate(ids, start=1):
                await asyncio.sleep(self.delay)  # 0 still yields: other requests run
                stats.tokens_generated += 1
                stats.tokens_by_request[request.request_id] = n
                is_eos = self._eos is not None and n == len(ids)
                on_token = is_eos or (token_id in stop_ids and n > request.stop.min_tokens)
                reason: FinishReason | None = None
                if is_eos:
                    reason = FinishReason.EOS
                elif on_token:
                    reason = FinishReason.STOP
                elif limit is not None and n >= limit:
                    reason = FinishReason.LENGTH
                logprobs = (
                    [TokenLogprob(token_id, 0.0, [(token_id, 0.0)])]
                    if request.logprobs is not None
                    else None
                )
                # Mark completion before the last yield: the consumer closes us right after.
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
            # A tokenizer without an EOS token (the echo one): finish without a token.
            finished = True
            yield EngineOutput([], None, FinishReason.EOS, cached_tokens=0 if not ids else None)
        finally:
            stats.active -= 1
            if finished:
                stats.requests_finished += 1
            else:
                stats.requests_cancelled += 1


def _template_source(value: str) -> str:
    """A --chat-template given without a model: a file, or the Jinja text itself."""
    path = Path(value)
    try:
        if path.is_file():
            return path.read_text(encoding="utf-8")
    except (OSError, ValueError):  # too long or odd to be a path: inline Jinja
        pass
    if "{{" in value or "{%" in value:
        return value
    raise ValueError(f"chat template {value!r}: not a file and not jinja")
